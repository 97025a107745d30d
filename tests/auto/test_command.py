"""``ascendify run`` argument handling, without starting programs (the launcher is replaced)."""

from __future__ import annotations

import pytest

from ascendify import program
from ascendify.auto import runner
from ascendify.cli import build_parser


@pytest.fixture
def captured(monkeypatch):
    calls = {}

    def fake_enable(target, **kw):
        calls["target"] = target
        calls["enable"] = kw

    def fake_run(prog):
        calls["program"] = (prog.path, prog.module, prog.args)
        calls["python_opts"] = prog.python_opts
        return 5

    monkeypatch.setattr(runner, "enable_for_process", fake_enable)
    monkeypatch.setattr(runner, "run_program", fake_run)
    monkeypatch.setattr(runner, "finish", lambda **kw: calls.setdefault("finish", kw))
    monkeypatch.setattr(runner, "run_torchrun",
                        lambda prog, flags: calls.setdefault("torchrun", (prog.torchrun_args, flags)) and 0)
    monkeypatch.delenv("ASCENDIFY_TARGET", raising=False)
    return calls


def run(argv):
    args = build_parser().parse_args(["run", *argv])
    return args._run(args)


@pytest.mark.parametrize("argv, program", [
    (["train.py", "--to", "npu", "-m", "x"], ("train.py", None, ["--to", "npu", "-m", "x"])),
    (["--", "train.py", "-q"], ("train.py", None, ["-q"])),
    (["python", "train.py", "1"], ("train.py", None, ["1"])),
    (["-m", "pkg.mod", "--lr", "1"], (None, "pkg.mod", ["--lr", "1"])),
    (["python3", "-m", "pkg.mod", "a"], (None, "pkg.mod", ["a"])),
])
def test_program_and_its_arguments(captured, argv, program, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('the check must not import the package')")
    (tmp_path / "pkg" / "mod.py").write_text("")
    assert run(["--to", "cpu", *argv]) == 5
    assert captured["program"] == program
    assert captured["target"] == "cpu"
    assert captured["finish"] == {"log": None, "quiet": False}


def test_target_from_environment(captured, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    monkeypatch.setenv("ASCENDIFY_TARGET", "npu")
    run(["t.py"])
    assert captured["target"] == "npu"


def test_interpreter_options_are_accepted(captured, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    assert run(["--to", "cpu", "python", "-u", "-W", "ignore", "t.py", "-u"]) == 5
    assert captured["program"] == ("t.py", None, ["-u"])
    assert captured["python_opts"] == ["-u", "-W", "ignore"]


def test_torchrun_forms_start_redirected_workers(captured, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    log = tmp_path / "r.json"
    assert run(["--to", "npu", "--strict", "--log", str(log), "torchrun", "--nproc-per-node", "2", "t.py", "x"]) == 0
    args, flags = captured["torchrun"]
    assert args == ["--nproc-per-node", "2", "t.py", "x"]
    assert flags == ["--to", "npu", "--strict", "--log", str(log)]
    assert "program" not in captured  # the launcher itself is not redirected
    captured.pop("torchrun")
    run(["-m", "torch.distributed.run", "--standalone", "t.py"])
    assert captured["torchrun"] == (["--standalone", "t.py"], ["--to", "auto"])


def test_usage_errors(captured, capsys):
    assert run(["--to", "cpu"]) == 2
    assert run(["-m"]) == 2
    assert run(["nope.py"]) == 2
    err = capsys.readouterr().err
    assert "give a program to run" in err and "-m needs a module" in err and "no such script: nope.py" in err


def test_is_python():
    assert all(program.is_python(w) for w in ("python", "python3", "python3.11", "/usr/bin/python3"))
    assert not any(program.is_python(w) for w in ("train.py", "python3.py", "pythonic"))
