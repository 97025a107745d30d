"""``torch_npu.profiler`` and ``torch_npu.npu.mstx`` on the emulated npu: the Ascend performance-tuning recipe runs
unchanged and writes the Ascend PyTorch Profiler's layout (``data/ascend_profiler_layout.json``)."""

from __future__ import annotations

import csv
import json
import re
import warnings

import pytest
import torch

from ascendify.core import knowledge


@pytest.fixture(scope="module")
def torch_npu(emulator):
    import torch_npu

    return torch_npu


def _read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


def _train_step(model, opt):
    x = torch.randn(8, 16).npu()
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.fixture(scope="module")
def recipe(torch_npu, tmp_path_factory):
    """The recipe of Ascend's performance-tuning guide, as users write it, with msTX ranges and a CPU op."""
    out = tmp_path_factory.mktemp("prof") / "result"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    experimental_config = torch_npu.profiler._ExperimentalConfig(
        export_type=torch_npu.profiler.ExportType.Text, profiler_level=torch_npu.profiler.ProfilerLevel.Level0,
        msprof_tx=False, aic_metrics=torch_npu.profiler.AiCMetrics.AiCoreNone, l2_cache=False, op_attr=False,
        data_simplification=False, record_op_args=False, gc_detect_threshold=None)
    with torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
            schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=2, repeat=1, skip_first=1),
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(out), worker_name="worker0"),
            record_shapes=True, profile_memory=True, with_stack=False,
            experimental_config=experimental_config) as prof:
        for _ in range(4):
            rid = torch_npu.npu.mstx.range_start("train_step")
            _train_step(model, opt)
            torch_npu.npu.mstx.range_end(rid)
            torch_npu.npu.mstx.mark("stepped")
            torch.ones(5).cumsum(0)  # a CPU op: no device task
            prof.step()
    folders = list(out.iterdir())
    assert len(folders) == 1
    return folders[0], prof


def test_the_recipe_writes_the_documented_folder(recipe):
    folder, _ = recipe
    spec = knowledge.load("ascend_profiler_layout")
    assert re.fullmatch(r"worker0_\d+_\d{17}_ascend_pt", folder.name)
    out = folder / "ASCEND_PROFILER_OUTPUT"
    names = {p.name for p in out.iterdir()}
    assert names == {"trace_view.json", "kernel_details.csv", "operator_details.csv", "step_trace_time.csv",
                     "op_statistic.csv", "operator_memory.csv", "memory_record.csv"}
    for name, f in spec["files"].items():
        if name.endswith(".csv"):
            header, _ = _read(out / name)
            expected = ([f["step_column"]] if "step_column" in f else []) + f["headers"]
            assert header == expected, name
    info = json.loads((folder / "profiler_info.json").read_text())
    assert info["config"]["experimental_config"]["_profiler_level"] == "Level0"
    assert info["config"]["common_config"]["schedule"]["skip_first"] == 1
    meta = json.loads((folder / "profiler_metadata.json").read_text())
    assert meta["ascendify"]["emulated"] is True and "host times" in meta["ascendify"]["times"]


def test_device_tasks_are_the_npu_ops_of_the_recorded_steps(recipe):
    folder, _ = recipe
    out = folder / "ASCEND_PROFILER_OUTPUT"
    _, kernels = _read(out / "kernel_details.csv")
    assert {k["Step Id"] for k in kernels} == {"1", "2"}  # skip_first=1, active=2
    per_step = [sorted(k["Name"] for k in kernels if k["Step Id"] == s) for s in ("1", "2")]
    assert per_step[0] == per_step[1]  # the same training step twice
    names = set(per_step[0])
    assert {"addmm", "relu", "mm", "threshold_backward"} <= names
    assert "cumsum" not in names and "as_strided" not in names  # a CPU op; a view (no device task)
    assert all(k["Accelerator Core"] == "AI_CORE" and float(k["Duration(us)"]) > 0 for k in kernels)
    addmm = next(k for k in kernels if k["Name"] == "addmm")
    assert addmm["Type"] == "Addmm" and addmm["Input Shapes"].startswith("32;8,16;16,32")
    _, stats = _read(out / "op_statistic.csv")
    assert sum(int(s["Count"]) for s in stats) == len(kernels)
    assert abs(sum(float(s["Ratio(%)"]) for s in stats) - 100) < 0.1
    _, ops = _read(out / "operator_details.csv")
    linear = [o for o in ops if o["Name"] == "aten::linear"]
    assert linear and all(float(o["Device Total Duration(us)"]) > 0 for o in linear)
    assert not any(o["Name"] == "aten::cumsum" for o in ops)


