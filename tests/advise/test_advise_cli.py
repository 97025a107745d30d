"""The `ascendify advise` front-end: --explain, bad command lines in one line, a saved trace or a profile analysed
without running anything."""

from __future__ import annotations

import json

import pytest

from ascendify import cli
from ascendify.advise.rules import RULES


def test_explain_every_rule(capsys):
    for rid, r in RULES.items():
        assert cli.main(["advise", "--explain", rid.lower()]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"{rid} {r.name}: {r.title}") and "Why it is slow on an Ascend NPU" in out
        assert "Fix:" in out and "https://" in out
        assert all(len(line) <= 80 for line in out.splitlines() if not line.strip().startswith("- https://"))
        fix_lines = [ln for ln in r.fix.splitlines()]
        assert max(len(ln) for ln in fix_lines) <= 70, (rid, [ln for ln in fix_lines if len(ln) > 70])
    assert cli.main(["advise", "--explain", "ADV999"]) == 2
    assert "no rule ADV999" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0", "--", "python", "x.py"], "--steps must be at least 1"),
    (["--device", "TPU v9", "--", "python", "x.py"], "--device TPU v9: no published peaks"),
    (["--profile", ".", "--", "python", "x.py"], "give one of a program, --from-trace FILE or --profile DIR"),
    (["--apply", "out"], "--apply needs the program to run"),
    (["--", "python", "no_such_script.py"], "no such script: no_such_script.py"),
])
def test_bad_command_lines_say_why_in_one_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["advise", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_apply_refuses_an_output_inside_the_project(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("pass\n")
    assert cli.main(["advise", "--apply", str(tmp_path / "fast"), "--", "python", "t.py"]) == 2
    assert "may not be the project" in capsys.readouterr().err


def test_a_saved_trace_is_analysed_without_running(tmp_path, capsys):
    import torch

    from ascendify.advise.trace import Tracer

    lin = torch.nn.Linear(8, 8)
    tr = Tracer().start()
    for _ in range(3):
        lin(torch.randn(4, 8)).sum().backward()
    t = tr.stop()
    (tmp_path / "t.json").write_text(json.dumps(t.to_dict()))
    assert cli.main(["advise", "--from-trace", str(tmp_path / "t.json"), "--json", str(tmp_path / "a.json"),
                     "--device", "NVIDIA H100 80GB HBM3"]) == 0
    out = capsys.readouterr().out
    assert "Estimated step on NVIDIA H100 SXM" in out
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["meta"]["device"] == "NVIDIA H100 SXM" and doc["meta"]["step_unit"] == "backward"
    (tmp_path / "bad.json").write_text("{}")
    assert cli.main(["advise", "--from-trace", str(tmp_path / "bad.json")]) == 2
    assert "not an advise trace" in capsys.readouterr().err
