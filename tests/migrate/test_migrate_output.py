"""What a person reads after ``ascendify migrate``: the table fits the terminal, totals add up, next steps,
JSON that stays JSON, report files a colleague can read, refused output folders, empty inputs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ascendify import cli
from ascendify.migrate.model import API, CHANGE, REPORT, FileResult, Finding
from ascendify.migrate.render import summary_rows

CUDA_SRC = 'import torch\n\ndef f(x):\n    torch.cuda.synchronize()\n    return x.cuda()\n\nif __name__ == "__main__":\n    f(1)\n'


def run(*argv) -> int:
    return cli.main(["migrate", *map(str, argv)])


def project(root: Path) -> Path:
    src = root / "proj"
    (src / "csrc_extension_with_a_long_name").mkdir(parents=True)
    (src / "train_gpt.py").write_text(CUDA_SRC)
    (src / "train_imagenet.py").write_text(CUDA_SRC)
    (src / "csrc_extension_with_a_long_name" / "fused_bias_gelu_kernels.py").write_text(CUDA_SRC)
    (src / "models.py").write_text("import torch\n\ny = torch.poisson(rates)\n")  # an API note, no CUDA site
    (src / "plain.py").write_text("def add(a, b):\n    return a + b\n")
    return src


def test_the_table_fits_80_columns_and_keeps_file_names_apart(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    src = project(tmp_path)
    assert run(src, "-o", tmp_path / "out") == 0
    out = capsys.readouterr().out
    lines = out.split("Report:")[0].splitlines()  # below: paths and commands, never wrapped (copy-paste)
    assert max(len(line) for line in lines) <= 80, out
    assert "train_gpt.py" in out and "train_imagenet.py" in out
    assert "fused_bias_gelu_kernels.py" in out  # the folder may shrink, the file name stays whole


def test_not_a_terminal_means_100_columns_not_160(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    src = project(tmp_path)
    assert run(src, "-o", tmp_path / "out") == 0
    lines = capsys.readouterr().out.split("Report:")[0].splitlines()
    assert max(len(line) for line in lines) <= 100
    rule = next(line for line in lines if set(line) <= set("━╇ "))  # the header rule spans the table only
    assert len(rule) < 100


def test_next_steps_name_the_report_and_the_emulator_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    src = project(tmp_path)
    out = tmp_path / "out"
    assert run(src, "-o", out) == 0
    text = capsys.readouterr().out
    assert f"Report: {tmp_path / 'out_migration_report' / 'report.md'}" in text
    assert f"ascendify emulate -- python {out / 'train_gpt.py'}" in text
    assert text.count("accounted for") == 1 and "accounted for (converted or listed by a specific rule" in text
    assert run(src, "-o", tmp_path / "portable", "--to", "portable") == 0
    assert f"python {tmp_path / 'portable' / 'train_gpt.py'}" in capsys.readouterr().out
    assert run(src) == 0  # analysis only: say how to write the result
    assert "ascendify migrate" in capsys.readouterr().out.split("Next:")[1]


def test_the_sites_for_a_person_are_where_the_next_step_says(tmp_path, capsys, monkeypatch):
    """unsupported.csv holds the API notes too: the next step names the table of report.md that holds exactly
    the sites it counts."""
    import csv

    monkeypatch.setenv("COLUMNS", "80")
    src = tmp_path / "proj"
    src.mkdir()
    (src / "train.py").write_text("import torch\nimport torch.nn as nn\n\nx = torch.randn(3).cuda()\n"
                                  "torch.cuda.nvtx.mark('a')\ntorch.backends.cudnn.benchmark = True\n"
                                  "y = torch.poisson(x)\nm = nn.LSTM(4, 4)\n")
    assert run(src, "-o", tmp_path / "out") == 0
    text = capsys.readouterr().out
    step = text.split("Next:")[1]
    n = int(re.search(r"check the (\d+) sites? listed for a person", step).group(1))
    table = re.search(r'report\.md, table "([^"]+)"', step).group(1)
    assert max(len(line) for line in step.splitlines()) <= 80
    report = tmp_path / "out_migration_report"
    md = (report / "report.md").read_text()
    section = md.split(f"## {table}\n")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| file:line")]
    assert n >= 2 and len(rows) == n
    with (report / "unsupported.csv").open(newline="") as f:
        assert len(list(csv.DictReader(f))) > n  # the API notes are there too: not the place to count them


def test_a_plain_entry_script_gets_the_next_step_with_its_own_device_flag(tmp_path, capsys, monkeypatch):
    """Most research code has no `if __name__ == "__main__":` block: its entry script runs at module level."""
    monkeypatch.setenv("COLUMNS", "100")
    src = tmp_path / "wlm"
    src.mkdir()
    (src / "model.py").write_text("import torch.nn as nn\n\n\nclass M(nn.Module):\n    pass\n")
    (src / "setup.py").write_text("import sys\nfrom setuptools import setup\nsetup(name='x', script_args=sys.argv)\n")
    (src / "main.py").write_text(
        "import argparse\nimport torch\nimport model\n\np = argparse.ArgumentParser()\n"
        "p.add_argument('--cuda', action='store_true')\nargs = p.parse_args()\n"
        "device = torch.device('cuda' if args.cuda else 'cpu')\nnet = model.M().to(device)\n")
    out = tmp_path / "out"
    assert run(src, "-o", out) == 0
    assert f"ascendify emulate -- python {out / 'main.py'} --cuda ..." in capsys.readouterr().out
    assert run(src, "-o", tmp_path / "portable", "--to", "portable") == 0
    assert f"python {tmp_path / 'portable' / 'main.py'} --cuda ..." in capsys.readouterr().out


@pytest.mark.parametrize("text, runs", [
    ("if __name__ == '__main__':\n    main()\n", True),
    ("import torch\nmodel = build()\nwhile True:\n    step()\n", True),  # nanoGPT's train.py
    ("import argparse\nargs = argparse.ArgumentParser().parse_args()\n", True),
    ("import sys\nif len(sys.argv) > 1:\n    go(sys.argv[1])\n", True),
    ("import torch\n\n\ndef main():\n    for x in range(3):\n        pass\n", False),  # definitions only
    ("import torch.nn as nn\n\n\nclass Net(nn.Module):\n    pass\n", False),
    ("x = (1,\n", False),
    ("import sys\nsys.argv = ['train.py']\n", True),
    ("import sys\nif sys.argv:\n    pass\n", False),  # a module-level `if`'s test is not its code
    ("try:\n    pass\nfinally:\n    args = parser.parse_args()\n", True),
    ("with opened() as f:\n    def run():\n        return sys.argv\n", False),
])
def test_runs_as_program(text, runs):
    import ast

    from ascendify.migrate.render import runs_as_program
    from ascendify.migrate.walk import Index

    assert runs_as_program(text) is runs
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    assert runs_as_program(text, tree, Index(tree)) is runs  # as the conversion finds it, from its index


def test_visible_rows_add_up_to_the_total(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    src = project(tmp_path)
    assert run(src) == 0
    text = capsys.readouterr().out
    assert "models.py" in text  # a file with only an API note is a row: the notes total counts it
    rows = [re.split(r"\s*│\s*", line.strip()) for line in text.splitlines() if "│" in line]
    body, total = rows[:-1], rows[-1]
    assert total[0] == "total"
    for col in range(2, 6):
        assert sum(int(r[col]) for r in body) == int(total[col])
    assert "plain.py" not in text and "1 with nothing to report" in text


def _result(path: str, n_change: int, n_api: int) -> FileResult:
    r = FileResult(path=path, status="changed" if n_change else "unchanged")
    r.findings = [Finding("ASC101", CHANGE, 1, 1) for _ in range(n_change)]
    r.findings += [Finding("ASC902", API, 1, 1) for _ in range(n_api)]
    r.findings.append(Finding("ASC204", REPORT, 1, 1, severity="unsupported"))
    return r


def test_rows_beyond_the_limit_are_added_up_in_one_row():
    results = [_result(f"m{i}.py", i % 3, i % 2) for i in range(12)]
    rows, quiet = summary_rows(results, limit=5)
    assert len(rows) == 5 and quiet == 0
    assert rows[-1]["file"] == "(8 more files; -v lists them)"
    for key in ("converted", "manual", "notes"):
        assert sum(r[key] for r in rows) == sum(
            {"converted": s["converted"], "manual": s["cuda_sites"] - s["converted"], "notes": s["api_notes"]}[key]
            for s in (x.summary() for x in results))
    assert len(summary_rows(results, limit=5, verbose=True)[0]) == 12


def test_one_file_is_one_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    (tmp_path / "train.py").write_text(CUDA_SRC)
    assert run(tmp_path / "train.py", "-o", tmp_path / "out") == 0
    text = capsys.readouterr().out
    assert "1 file," in text and "1 files" not in text


@pytest.mark.skipif(os.name != "posix", reason="posix permissions")
def test_report_files_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        src = project(tmp_path)
        assert run(src, "-o", tmp_path / "out", "-q") == 0
    finally:
        os.umask(old)
    rep = tmp_path / "out_migration_report"
    for name in ("report.json", "report.md", "changes.csv", "unsupported.csv", "advice.csv", "cuda_ops.csv"):
        assert (rep / name).stat().st_mode & 0o777 == 0o644, name
    assert (tmp_path / "out" / "train_gpt.py").stat().st_mode & 0o777 == (src / "train_gpt.py").stat().st_mode & 0o777


def test_json_with_diff_stays_json_and_says_what_was_done(tmp_path, capsys):
    src = project(tmp_path)
    assert run(src, "--diff", "--format", "json") == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["mode"] == report["options"]["mode"] == "diff"
    diffs = {f["path"]: f["diff"] for f in report["files"]}
    assert "+    return x.npu()" in diffs["train_gpt.py"] and diffs["plain.py"] == ""
    for argv, mode in (((), "analyse"), (("--check",), "check"), (("-o", tmp_path / "o"), "write"),
                       (("--check", "--diff"), "check")):
        run(src, "--format", "json", *argv)
        assert json.loads(capsys.readouterr().out)["mode"] == mode, argv


def test_nothing_to_convert_says_so(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(empty) == 2
    assert f"nothing to convert under {empty}: no file at all" in capsys.readouterr().err
    (empty / "README.md").write_text("# hi\n")
    assert run(empty, "-o", tmp_path / "out") == 2
    assert "1 file, none of them Python" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_foreign_output_folder_is_refused_without_force(tmp_path, capsys):
    src = project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me\n")
    assert run(src, "-o", out, "-q") == 2
    err = capsys.readouterr().err
    assert f"the output folder {out} is not empty" in err and "thesis.tex" in err and "--force" in err
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]
    assert run(src, "-o", out, "-q", "--force") == 0
    assert (out / "train_gpt.py").exists() and (out / "thesis.tex").read_text() == "keep me\n"
    # ascendify's own earlier output is recognised (its marker) and written again
    fresh = tmp_path / "fresh"
    assert run(src, "-o", fresh, "-q") == 0
    assert (fresh / ".ascendify-migrate.json").exists()
    assert run(src, "-o", fresh, "-q") == 0
