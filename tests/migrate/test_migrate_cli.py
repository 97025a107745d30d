"""``ascendify migrate`` end to end: output tree, reports, modes, exit codes, bad input."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from ascendify import cli

CUDA_SRC = 'import torch\n\ndef f(x):\n    torch.cuda.synchronize()\n    return x.cuda()\n'


def make_tree(root: Path) -> Path:
    src = root / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text(CUDA_SRC)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "util.py").write_text("def add(a, b):\n    return a + b\n")
    (src / "README.md").write_text("# a CUDA project\n")
    (src / "kern.cu").write_text('PYBIND11_MODULE(ext, m) {\n  m.def("go", &go);\n}\n')
    return src


def run(*argv) -> int:
    return cli.main(["migrate", *map(str, argv)])


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_output_tree_reports_and_untouched_input(tmp_path):
    src = make_tree(tmp_path)
    before = snapshot(src)
    out = tmp_path / "out"
    assert run(src, "-o", out, "-q") == 0
    assert snapshot(src) == before
    assert (out / "train.py").read_text().count("torch.npu.synchronize()") == 1
    assert (out / "pkg" / "util.py").read_bytes() == before["pkg/util.py"]
    assert (out / "README.md").read_bytes() == before["README.md"]
    rep = tmp_path / "out_migration_report"
    data = json.loads((rep / "report.json").read_text())
    assert data["schema"] == "ascendify.migrate.report/1"
    assert data["totals"]["changed"] == 1 and data["totals"]["converted"] >= 2
    with open(rep / "changes.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["rule"] for r in rows} >= {"ASC101", "ASC203", "ASC001"}
    assert list(rows[0]) == ["file", "line", "end_line", "rule", "before", "after"]
    with open(rep / "cuda_ops.csv") as f:
        ops = list(csv.DictReader(f))
    assert [(o["file"], o["op"]) for o in ops] == [("kern.cu", "go")]
    for name in ("unsupported.csv", "advice.csv", "report.md"):
        assert (rep / name).exists()
    # the output is already converted: --check passes on it
    assert run(out, "--check", "-q") == 0


def test_output_inside_input_is_refused(tmp_path, capsys):
    src = make_tree(tmp_path)
    assert run(src, "-o", src / "converted") == 2
    assert "inside the input" in capsys.readouterr().err
    assert not (src / "converted").exists()


def test_check_exits_1_and_writes_nothing(tmp_path):
    src = make_tree(tmp_path)
    before = snapshot(tmp_path)
    assert run(src, "--check", "-q") == 1
    assert snapshot(tmp_path) == before


def test_diff_prints_and_writes_nothing(tmp_path, capsys):
    src = make_tree(tmp_path)
    before = snapshot(tmp_path)
    assert run(src, "--diff", "-q") == 0
    out = capsys.readouterr().out
    assert "-    return x.cuda()" in out and "+    return x.npu()" in out
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("given", ["proj", "./proj/", "ABS"])
def test_the_diff_applies_from_where_the_command_ran(tmp_path, capsys, monkeypatch, given):
    src = make_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert run(str(src) if given == "ABS" else given, "--diff", "-q") == 0
    patch = capsys.readouterr().out
    assert "--- a/proj/train.py\n+++ b/proj/train.py\n" in patch  # the path from here, not from the input folder
    assert run(src, "-o", tmp_path / "out", "-q") == 0
    applied = subprocess.run(["git", "apply", "-"], input=patch, text=True, capture_output=True, cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert (src / "train.py").read_text() == (tmp_path / "out" / "train.py").read_text()


def test_the_diff_of_a_file_outside_the_current_folder_names_its_absolute_path(tmp_path, capsys, monkeypatch):
    src = make_tree(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert run("../proj/train.py", "--diff", "-q") == 0
    name = str(src / "train.py").lstrip("/")
    assert f"--- a/{name}\n+++ b/{name}\n" in capsys.readouterr().out  # patch -p1 -d /


def test_check_with_diff_prints_the_diff_and_exits_1(tmp_path, capsys):
    src = make_tree(tmp_path)
    before = snapshot(tmp_path)
    assert run(src, "--check", "--diff", "-q") == 1
    assert "+    return x.npu()" in capsys.readouterr().out
    assert snapshot(tmp_path) == before
    assert run(src, "--check", "-o", tmp_path / "out", "-q") == 1  # --check writes nothing, even with -o
    assert not (tmp_path / "out").exists() and not (tmp_path / "out_migration_report").exists()


def test_inplace_rewrites_the_input(tmp_path):
    src = make_tree(tmp_path)
    assert run(src, "--inplace", "-q") == 0
    assert "x.npu()" in (src / "train.py").read_text()


def test_bad_input_is_reported_copied_and_the_run_goes_on(tmp_path, capsys):
    src = make_tree(tmp_path)
    (src / "broken.py").write_text("def f(:\n    x.cuda()\n")
    (src / "binary.py").write_bytes(b"\x00\x01cuda\x00")
    (src / "latin.py").write_bytes(b"x = 'caf\xe9'.cuda()\n")  # not UTF-8 and no PEP 263 line
    (src / "huge.py").write_text("x = 1  # cuda\n" * 2000)
    (src / "link.py").symlink_to(src / "train.py")
    (src / "linked_pkg").symlink_to(src / "pkg", target_is_directory=True)
    out = tmp_path / "out"
    assert run(src, "-o", out, "--max-size", "10000", "--format", "json") == 3
    report = json.loads(capsys.readouterr().out)
    reasons = {f["path"]: f["reason"] for f in report["files"] if f["status"] == "skipped"}
    assert set(reasons) == {"broken.py", "binary.py", "latin.py", "huge.py", "link.py", "linked_pkg"}
    assert (out / "linked_pkg").is_symlink()
    assert "does not parse" in reasons["broken.py"] and "binary" in reasons["binary.py"]
    assert "decode" in reasons["latin.py"] and "too large" in reasons["huge.py"] and "symlink" in reasons["link.py"]
    for name in ("broken.py", "binary.py", "latin.py", "huge.py"):
        assert (out / name).read_bytes() == (src / name).read_bytes()
    assert (out / "link.py").is_symlink()
    assert "x.npu()" in (out / "train.py").read_text()  # the good file was still converted
    md = (tmp_path / "out_migration_report" / "report.md").read_text()
    assert "## Skipped files" in md and "broken.py" in md


def test_parallel_jobs_give_the_same_result(tmp_path, capsys):
    src = make_tree(tmp_path)
    for i in range(6):
        (src / f"m{i}.py").write_text(CUDA_SRC.replace("f(x)", f"f{i}(x)"))
    assert run(src, "-o", tmp_path / "a", "-q", "--jobs", "1") == 0
    assert run(src, "-o", tmp_path / "b", "-q", "--jobs", "2") == 0
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")


def test_explain_and_list_rules(capsys):
    assert run("--explain", "ASC103") == 0
    text = capsys.readouterr().out
    assert "## What it does" in text and "## Fix safety" in text and "device-string" in text
    assert run("--list-rules") == 0
    listing = capsys.readouterr().out
    assert "ASC101" in listing and "ASC904" in listing
    assert run("--explain", "ASC999") == 2


def test_select_and_ignore(tmp_path):
    src = make_tree(tmp_path)
    assert run(src / "train.py", "-o", tmp_path / "o1", "--select", "ASC101", "-q") == 0
    text = (tmp_path / "o1" / "train.py").read_text()
    assert "x.npu()" in text and "torch.cuda.synchronize()" in text
    assert run("--ignore", "ASC1,ASC001", src / "train.py", "-o", tmp_path / "o2", "-q") == 0
    text = (tmp_path / "o2" / "train.py").read_text()
    assert "x.cuda()" in text and "torch.npu.synchronize()" in text and "torch_npu" not in text
    assert run(src, "--select", "NOPE") == 2


def test_usage_errors(tmp_path):
    assert run() == 2
    assert run(tmp_path / "missing") == 2


@pytest.mark.skipif(os.name != "posix", reason="posix permissions")
def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    from ascendify.core import fileio

    src = make_tree(tmp_path)
    out = tmp_path / "out"

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(fileio.os, "replace", boom)
    assert run(src / "train.py", "-o", out, "-q") == 4
    assert not (out / "train.py").exists()
    assert not [p for p in out.rglob("*") if p.is_file()]


def test_prefilter_skips_parsing_only_files_without_relevant_tokens(tmp_path, capsys):
    src = tmp_path / "p"
    src.mkdir()
    (src / "plain.py").write_text("def add(a, b):\n    return a + b\n")
    (src / "api_only.py").write_text("import torch\n\ny = torch.poisson(rates)\n")
    assert run(src, "--format", "json") == 0
    files = {f["path"]: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files["plain.py"]["parsed"] is False
    assert files["api_only.py"]["parsed"] is True
    assert [(x["rule"], x["line"]) for x in files["api_only.py"]["findings"]] == [("ASC901", 3)]
    # with every rule on torch APIs' limits off (ASC9xx, and ASC305: HCCL's), a torch-only file is not parsed
    assert run(src, "--format", "json", "--ignore", "ASC9", "--ignore", "ASC305") == 0
    files = {f["path"]: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files["api_only.py"]["parsed"] is False


@pytest.mark.skipif(os.name != "posix", reason="posix permissions")
def test_converted_files_keep_the_input_permissions(tmp_path):
    src = make_tree(tmp_path)
    (src / "train.py").chmod(0o755)
    (src / "pkg" / "util.py").chmod(0o640)
    assert run(src, "-o", tmp_path / "out", "-q") == 0
    assert (tmp_path / "out" / "train.py").stat().st_mode & 0o777 == 0o755  # converted
    assert (tmp_path / "out" / "pkg" / "util.py").stat().st_mode & 0o777 == 0o640  # copied


def test_two_inputs_that_would_write_the_same_output_file_are_refused(tmp_path, capsys):
    a, b = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    assert run(a / "train.py", b / "train.py", "-o", tmp_path / "out") == 2
    assert "same output file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert run(a, b, "-o", tmp_path / "out", "-q") == 2  # two folders called proj: out/proj/... twice
    b.rename(tmp_path / "b" / "other")
    assert run(a, tmp_path / "b" / "other", "-o", tmp_path / "out", "-q") == 0
    assert (tmp_path / "out" / "proj" / "train.py").exists() and (tmp_path / "out" / "other" / "train.py").exists()


def test_a_skipped_file_under_diff_is_not_said_to_be_copied(tmp_path, capsys):
    # `migrate broken.py --diff` said "(copied unchanged)" and "No CUDA-specific code found" though it wrote
    # nothing and never read the file's CUDA call
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n    x = torch.cuda.is_available()\n")
    assert run(bad, "--diff") == 3
    err = capsys.readouterr()
    text = err.out + err.err
    assert "skipped" in text and "does not parse" in text
    assert "copied unchanged" not in text and "No CUDA-specific code found." not in text
    assert run(bad, "-o", tmp_path / "out") == 3
    assert "(copied unchanged)" in "".join(capsys.readouterr())
