"""The ``ascendify doctor`` front-end: JSON schema, bug-report block, --out files, check listing, bad input, and
that the environment checks never import torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ascendify import cli
from ascendify.doctor import REGISTRY, SCHEMA


def run_json(capsys, *args) -> tuple[int, dict]:
    rc = cli.main(["doctor", "--skip-device", "--quiet", "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_json_schema(capsys):
    rc, rep = run_json(capsys)
    assert rc == (1 if rep["summary"]["fail"] else 0)
    assert rep["schema"] == SCHEMA
    assert set(rep) == {"schema", "ascendify_version", "generated", "summary", "checks", "devices", "facts"}
    assert set(rep["summary"]) == {"ok", "warn", "fail", "skip", "verdict", "npu"}
    assert sum(rep["summary"][s] for s in ("ok", "warn", "fail", "skip")) == len(rep["checks"])
    assert [r["id"] for r in rep["checks"]] == list(REGISTRY)
    for r in rep["checks"]:
        assert set(r) == {"id", "title", "section", "status", "found", "fix", "details"}
        assert r["status"] in ("ok", "warn", "fail", "skip")
        assert r["found"]
        if r["status"] in ("warn", "fail"):
            assert r["fix"], r["id"]
    assert rep["devices"] == []
    for key in ("os", "python", "packages", "cann", "driver", "env", "libraries", "torch_npu_probe", "cuda"):
        assert key in rep["facts"]


def test_check_selection_and_listing(capsys):
    rc, rep = run_json(capsys, "--check", "os,python")
    assert [r["id"] for r in rep["checks"]] == ["os", "python"]
    assert cli.main(["doctor", "--list-checks"]) == 0
    out = capsys.readouterr().out
    for cid in REGISTRY:
        assert f"\n{cid}: " in "\n" + out
    assert cli.main(["doctor", "--list-checks", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {x["id"] for x in listed} >= set(REGISTRY)


def test_bad_arguments_are_usage_errors(capsys):
    assert cli.main(["doctor", "--check", "nope"]) == 2
    assert "unknown check nope" in capsys.readouterr().err
    assert cli.main(["doctor", "--device", "tpu"]) == 2
    assert "unknown --device tpu" in capsys.readouterr().err


def test_bug_report_and_out_dir(capsys, tmp_path):
    assert cli.main(["doctor", "--skip-device", "--quiet", "--bug-report"]) in (0, 1)
    block = capsys.readouterr().out
    assert block.startswith("### Environment (`ascendify doctor --bug-report`)")
    for label in ("`ascendify`", "`OS`", "`Python`", "`torch`", "`torch-npu`", "`CANN`", "`NPUs`", "`doctor`"):
        assert f"- {label}: " in block
    out = tmp_path / "rep"
    assert cli.main(["doctor", "--skip-device", "--quiet", "--out", str(out)]) in (0, 1)
    text = capsys.readouterr().out
    assert "wrote" in text and "check" in text
    rep = json.loads((out / "doctor.json").read_text())
    assert rep["schema"] == SCHEMA
    md = (out / "doctor.md").read_text()
    assert md.startswith("# ascendify doctor") and "| status | check | found | fix |" in md
    assert "## Bug report block" in md
    for name in ("doctor.json", "doctor.md"):
        assert oct((out / name).stat().st_mode & 0o777) == oct(0o644)


def test_terminal_table_fits_80_columns():
    env = dict(os.environ, COLUMNS="80")
    p = subprocess.run([sys.executable, "-m", "ascendify", "doctor", "--skip-device", "--quiet"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    lines = p.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert any(ln.split()[:2] == ["ok", "│"] or ln.startswith("ok ") for ln in lines)


def test_environment_checks_import_neither_torch_nor_torch_npu():
    code = (
        "import sys, time; t = time.perf_counter()\n"
        "from ascendify.doctor import run_checks\n"
        "rep = run_checks(device=False)\n"
        "assert 'torch' not in sys.modules and 'torch_npu' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)\n"
        "print(round(time.perf_counter() - t, 2))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    code = "import sys; import ascendify.commands.doctor; assert 'torch' not in sys.modules and 'ascendify.doctor' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_list_checks_fits_80_columns(capsys, monkeypatch):
    # the checks' documentation was printed as written, up to 115 characters wide
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["doctor", "--list-checks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # every line, the closing one on the device checks too (it was 105 wide), folded
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(line.startswith("    Fix: ") for line in lines)
    assert any(line.startswith("smoke:<target>, perf:<target>: device checks") for line in lines)
    assert "--check device runs them" in " ".join(line.strip() for line in lines)


def test_an_out_folder_that_cannot_be_written_exits_3_as_documented(capsys, tmp_path, monkeypatch):
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(ro) else real(p, mode, **kw))
    assert cli.main(["doctor", "--skip-device", "--quiet", "--out", str(ro / "rep")]) == 3  # was 2
    assert f"no permission to write in {ro}" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")  # a file where the folder should be stays a usage error
    assert cli.main(["doctor", "--skip-device", "--quiet", "--out", str(tmp_path / "afile" / "rep")]) == 2


def test_an_empty_check_id_is_a_usage_error(capsys):
    assert cli.main(["doctor", "--check", "", "--skip-device", "--quiet"]) == 2
    assert "--check needs a check id" in capsys.readouterr().err
