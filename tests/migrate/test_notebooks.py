"""Jupyter notebooks in the tree: their code cells are converted, the rest of the JSON stays byte for byte
(issue 26, item 12: a CUDA notebook was copied unconverted while the summary said "100% accounted")."""

from __future__ import annotations

import csv
import difflib
import json
from pathlib import Path

from ascendify import cli
from ascendify.migrate import Options
from ascendify.migrate.notebook import migrate_notebook

CELLS = [
    {"cell_type": "markdown", "metadata": {}, "source": ["# Train on the GPU\n", "Fast — très."]},
    {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
     "source": ["%matplotlib inline\n", "import torch\n", "device = torch.device(\"cuda\")"]},
    {"cell_type": "code", "execution_count": 2, "metadata": {"tags": ["x"]},
     "outputs": [{"name": "stdout", "output_type": "stream", "text": ["cuda:0\n"]}],
     "source": ["x = torch.ones(2).cuda()\n", "!nvidia-smi\n", "print(x.device)  # é\n", "torch.cuda.synchronize()"]},
    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
     "source": ["%%bash\n", "CUDA_VISIBLE_DEVICES=0 python train.py"]},
    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "y = x.to('cuda')"},
]
META = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}


def notebook(path: Path, cells=CELLS, meta=META) -> bytes:
    data = (json.dumps({"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}, indent=1,
                       ensure_ascii=False) + "\n").encode()  # as Jupyter writes it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_code_cells_are_converted_and_the_rest_of_the_notebook_kept_byte_for_byte(tmp_path, capsys):
    before = notebook(tmp_path / "p" / "nb.ipynb")
    assert cli.main(["migrate", str(tmp_path / "p"), "-o", str(tmp_path / "o")]) == 0
    after = (tmp_path / "o" / "nb.ipynb").read_bytes()
    old, new = json.loads(before), json.loads(after)
    assert source(new["cells"][1]) == "%matplotlib inline\nimport torch\nimport torch_npu\ndevice = torch.device(\"npu\")"
    assert source(new["cells"][2]) == ("x = torch.ones(2).npu()\n!nvidia-smi\nprint(x.device)  # é\n"
                                       "torch.npu.synchronize()")
    assert source(new["cells"][4]) == "y = x.to('npu')"
    assert new["cells"][3] == old["cells"][3]  # a cell magic is not Python: left as it is
    for o, n in zip(old["cells"], new["cells"], strict=True):  # outputs, metadata, counts: untouched
        assert {k: v for k, v in o.items() if k != "source"} == {k: v for k, v in n.items() if k != "source"}
    assert {k: v for k, v in old.items() if k != "cells"} == {k: v for k, v in new.items() if k != "cells"}
    # byte for byte: the only lines that differ are strings of a source list, in Jupyter's layout
    changed = [line for line in difflib.unified_diff(before.decode().splitlines(), after.decode().splitlines(),
                                                     lineterm="", n=0) if line[:1] in "+-" and line[:3] not in
               ("+++", "---")]
    assert changed and all(line[1:].startswith('    "') or line[1:].startswith('   "source": ') for line in changed)
    assert '"print(x.device)  # é\\n",' in after.decode()  # non-ASCII as the notebook had it
    summary = capsys.readouterr().out
    assert "all converted" not in summary  # the cell magic's CUDA line is listed for a person
    rows = list(csv.DictReader((tmp_path / "o_migration_report" / "unsupported.csv").open()))
    assert [(r["file"], r["line"]) for r in rows if "cell this cannot read" in r["reason"]] == [("nb.ipynb:cell_4", "1")]
    changes = list(csv.DictReader((tmp_path / "o_migration_report" / "changes.csv").open()))
    assert ("nb.ipynb:cell_3", "4") in {(r["file"], r["line"]) for r in changes}  # the cell's own line numbers


def test_a_converted_notebook_converts_to_itself(tmp_path):
    data = notebook(tmp_path / "nb.ipynb")
    once, r1 = migrate_notebook(data, Options(), "nb.ipynb")
    twice, r2 = migrate_notebook(once, Options(), "nb.ipynb")
    assert r1.status == "changed" and r2.status == "unchanged" and twice == once


def test_check_and_diff_see_a_notebook(tmp_path, capsys):
    notebook(tmp_path / "nb.ipynb")
    assert cli.main(["migrate", str(tmp_path / "nb.ipynb"), "--check", "-q"]) == 1
    assert cli.main(["migrate", str(tmp_path / "nb.ipynb"), "--diff", "-q"]) == 0
    assert '+    "x = torch.ones(2).npu()\\n",' in capsys.readouterr().out


def test_a_notebook_of_another_language_or_not_json_is_left_as_it_is(tmp_path, capsys):
    r_nb = notebook(tmp_path / "p" / "r.ipynb", cells=[{"cell_type": "code", "metadata": {}, "outputs": [],
                                                       "execution_count": None, "source": ["x <- 'cuda'"]}],
                    meta={"kernelspec": {"language": "R", "name": "ir", "display_name": "R"}})
    (tmp_path / "p" / "bad.ipynb").write_text('{"cells": [ torch.cuda')
    (tmp_path / "p" / "a.py").write_text("import torch\n")
    assert cli.main(["migrate", str(tmp_path / "p"), "-o", str(tmp_path / "o"), "-q", "--format", "json"]) == 3
    files = {f["path"]: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files["r.ipynb"]["status"] == "unchanged" and (tmp_path / "o" / "r.ipynb").read_bytes() == r_nb
    assert files["bad.ipynb"]["status"] == "skipped" and "not a notebook this can read" in files["bad.ipynb"]["reason"]
    assert (tmp_path / "o" / "bad.ipynb").read_text() == '{"cells": [ torch.cuda'  # copied as it is