def test_step_times_and_memory_on_the_npu(recipe):
    folder, _ = recipe
    out = folder / "ASCEND_PROFILER_OUTPUT"
    _, steps = _read(out / "step_trace_time.csv")
    assert [s["Step"] for s in steps] == ["1", "2"]
    _, kernels = _read(out / "kernel_details.csv")
    for s in steps:
        busy = sum(float(k["Duration(us)"]) for k in kernels if k["Step Id"] == s["Step"])
        assert float(s["Computing"]) == pytest.approx(busy, rel=1e-3, abs=1.0)  # one stream: no overlap
        assert float(s["Free"]) > 0 and float(s["Communication"]) == 0
    _, records = _read(out / "memory_record.csv")
    assert records and {r["Device Type"] for r in records} == {"NPU:0"} and {r["Component"] for r in records} == {
        "PTA"}
    assert max(float(r["Total Allocated(MB)"]) for r in records) > 0
    _, allocs = _read(out / "operator_memory.csv")
    assert any(a["Name"] == "aten::addmm" and float(a["Size(KB)"]) == 1.0 for a in allocs)  # 8x32 fp32


def test_the_trace_has_npu_tasks_flows_and_mstx_ranges(recipe):
    folder, prof = recipe
    trace = json.loads((folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    procs = {e["args"]["name"]: e["pid"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"Python", "Ascend Hardware", "Overlap Analysis"} <= set(procs)
    tasks = [e for e in trace if e["ph"] == "X" and e["pid"] == procs["Ascend Hardware"]]
    flows = [e for e in trace if e.get("cat") == "async_npu"]
    assert tasks and len(flows) == 2 * len(tasks)
    assert all(re.fullmatch(r"\d+\.\d{3}", e["ts"]) for e in tasks)  # us with ns digits, as torch_npu writes
    ranges = [e for e in trace if e.get("cat") == "mstx" and e["ph"] == "X"]
    marks = [e for e in trace if e.get("cat") == "mstx" and e["ph"] == "i"]
    assert [e["name"] for e in ranges] == ["train_step"] * 2 and [e["name"] for e in marks] == ["stepped"] * 2
    host_tids = {e["tid"] for e in trace if e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep")}
    assert {e["tid"] for e in ranges} == host_tids
    assert prof.key_averages().table(row_limit=3)  # torch's profiler API, as torch_npu's profile has it


def test_only_cpu_activity_gives_no_device_tasks_and_export_chrome_trace(torch_npu, tmp_path):
    x = torch.ones(4, 4).npu()
    with torch_npu.profiler.profile(activities=[torch_npu.profiler.ProfilerActivity.CPU]) as prof:
        (x @ x).sum()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e.get("name") == "aten::mm" and e.get("cat") == "cpu_op" for e in trace)
    assert not any(e.get("cat") == "kernel" for e in trace)
    with torch_npu.profiler.profile() as prof:  # the default: CPU and NPU
        (x @ x).sum()
    prof.export_chrome_trace(str(tmp_path / "u.json"))
    trace = json.loads((tmp_path / "u.json").read_text())
    assert any(e.get("name") == "mm" and e.get("cat") == "kernel" for e in trace)


def test_mstx_checks_its_arguments_as_torch_npu_does(torch_npu):
    mstx = torch_npu.npu.mstx
    assert mstx is torch.npu.mstx and mstx.annotate is torch_npu.npu.mstx.annotate
    with pytest.warns(UserWarning, match="Invalid message for mstx.mark"):
        mstx.mark("")
    with pytest.warns(UserWarning, match="Invalid domain"):
        assert mstx.range_start("x", domain="") == 0
    with pytest.warns(UserWarning, match="Invalid stream"):
        assert mstx.range_start("x", stream=1) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rid = mstx.range_start("outside a profile")  # nothing records it; no error
        assert rid > 0
        mstx.range_end(rid)

        @mstx.mstx_range("decorated")
        def f(a):
            return a + 1

        @mstx.annotate()
        def g(a):
            return a * 2

        with mstx.annotate("block"):
            assert f(1) == 2 and g(2) == 4
        assert mstx.range_push("nested") == 0 and mstx.range_pop() == 0
