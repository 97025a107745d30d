"""`migrate --format json`: the report alone on stdout, the summary on stderr (as docs/migrate.md says)."""

from __future__ import annotations

import json

from ascendify import cli


def _project(tmp_path):
    src = tmp_path / "proj"
    src.mkdir()
    (src / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\ntorch.cuda.synchronize()\n")
    return src


def test_json_on_stdout_summary_on_stderr(tmp_path, capsys):
    src = _project(tmp_path)
    assert cli.main(["migrate", str(src), "--format", "json", "-o", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout is one JSON document
    n = report["totals"]["converted"]
    assert n >= 2 and report["files"][0]["status"] == "changed"
    assert "ascendify migrate --to npu" in captured.err and "train.py" in captured.err
    assert f"{n} CUDA sites" in captured.err and "Report: " in captured.err


def test_json_quiet_has_no_summary(tmp_path, capsys):
    src = _project(tmp_path)
    assert cli.main(["migrate", str(src), "--format", "json", "-q"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["totals"]["changed"] == 1 and captured.err == ""
