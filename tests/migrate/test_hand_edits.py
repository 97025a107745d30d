"""Migrating again into an earlier output keeps a person's fixes: kept, or the fresh migration beside them."""

from __future__ import annotations

import json
from pathlib import Path

from ascendify import cli
from ascendify.migrate.files import OUTPUT_MARKER


def migrate(*argv) -> int:
    return cli.main(["migrate", *map(str, argv), "-q"])


def setup(tmp_path: Path) -> tuple[Path, Path]:
    src, out = tmp_path / "p", tmp_path / "out"
    src.mkdir()
    (src / "a.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    (src / "b.py").write_text("import torch\ny = torch.ones(1).cuda()\n")
    (src / "c.py").write_text("print(1)\n")
    assert migrate(src, "-o", out) == 0
    return src, out


def report(tmp_path: Path) -> dict:
    data = json.loads((tmp_path / "out_migration_report" / "report.json").read_text())
    return {f["path"]: f for f in data["files"]} | {"totals": data["totals"]}


def test_the_marker_records_what_was_written(tmp_path):
    _, out = setup(tmp_path)
    files = json.loads((out / OUTPUT_MARKER).read_text())["files"]
    assert set(files) == {"a.py", "b.py", "c.py"}
    assert all(len(v["out"]) == 64 and len(v["src"]) == 64 for v in files.values())


def test_a_hand_edit_is_kept_and_a_deleted_file_written_again(tmp_path):
    src, out = setup(tmp_path)
    fixed = (out / "a.py").read_text() + "# my fix\n"
    (out / "a.py").write_text(fixed)
    (out / "c.py").unlink()
    before_b = (out / "b.py").read_text()
    assert migrate(src, "-o", out) == 0
    assert (out / "a.py").read_text() == fixed
    assert (out / "b.py").read_text() == before_b and (out / "c.py").read_text() == "print(1)\n"
    r = report(tmp_path)
    assert r["a.py"]["status"] == "kept" and "edited by hand" in r["a.py"]["reason"]
    assert r["totals"]["kept"] == 1 and r["b.py"]["status"] == "changed"
    assert migrate(src, "-o", out) == 0  # still an edit on the next run: the earlier record is kept
    assert (out / "a.py").read_text() == fixed and report(tmp_path)["a.py"]["status"] == "kept"


def test_an_edit_whose_input_changed_too_gets_the_fresh_migration_beside_it(tmp_path, capsys):
    src, out = setup(tmp_path)
    (out / "b.py").write_text((out / "b.py").read_text() + "# fix b\n")
    (src / "b.py").write_text("import torch\ny = torch.ones(3).cuda()\n")
    assert cli.main(["migrate", str(src), "-o", str(out)]) == 0
    assert "# fix b" in (out / "b.py").read_text() and "ones(1)" in (out / "b.py").read_text()
    fresh = (out / "b.py.migrated").read_text()
    assert "torch.ones(3).npu()" in fresh and "# fix b" not in fresh
    said = " ".join(capsys.readouterr().out.split())
    assert "kept b.py" in said and "b.py.migrated" in said


def test_force_overwrites_hand_edits_and_drops_stale_beside_files(tmp_path):
    src, out = setup(tmp_path)
    (out / "b.py").write_text("# mine\n")
    (src / "b.py").write_text("import torch\ny = torch.ones(3).cuda()\n")
    assert migrate(src, "-o", out) == 0 and (out / "b.py.migrated").exists()
    assert migrate(src, "-o", out, "--force") == 0
    assert "torch.ones(3).npu()" in (out / "b.py").read_text()
    assert not (out / "b.py.migrated").exists()
    assert report(tmp_path)["totals"]["kept"] == 0
