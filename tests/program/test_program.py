"""``ascendify.program``: the program lines every running verb accepts, their errors, and running them."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from ascendify.program import Program, ProgramError, is_python, rank_result_path


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("import sys\nprint('argv', sys.argv)\n")
    progpkg = tmp_path / "progpkg"
    progpkg.mkdir()
    (progpkg / "__init__.py").write_text("raise RuntimeError('checking a -m module must not import its package')\n")
    (progpkg / "train.py").write_text("")
    (tmp_path / "plain_dir").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("")
    return tmp_path


@pytest.mark.parametrize("argv, kind, path, module, args, opts", [
    (["t.py", "-x", "--lr", "1"], "script", "t.py", None, ["-x", "--lr", "1"], []),
    (["--", "t.py", "--"], "script", "t.py", None, ["--"], []),
    (["python", "t.py", "a"], "script", "t.py", None, ["a"], []),
    (["python3", "-u", "t.py", "-u"], "script", "t.py", None, ["-u"], ["-u"]),
    (["python3.11", "-uB", "-W", "ignore", "-X", "dev", "t.py"], "script", "t.py", None, [],
     ["-u", "-B", "-W", "ignore", "-X", "dev"]),
    (["python", "-Werror::DeprecationWarning", "t.py"], "script", "t.py", None, [],
     ["-W", "error::DeprecationWarning"]),
    ([sys.executable, "--", "t.py"], "script", "t.py", None, [], []),
    (["-m", "progpkg.train", "--lr", "1"], "module", None, "progpkg.train", ["--lr", "1"], []),
    (["python", "-m", "progpkg.train"], "module", None, "progpkg.train", [], []),
    (["python", "-um", "progpkg.train", "x"], "module", None, "progpkg.train", ["x"], ["-u"]),
    (["python", "-mprogpkg.train"], "module", None, "progpkg.train", [], []),
    (["-m", "json.tool"], "module", None, "json.tool", [], []),
])
def test_forms(proj, argv, kind, path, module, args, opts):
    p = Program.parse(argv)
    assert (p.kind, p.path, p.module, p.args, p.python_opts) == (kind, path, module, args, opts)


@pytest.mark.parametrize("argv, torchrun_args, path, module, args", [
    (["torchrun", "--nproc-per-node", "2", "t.py", "--lr", "1"], ["--nproc-per-node", "2", "t.py", "--lr", "1"],
     "t.py", None, ["--lr", "1"]),
    (["python", "-m", "torch.distributed.run", "--standalone", "-m", "progpkg.train", "z"],
     ["--standalone", "-m", "progpkg.train", "z"], None, "progpkg.train", ["z"]),
    (["--", "/usr/local/bin/torchrun", "t.py"], ["t.py"], "t.py", None, []),
])
def test_torchrun_forms(proj, argv, torchrun_args, path, module, args):
    p = Program.parse(argv)
    assert (p.kind, p.torchrun_args, p.path, p.module, p.args) == ("torchrun", torchrun_args, path, module, args)
    assert p.display().startswith("torchrun ")


@pytest.mark.parametrize("argv, message", [
    ([], "give a program to run"),
    (["--"], "give a program to run"),
    (["missing.py"], "no such script: missing.py"),
    (["plain_dir"], "plain_dir is a directory: give a Python script"),
    (["app"], "app is a directory: give its script (app/__main__.py) or run it as a module"),
    (["-m"], "-m needs a module name"),
    (["python", "-m"], "-m needs a module name"),
    (["-m", "no_such_mod_xyz"], "no such module: no_such_mod_xyz"),
    (["-m", "progpkg.nope"], "no such module: progpkg.nope (package progpkg has no nope)"),
    (["-m", "progpkg.train.x"], "progpkg.train is not a package"),
    (["-m", "progpkg/train.py"], "not a module name"),
    (["python", "-c", "print(1)"], "python -c runs a string"),
    (["python", "-", "x"], "a program on stdin"),
    (["python", "-u"], "no script after the interpreter"),
    (["python", "-Z", "t.py"], "python -Z: unknown interpreter option"),
    (["python", "-W"], "python -W needs a value"),
    (["-u", "t.py"], "-u: not a script"),
    (["torchrun", "missing.py"], "no such script: missing.py"),
    (["torchrun", "--no-python", "t.py"], "--no-python"),
    (["torchrun", "--bogus", "t.py"], "unrecognized arguments: --bogus"),
])
def test_bad_program_lines_say_what_is_wrong(proj, argv, message):
    with pytest.raises(ProgramError) as e:
        Program.parse(argv)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_check_false_skips_existence_checks(proj):
    assert Program.parse(["missing.py", "1"], check=False).path == "missing.py"
    assert Program.parse(["-m", "no_such_mod_xyz"], check=False).module == "no_such_mod_xyz"


def test_display_and_argv(proj):
    p = Program.parse(["python", "-u", "t.py", "a b", "--x"])
    assert p.display() == "python -u t.py 'a b' --x"
    assert p.argv == ["t.py", "a b", "--x"]
    m = Program.parse(["-m", "progpkg.train", "1"])
    assert m.display() == "python -m progpkg.train 1" and m.argv == ["progpkg.train", "1"]


def test_run_in_process_applies_and_undoes_interpreter_options(proj, capsys):
    (proj / "w.py").write_text(
        "import sys, warnings\n"
        "print('bytecode', sys.dont_write_bytecode)\n"
        "warnings.warn('boom', UserWarning)\n"
        "sys.exit(4)\n")
    before_filters, before_b = warnings.filters[:], sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        code = Program.parse(["python", "-B", "-W", "error::UserWarning", "-O", "w.py"]).run_in_process()
        out, err = capsys.readouterr()
        assert code == 1  # the warning was an error, so the script never reached sys.exit(4)
        assert "bytecode True" in out and "UserWarning: boom" in err
        assert "-O have no effect" in err
        assert sys.dont_write_bytecode is False and warnings.filters == before_filters
        with pytest.warns(UserWarning, match="boom"):
            assert Program.parse(["w.py"]).run_in_process() == 4
    finally:
        sys.dont_write_bytecode = before_b


def test_run_in_process_of_a_module(proj, capsys):
    (proj / "progpkg" / "__init__.py").write_text("")
    (proj / "progpkg" / "hello.py").write_text("import sys\nprint('hello', __name__, sys.argv[1:])\n")
    try:
        assert Program.parse(["-m", "progpkg.hello", "x"]).run_in_process() == 0
    finally:
        sys.modules.pop("progpkg", None)
    assert "hello __main__ ['x']" in capsys.readouterr().out


def test_torchrun_program_is_not_run_in_process(proj):
    with pytest.raises(ProgramError, match="relaunch_torchrun"):
        Program.parse(["torchrun", "t.py"]).run_in_process()
    with pytest.raises(ProgramError, match="not a torchrun job"):
        Program.parse(["t.py"]).relaunch_torchrun(["run"], who="x")


def test_rank_result_path(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert rank_result_path("a/run.json") == "a/run.json"
    monkeypatch.setenv("RANK", "2")
    assert rank_result_path("a/run.json") == "a/run.rank2.json"
    assert rank_result_path("a/run.json", 0) == "a/run.json"
    assert rank_result_path("log", 5) == "log.rank5.json"
    monkeypatch.setenv("RANK", "garbage")
    assert rank_result_path("run.json") == "run.json"


def test_is_python():
    assert all(is_python(w) for w in ("python", "python3", "python3.11", "/usr/bin/python3.12", sys.executable))
    assert not any(is_python(w) for w in ("train.py", "python3.py", "pythonic", "python3.x", "python2"))


def test_a_syntax_error_in_the_program_prints_as_python_prints_it(proj, capsys):
    (proj / "bad.py").write_text("import sys\nx = (1,\n")
    assert Program.parse(["bad.py"]).run_in_process() == 1
    err = capsys.readouterr().err
    want = subprocess.run([sys.executable, "bad.py"], capture_output=True, text=True, cwd=proj).stderr
    assert err == want.replace(str(proj / "bad.py"), "bad.py")  # no frame of runpy or ascendify
    assert "Traceback" not in err and "SyntaxError: '(' was never closed" in err


def test_ascendify_frames_inside_the_program_fold_into_one_line(proj, capsys):
    (proj / "calls.py").write_text("from ascendify.program import rank_result_path\n\n\n"
                                   "def f():\n    return rank_result_path(None, rank=1)\n\n\nf()\n")
    assert Program.parse(["calls.py"]).run_in_process() == 1
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith('  File "calls.py", line 8, in <module>')  # the program's first frame first
    assert [x for x in lines if x.startswith("  [")] == ["  [ascendify.program: 1 frame folded]"]
    assert "scriptrun.py" not in err and "runpy" not in err and "program/__init__.py" not in err
    assert lines[-1].startswith(("TypeError", "AttributeError"))


def test_an_error_of_ascendify_itself_is_shown_whole(capsys):
    from ascendify.program.scriptrun import print_user_traceback

    try:
        rank_result_path(None, rank=1)
    except Exception:
        etype, value, tb = sys.exc_info()
        print_user_traceback(etype, value, tb.tb_next, script="elsewhere.py")  # from ascendify's frame on
    err = capsys.readouterr().err
    assert "program/__init__.py" in err and "folded" not in err


def test_a_module_installed_as_a_library_starts_the_traceback_at_its_body(proj, capsys, monkeypatch):
    """`-m pkg.train` of a package in site-packages: its frames are a library's, the launcher's are still left
    out."""
    from ascendify.program import scriptrun

    (proj / "progpkg" / "__init__.py").write_text("")
    (proj / "progpkg" / "boom.py").write_text("raise ValueError('from an installed module')\n")
    monkeypatch.setattr(scriptrun, "_library_roots", lambda: (str(proj / "progpkg"),))
    try:
        assert Program.parse(["-m", "progpkg.boom"]).run_in_process() == 1
    finally:
        sys.modules.pop("progpkg", None)
    lines = capsys.readouterr().err.splitlines()
    assert lines[1].endswith('boom.py", line 1, in <module>') and "runpy" not in "\n".join(lines)
    assert lines[-1] == "ValueError: from an installed module"


def test_ctrl_c_in_the_program_exits_130_without_the_launchers_frames(proj, capsys):
    (proj / "interrupted.py").write_text("def loop():\n    raise KeyboardInterrupt\n\n\nloop()\n")
    assert Program.parse(["interrupted.py"]).run_in_process() == 130
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith('  File "interrupted.py", line 5, in <module>')  # the program's frame first
    assert "scriptrun.py" not in err and "runpy" not in err
    assert lines[-1] == "KeyboardInterrupt"


# -- launchers, recognised by what they are ---------------------------------------------------------------------

CONSOLE_SCRIPT = "#!{python}\nimport sys\nfrom {module} import main\nif __name__ == '__main__':\n" \
                 "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(main())\n"


@pytest.fixture
def bin_dir(proj, monkeypatch):
    """A bin/ folder, not on PATH, with console scripts as pip writes them, under names that say nothing."""
    b = proj / "venv-bin"
    b.mkdir()
    for name, module in (("launch-a", "torch.distributed.run"), ("launch-b", "accelerate.commands.accelerate_cli"),
                         ("launch-c", "accelerate.commands.launch"), ("mytool", "json.tool")):
        (b / name).write_text(CONSOLE_SCRIPT.format(python=sys.executable, module=module))
        (b / name).chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")  # bare names: the installed console scripts' entry points
    return b


def test_launchers_are_recognised_by_their_entry_point_not_their_name(proj, bin_dir):
    p = Program.parse([str(bin_dir / "launch-a"), "--nproc-per-node", "2", "t.py", "x"])
    assert (p.kind, p.path, p.args, p.torchrun_args) == ("torchrun", "t.py", ["x"], ["--nproc-per-node", "2",
                                                                                      "t.py", "x"])
    assert Program.parse(["python", str(bin_dir / "launch-a"), "t.py"]).kind == "torchrun"
    a = Program.parse([str(bin_dir / "launch-b"), "launch", "--num_processes", "2", "t.py", "--lr", "1"])
    assert (a.kind, a.path, a.args, a.launcher_args) == ("accelerate", "t.py", ["--lr", "1"],
                                                          ["--num_processes", "2", "t.py", "--lr", "1"])
    assert a.launches_workers and a.display() == "accelerate launch --num_processes 2 t.py --lr 1"
    assert Program.parse([str(bin_dir / "launch-c"), "-m", "progpkg.train"]).module == "progpkg.train"
    # "accelerate" by its name, although its bin/ is not on PATH: the installed console script
    by_name = Program.parse(["accelerate", "launch", "--num_processes", "2", "t.py"])
    assert (by_name.kind, by_name.path) == ("accelerate", "t.py")
    assert Program.parse(["python", "-m", "accelerate.commands.launch", "t.py"]).kind == "accelerate"
    # a console script that is no launcher is a plain script
    other = Program.parse([str(bin_dir / "mytool"), "x"])
    assert (other.kind, other.path, other.launches_workers) == ("script", str(bin_dir / "mytool"), False)


@pytest.mark.parametrize("argv, message", [
    (["accelerate", "config"], "accelerate config does not run a program"),
    (["accelerate", "launch", "missing.py"], "no such script: missing.py"),
    (["accelerate", "launch", "--no_python", "t.py"], "--no_python"),
    (["accelerate", "launch", "--bogus", "t.py"], "unrecognized arguments: --bogus"),
])
def test_bad_launcher_lines(proj, bin_dir, argv, message):
    with pytest.raises(ProgramError, match=message):
        Program.parse(argv)


def test_a_launcher_job_is_relaunched_not_run_in_process(proj, bin_dir):
    with pytest.raises(ProgramError, match="starts worker processes"):
        Program.parse(["accelerate", "launch", "t.py"]).run_in_process()
