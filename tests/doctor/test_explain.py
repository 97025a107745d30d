"""``ascendify doctor --explain``: the known-error knowledge base (data/known_errors.json) on sample logs, one per
family, written from the real messages the entries cite."""

from __future__ import annotations

import json
import re

import pytest

from ascendify import cli
from ascendify.core import knowledge
from ascendify.doctor import explain

from .fakes import FIXTURES

LOGS = FIXTURES / "logs"

EXPECTED = {
    "libraries.log": {"cann-lib-missing", "driver-lib-missing"},
    "versions.log": {"pip-torch-npu-requires-torch", "torch-npu-undefined-symbol", "two-accelerators"},
    "availability.log": {"device-unavailable", "err00100", "visible-devices-invalid", "npu-is-available-false"},
    "busy.log": {"npu-smi-dcmi-busy", "resource-busy"},
    "memory.log": {"npu-oom"},
    "hccl.log": {"hccl-op-failed", "hccl-socket-timeout", "hccl-link-timeout"},
    "cann_codes.log": {"ez9999", "op-no-binary", "ee9999", "eh9999", "el9999", "aicore-exception", "err99999",
                       "set-device-failed-opp"},
    "emulator.log": {"emulator-refused", "emulator-fidelity", "cpu-fallback", "emulator-not-emulated",
                     "emulator-multi-device-backward"},
    "migration.log": {"torch-not-compiled-cuda", "cpu-fallback"},
    "project.log": {"torchvision-not-loadable", "module-not-found", "data-file-missing", "network-unreachable"},
    "clean.log": set(),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_family_log_finds_exactly_its_entries(name):
    hits = explain.match_text((LOGS / name).read_text())
    assert {h["entry"]["id"] for h in hits} == EXPECTED[name]


def test_every_family_has_a_sample_log():
    covered = {e["family"] for e in explain.entries() if any(e["id"] in ids for ids in EXPECTED.values())}
    assert covered == set(knowledge.load("known_errors")["families"])


def test_every_entry_is_complete_and_matches_its_own_example():
    ids = set()
    for e in explain.entries():
        assert e["id"] not in ids
        ids.add(e["id"])
        for key in ("title", "cause", "fix", "family"):
            assert e[key].strip(), (e["id"], key)
        assert e["sources"] and e["patterns"]
        for p in e["patterns"]:
            re.compile(p)
        own = {h["entry"]["id"] for h in explain.match_text(e["example"])}
        assert e["id"] in own, e["id"]


def test_summary_keeps_line_numbers_and_order():
    groups = explain.summarize(explain.match_text((LOGS / "hccl.log").read_text()))
    assert [g["id"] for g in groups] == ["hccl-op-failed", "hccl-socket-timeout", "hccl-link-timeout"]
    assert groups[1]["matches"][0]["line_no"] == 2
    assert groups[2]["matches"][0]["line_no"] == 3 and len(groups[2]["matches"]) == 2


def test_cli_explain_text_json_stdin_and_exit_codes(capsys, monkeypatch):
    assert cli.main(["doctor", "--explain", str(LOGS / "memory.log")]) == 0
    out = capsys.readouterr().out
    assert "[npu-oom]" in out and "line 2:" in out and "PYTORCH_NPU_ALLOC_CONF" in out and "source:" in out

    assert cli.main(["doctor", "--explain", str(LOGS / "clean.log")]) == 1
    assert "no known error found" in capsys.readouterr().out

    assert cli.main(["doctor", "--explain", str(LOGS / "busy.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"].endswith("busy.log")
    assert [m["id"] for m in data["matches"]] == ["npu-smi-dcmi-busy", "resource-busy"]
    assert set(data["matches"][0]) >= {"id", "family", "cause", "fix", "sources", "patterns", "matches"}

    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("EI0006: Getting socket times out\n"))
    assert cli.main(["doctor", "--explain"]) == 0
    assert "[hccl-socket-timeout]" in capsys.readouterr().out


def test_cli_explain_bad_input_names_the_file(capsys, tmp_path):
    assert cli.main(["doctor", "--explain", str(tmp_path / "missing.log")]) == 2
    assert f"{tmp_path / 'missing.log'}: no such file" in capsys.readouterr().err
    assert cli.main(["doctor", "--explain", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_cli_explain_text_fits_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["doctor", "--explain", str(LOGS / "memory.log")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # every line fits, except one word longer than the width (an address), which is never split
    assert all(len(x) <= 80 or " " not in x.strip() for x in lines), [x for x in lines if len(x) > 80]
    assert any(x.startswith("    ") for x in lines)  # a long cause or fix continues, indented
    assert "PYTORCH_NPU_ALLOC_CONF" in out


# 507035 as CANN and torch_npu really write it (lines from the issues the entry cites), and lines that carry the
# number without being that error
CODE_507035 = [
    "[W1215 11:30:10.136265096 NPUStream.cpp:545] Warning: NPU warning, error code is 507035[Error]:",
    "EH9999: [PID: 275] 2025-08-28-02:33:28.436.891 wait for compute device to finish failed, runtime result = "
    "507035.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
    "EZ9903: [PID: 6388] 2025-09-18-06:56:43.611.115 rtGeneralCtrl failed, runtime error code: 507035",
    "[ERROR] aclrtSynchronizeStream(stream) failed: 507035 (npu_validation/Adds/adds/main.cpp:84)",
    "RuntimeError: NPU function error: call aclnnNonzero failed, error code:507035",
    "RuntimeError: NPU function error: call aclnnInplaceUniform failed, error code = 507035",
    "[ERROR] 2025-09-18-06:56:43 (PID:6388, Device:7, RankID:-1) ERR99999 UNKNOWN applicaiton exception: 507035",
]
NOT_507035 = [
    "EZ9999: The error from device(chipId:3, dieId:0), serial number is 507035, there is an exception",
    "[ERROR] 2025-09-18-06:56:43 (PID:507035, Device:7, RankID:-1) ERR00100 PTA call acl api failed",
    "EZ9999: [PID: 507035] 2025-09-18-06:56:43.611.115 ERR99999 UNKNOWN applicaiton exception",
    "[ERROR] 2025-09-18-06:56:43.507035 (PID:6388, Device:7, RankID:-1) ERR00100 PTA call acl api failed",
    "RuntimeError: NPU function error: aclrtMemcpy failed, error code is 5070351",
    "there is an exception of aivec error, core id is 22, error code = 0, dump info: pc start: 0x12c20507035000",
]


@pytest.mark.parametrize("line", CODE_507035)
def test_507035_in_each_wording_cann_uses(line):
    assert "aicore-exception" in {h["entry"]["id"] for h in explain.match_text(line)}


@pytest.mark.parametrize("line", NOT_507035)
def test_507035_is_not_any_number_that_looks_like_it(line):
    assert "aicore-exception" not in {h["entry"]["id"] for h in explain.match_text(line)}


def test_other_codes_take_the_same_wordings():
    for line, entry in (("aclrtGetDeviceCount(&device_count) failed, error code:207004", "device-unavailable"),
                        ("wait failed, runtime result = 561003.", "op-no-binary")):
        assert entry in {h["entry"]["id"] for h in explain.match_text(line)}, line


def test_the_whole_log_is_read_errors_at_its_end_included(tmp_path, capsys):
    # 250,000 lines of progress, then the error: the first 200,000 lines were all that was read
    log = tmp_path / "long.log"
    with log.open("w") as f:
        for i in range(250_000):
            f.write(f"step {i} loss 0.1234 lr 0.001\n")
        f.write("RuntimeError: NPU function error: call aclnnNonzero failed, error code:507035\n")
    assert cli.main(["doctor", "--explain", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lines"] == 250_001 and data["unread"] is None
    assert [(m["id"], m["matches"][0]["line_no"]) for m in data["matches"]] == [("aicore-exception", 250_001)]


def test_lines_are_numbered_across_chunks_and_long_lines(monkeypatch):
    import io

    monkeypatch.setattr(explain, "OVERLAP", 40)
    for pad in range(60, 140, 7):  # the message falls across every place a long line is cut
        text = "x" * 50 + "\n" + "EI0006: Getting socket times out\n" + "y" * pad + " EI0006: Getting socket times out"
        s = explain.scan(io.StringIO(text + " " + "z" * 200 + "\nlast\n"), chunk=16)  # chunks shorter than lines
        assert s.lines == 4 and [h["line_no"] for h in s.hits] == [2, 3], pad


def test_a_read_that_fails_part_way_says_so_and_keeps_what_was_read(capsys, monkeypatch):
    class Failing:
        def __init__(self):
            self.parts = ["EI0006: Getting socket times out\nmore\n"]

        def read(self, n):
            if self.parts:
                return self.parts.pop()
            raise OSError(5, "Input/output error")

    monkeypatch.setattr("sys.stdin", Failing())
    assert cli.main(["doctor", "--explain"]) == 0
    captured = capsys.readouterr()
    assert "[hccl-socket-timeout]" in captured.out
    assert "stdin: reading stopped at line 3: Input/output error; the lines before it are explained" in captured.err


def test_a_million_matching_lines_keep_a_bounded_report():
    import io

    s = explain.scan(io.StringIO("EI0006: Getting socket times out\n" * (explain.KEEP + 500)))
    groups = explain.summarize(s.hits, s.counts)
    assert len(groups[0]["matches"]) == explain.KEEP and groups[0]["count"] == explain.KEEP + 500
