"""The ``ascendify`` command where torch cannot be imported: help for every verb, ``migrate`` end to end, and a
clear message from the verbs that need torch.

The child interpreter gets a meta-path finder, first in ``sys.meta_path``, that refuses the blocked packages
the way Python refuses a package that is not installed (``ModuleNotFoundError``), whatever is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ascendify import cli

HEAVY = ("torch", "torch_npu", "numpy", "matplotlib")

_BLOCKER = """\
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
for _m in [m for m in sys.modules if m.split(".")[0] in {blocked!r}]:
    del sys.modules[_m]
"""


def _python(code: str, *, blocked=HEAVY, cwd=None) -> subprocess.CompletedProcess:
    src = _BLOCKER.format(blocked=tuple(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, cwd=cwd, timeout=120)


def _ascendify(*argv: str, blocked=HEAVY, cwd=None) -> subprocess.CompletedProcess:
    return _python(f"from ascendify.cli import main\nraise SystemExit(main({list(argv)!r}))\n", blocked=blocked,
                   cwd=cwd)


def test_the_blocker_really_blocks():
    r = _python("import torch\n")
    assert r.returncode == 1 and "ModuleNotFoundError: No module named 'torch'" in r.stderr


def test_help_of_every_verb_without_torch_numpy_matplotlib():
    r = _python("""
        import contextlib, io, json, sys
        from ascendify import cli
        out = {}
        for verb in cli.VERBS:
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf):
                    cli.main([verb, "--help"])
                code = 0
            except SystemExit as e:
                code = e.code
            out[verb] = [code, buf.getvalue()]
        with contextlib.redirect_stdout(io.StringIO()) as top:
            try:
                cli.main(["--help"])
            except SystemExit as e:
                out["--help"] = [e.code, top.getvalue()]
        print(json.dumps(out))
        """)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["--help"][0] == 0 and "COMMAND" in result["--help"][1]
    present = [v for v, m in cli.VERBS.items() if cli._load(m) is not None]
    assert {"migrate", "run", "emulate"} <= set(present)
    for verb in present:
        code, text = result[verb]
        assert code == 0 and f"ascendify {verb}" in text, (verb, code, text[-500:])
        assert verb in result["--help"][1]


def test_migrate_runs_on_a_tree_without_torch(tmp_path):
    src = tmp_path / "proj"
    src.mkdir()
    (src / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    out = tmp_path / "out"
    r = _ascendify("migrate", str(src), "-o", str(out), "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    converted = (out / "train.py").read_text()
    assert "npu" in converted and ".cuda()" not in converted
    assert (src / "train.py").read_text().endswith(".cuda()\n")  # the input is left alone


@pytest.mark.parametrize("verb", ["run", "emulate"])
def test_torch_verbs_say_torch_is_needed(tmp_path, verb):
    (tmp_path / "t.py").write_text("print('ran')\n")
    r = _ascendify(verb, "t.py", blocked=("torch",), cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert f"ascendify {verb}: this command needs PyTorch" in r.stderr
    assert "Traceback" not in r.stderr and "ran" not in r.stdout


def test_every_verb_loads_and_a_broken_front_end_fails_loudly(monkeypatch):
    for verb, module in cli.VERBS.items():
        mod = cli._load(module)
        assert mod.HELP and callable(mod.add_arguments) and callable(mod.run), verb
    help_text = cli.build_parser().format_help()
    assert all(verb in help_text for verb in cli.VERBS)
    # a front-end that cannot be imported was hidden from --help without a word: now the error says which
    monkeypatch.setitem(cli.VERBS, "nothing-yet", "ascendify.commands.nothing_yet")
    with pytest.raises(ModuleNotFoundError, match="ascendify.commands.nothing_yet"):
        cli.build_parser()


def test_output_into_a_closed_pipe_is_no_traceback():
    # `ascendify doctor --list-checks | head -1` printed a BrokenPipeError traceback
    import os

    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write, like `head -1` after its line: deterministic
    try:
        p = subprocess.run([sys.executable, "-m", "ascendify", "migrate", "--list-rules"], stdout=w,
                           stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    err = p.stderr.decode()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert p.returncode == 141


@pytest.mark.parametrize("verb", ["doctor", "migrate", "run", "emulate", "dump", "compare", "bench", "train", "demo"])
def test_help_fits_80_columns_and_examples_stay_whole(verb, monkeypatch, capsys):
    # the descriptions were printed as written, 105-115 characters wide, whatever the terminal; then the
    # hand-written examples were: 30 lines over 80 columns across the verbs
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        cli.main([verb, "--help"])
    text = capsys.readouterr().out
    usage = text.split("\n\n", 1)[0]  # argparse's own usage block may hold one unbreakable option group
    wide = [line for line in text[len(usage):].splitlines() if len(line) > 80]
    assert not wide, wide
    assert f"\n  ascendify {verb} " in text  # the example block kept its indentation and its lines


def test_top_level_help_says_where_to_start(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert "ascendify demo" in text and "COMMAND --help" in text
