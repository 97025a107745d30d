"""A real NPU's profile read instead of an estimate: a small profile in the Ascend PyTorch Profiler's layout
(ASCEND_PROFILER_OUTPUT/ with step_trace_time.csv, op_statistic.csv, kernel_details.csv, trace_view.json) gives
measured findings, named by the user's line where the trace has call stacks."""

from __future__ import annotations

import csv
import json

import pytest

from ascendify.advise import profile


def _csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


@pytest.fixture
def prof(tmp_path):
    out = tmp_path / "host_123_20260101_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    _csv(out / "step_trace_time.csv", ["Device_id", "Step", "Computing", "Communication(Not Overlapped)",
                                       "Overlapped", "Communication", "Free", "Stage", "Bubble",
                                       "Communication(Not Overlapped and Exclude Receive)", "Preparing"],
         [[0, 1, 4000, 0, 0, 0, 6000, 10000, 0, 0, 50], [0, 2, 4200, 0, 0, 0, 5800, 10000, 0, 0, 40]])
    _csv(out / "op_statistic.csv", ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)",
                                    "Avg Time(us)", "Max Time(us)", "Ratio(%)"],
         [["MatMulV2", "AI_CORE", 20, 3000, 100, 150, 200, 60], ["NonZero", "AI_CPU", 4, 1600, 300, 400, 500, 30]])
    head = ["Step Id", "Name", "Type", "OP State", "Accelerator Core", "Start Time(us)", "Duration(us)",
            "Wait Time(us)", "Block Num", "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats",
            "Output Shapes", "Output Data Types", "Output Formats"]
    rows = []
    for step in (1, 2):
        for i in range(5):
            rows.append([step, f"aclnnAdd_{i}", "Add", "dynamic", "AI_VECTOR_CORE", 0, 10, 0, 8, "N/A",
                         f'"{8 + i + step * 10},128"', "FLOAT", "ND", "", "FLOAT", "ND"])
        rows.append([step, "MatMul", "MatMulV2", "static", "AI_CORE", 0, 150, 0, 20, "NO", '"512,512;512,512"',
                     "FLOAT;FLOAT", "ND;ND", "", "FLOAT", "ND"])
        rows.append([step, "Cast", "Cast", "static", "AI_VECTOR_CORE", 0, 30, 0, 8, "N/A", '"512"', "DOUBLE", "ND",
                     "", "FLOAT", "ND"])
    _csv(out / "kernel_details.csv", head, rows)
    events = [
        {"ph": "X", "name": "aten::item", "ts": 100, "dur": 500, "tid": 7, "pid": 1,
         "args": {"Call stack": "/site-packages/torch/_tensor.py(1): item;/home/user/proj/train.py(42): <module>"}},
        {"ph": "X", "name": "AscendCL@aclrtSynchronizeStream", "ts": 150, "dur": 300, "tid": 7, "pid": 1},
        {"ph": "X", "name": "AscendCL@aclrtSynchronizeStream", "ts": 5000, "dur": 300, "tid": 7, "pid": 1},
    ]
    (out / "trace_view.json").write_text(json.dumps({"traceEvents": events}))
    return tmp_path


def test_measured_findings(prof):
    r = profile.analyze_profile(str(prof))  # the parent of *_ascend_pt: the output is found
    assert r.source == "profile" and r.estimate["measured"] and r.estimate["step_ms"] == pytest.approx(10.0)
    by = {f.rule: f for f in r.findings}
    assert by["ADV601"].evidence["free_ms"] == pytest.approx(5.9) and by["ADV601"].weight_basis.startswith("measured")
    assert by["ADV301"].evidence["op"] == "NonZero" and by["ADV301"].weight_ms == pytest.approx(0.8)
    assert by["ADV302"].evidence["ops"] == {"Cast": 2}
    assert by["ADV201"].evidence["shapes_per_op"] == {"Add": 10}
    assert by["ADV501"].evidence["kernels"] == 2
    sync = by["ADV101"]
    assert (sync.file, sync.line) == ("/home/user/proj/train.py", 42) and sync.evidence["per_step"] == 1
    assert r.findings[0].rule == "ADV601"  # the heaviest first
    assert profile.find_output(str(prof / "host_123_20260101_ascend_pt")).endswith("ASCEND_PROFILER_OUTPUT")


def test_not_a_profile(tmp_path):
    with pytest.raises(ValueError, match="no ASCEND_PROFILER_OUTPUT"):
        profile.find_output(str(tmp_path))
    (tmp_path / "ASCEND_PROFILER_OUTPUT").mkdir()
    with pytest.raises(ValueError, match="none of step_trace_time.csv"):
        profile.analyze_profile(str(tmp_path))


def test_the_front_end_prints_and_writes_a_profiles_findings(prof, tmp_path, capsys):
    from ascendify import cli

    assert cli.main(["advise", "--profile", str(prof), "--json", str(tmp_path / "p.json"), "--html",
                     str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    assert "Measured step on the profiled NPU: 10.00 ms" in out and "(operator NonZero)" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert json.loads((tmp_path / "p.json").read_text())["source"] == "profile"
    assert "Make it fast on the NPU" in (tmp_path / "h" / "advise.html").read_text()
