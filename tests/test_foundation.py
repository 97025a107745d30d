"""The package skeleton: CLI, knowledge base, atomic writes."""

import subprocess
import sys

import pytest

from ascendify import cli
from ascendify.core import fileio, knowledge


def test_python_dash_m_prints_help():
    r = subprocess.run([sys.executable, "-m", "ascendify", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    assert "ascendify" in r.stdout


def test_no_verb_is_an_error(capsys):
    assert cli.main([]) == 2


def test_knowledge_base_has_provenance_and_facts():
    for name in ("torch_npu_api", "npu_api_support", "npu_aten_op_coverage", "transfer_to_npu_patches"):
        prov = knowledge.provenance(name)
        assert prov["derived_from"].startswith("shared/reference/")
        assert len(prov["sha256_16"]) == 16
    assert knowledge.npu_name_exists("torch.npu.synchronize")
    assert knowledge.npu_name_exists("torch_npu.npu.synchronize")
    assert not knowledge.npu_name_exists("torch.npu.nvtx")
    assert knowledge.cuda_to_npu("torch.cuda.CUDAGraph") == "torch.npu.NPUGraph"
    assert knowledge.cuda_to_npu("torch.cuda.nvtx") is None
    assert "lgamma" in knowledge.ops_without_npu_kernel()


def test_package_import_does_not_import_torch():
    code = "import sys, ascendify, ascendify.cli, ascendify.core.knowledge; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_write_atomic_leaves_no_temp_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x.txt"
    target.write_text("old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(fileio.os, "replace", boom)
    with pytest.raises(OSError):
        fileio.write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_patches_restore_own_inherited_and_undo_steps_in_reverse():
    from ascendify.core.patching import Patches

    class Base:
        def f(self):
            return "base"

    class Child(Base):
        g = 1

    calls = []
    with Patches() as p:
        p.set(Child, "f", lambda self: "patched")  # inherited: restored by delattr
        p.set(Child, "g", 2)  # own: restored by setattr
        p.set(Child, "g", 3)  # second patch of the same attribute: first original wins
        p.on_restore(lambda: calls.append("first"))
        p.on_restore(lambda: calls.append("second"))
        assert (Child().f(), Child.g, len(p)) == ("patched", 3, 2)
    assert Child().f() == "base" and "f" not in vars(Child)
    assert Child.g == 1
    assert calls == ["second", "first"]


def test_source_tree_guard_sees_outputs_in_examples_and_ignored_files(tmp_path):
    from example_runs import tree_state

    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("*.pt\n__pycache__/\n/out/\n")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "train.py").write_text("x = 1\n")
    (tmp_path / "src").mkdir()
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], cwd=tmp_path, check=True)
    clean = tree_state(tmp_path)
    assert clean == set()
    (tmp_path / "src" / "new_module.py").write_text("")  # someone's work in progress: not a test's output
    (tmp_path / "examples" / "__pycache__").mkdir()
    (tmp_path / "examples" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"")
    assert tree_state(tmp_path) == clean
    (tmp_path / "examples" / "ckpt_cuda.pt").write_bytes(b"")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.json").write_text("{}")
    (tmp_path / "examples" / "train.py").write_text("x = 2\n")
    assert tree_state(tmp_path) == {"!! examples/ckpt_cuda.pt", "!! out/", " M examples/train.py"}


def test_output_problem_names_what_is_wrong(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert fileio.output_problem(tmp_path / "new" / "deeper" / "r.json") is None  # missing folders are made
    assert fileio.output_problem(tmp_path / "r.json") is None
    assert "is a folder" in fileio.output_problem(tmp_path)
    assert fileio.output_problem(tmp_path / "afile" / "r.json") == f"{tmp_path / 'afile'} is a file, not a folder"
    assert "is a file" in fileio.output_problem(tmp_path / "afile" / "sub" / "r.json")


@pytest.mark.parametrize("verb, option", [("run", "--log"), ("emulate", "--json")])
def test_a_bad_report_path_stops_before_the_program_runs(tmp_path, capsys, verb, option):
    # `ascendify run --log afile/x.json train.py` ran the whole program, then could not write the report (exit 0)
    (tmp_path / "afile").write_text("x")
    script = tmp_path / "prog.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    assert cli.main([verb, option, str(tmp_path / "afile" / "x.json"), str(script)]) == 2
    assert "afile is a file, not a folder" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


def test_folder_problem_names_what_is_wrong(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert fileio.folder_problem(tmp_path / "new" / "deeper") is None
    assert fileio.folder_problem(tmp_path) is None
    assert fileio.folder_problem(tmp_path / "afile") == f"{tmp_path / 'afile'} is a file, not a folder"
    assert fileio.folder_problem(tmp_path / "afile" / "sub") == f"{tmp_path / 'afile'} is a file, not a folder"


@pytest.mark.parametrize("argv", [
    ["migrate", "SRC", "-o", "OUT"],  # said "not empty ... pass --force", and --force then failed with errno 17
    ["compare", "--curves", "SRC/h.json", "SRC/h.json", "-o", "OUT"],
    ["doctor", "--skip-device", "--out", "OUT"],  # gathered every fact first, then "[Errno 17] File exists"
])
def test_an_output_folder_that_is_a_file_is_a_usage_error_said_up_front(tmp_path, capsys, argv):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import torch\nx = torch.ones(1).cuda()\n")
    (src / "h.json").write_text('[{"epoch": 1, "loss": 1.0}]')
    out = tmp_path / "afile"
    out.write_text("x")
    argv = [a.replace("SRC", str(src)).replace("OUT", str(out)) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out} is a file, not a folder" in err and "--force" not in err and "Errno" not in err
    assert out.read_text() == "x"


def test_the_suite_runs_as_in_a_plain_clone_from_a_terminal(tmp_path):
    # tests/conftest.py: ../shared exists in CI, not beside a user's clone; an unmarked test that reads it fails
    # (as if it were absent) and is named; a test marked reference gets it from reference_dir, or skips. And a
    # suite started in the background (SIGINT ignored) starts programs that hear Ctrl-C.
    from pathlib import Path

    here = Path(__file__).resolve().parent
    tests = tmp_path / "clone" / "tests"
    tests.mkdir(parents=True)
    for name in ("conftest.py", "example_runs.py"):
        (tests / name).write_bytes((here / name).read_bytes())
    (tests / "test_reads.py").write_text(
        "import pytest\n"
        "from conftest import SHARED\n\n"
        "def test_unmarked():\n"
        "    try:\n"
        "        (SHARED / 'reference' / 'torch_npu_api.json').read_text()\n"
        "    except FileNotFoundError:\n"
        "        pass  # as in a clone with nothing beside it\n\n"
        "@pytest.mark.reference\n"
        "def test_marked(reference_dir):\n"
        "    assert (reference_dir / 'torch_npu_api.json').read_text() == '{}'\n\n"
        "def test_programs_hear_ctrl_c():  # pytest was started with SIGINT ignored (in the background)\n"
        "    import subprocess, sys\n"
        "    code = 'import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)'\n"
        "    assert subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout == 'True\\n'\n")
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-o", "markers=reference: r",
            str(tests)]
    import signal

    def in_the_background() -> None:  # as a shell script's `pytest &` starts it
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    r = subprocess.run(argv, cwd=tmp_path / "clone", capture_output=True, text=True, timeout=120,
                       preexec_fn=in_the_background)
    assert "test_reads.py::test_unmarked read " + str(tmp_path / "shared" / "reference" / "torch_npu_api.json") \
        in r.stdout, r.stdout
    assert "2 passed, 1 skipped, 1 error" in r.stdout and "no reference data beside the clone" in r.stdout, r.stdout
    (tmp_path / "shared" / "reference").mkdir(parents=True)
    (tmp_path / "shared" / "reference" / "torch_npu_api.json").write_text("{}")
    r = subprocess.run(argv, cwd=tmp_path / "clone", capture_output=True, text=True, timeout=120,
                       preexec_fn=in_the_background)
    # the marked test reads it (passed); the unmarked one fails (its teardown: the error names the file)
    assert "3 passed, 1 error" in r.stdout and "ERROR at teardown of test_unmarked" in r.stdout, r.stdout
