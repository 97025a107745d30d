"""ASC620: compiled CUDA extensions imported by name are listed, with the NPU path; files naming nothing else
CUDA are still read (the prefilter knows the names)."""

from __future__ import annotations

import json

from ascendify import cli
from ascendify.core import knowledge
from ascendify.migrate import Options, migrate_source


def rows(src: str) -> list:
    _, result = migrate_source(src, Options(target="npu"))
    return [f for f in result.findings if f.rule == "ASC620"]


def test_extension_imports_are_listed_with_their_npu_path():
    found = rows("import torch\nimport dropout_layer_norm\nfrom selective_scan_cuda import fwd\nimport os\n")
    assert [f.api for f in found] == ["dropout_layer_norm", "selective_scan_cuda"]
    assert "npu_rms_norm" in found[0].tip and "this project" in found[0].message  # a generic name says so
    assert "mamba" in found[1].message and "this project" not in found[1].message


def test_relative_imports_and_look_alike_names_are_not_listed():
    assert rows("from . import rotary_emb\nimport rotary_embedding\nimport cupyx_like\n") == []


def test_every_row_names_a_source_and_an_npu_path():
    table = knowledge.load("cuda_extension_modules")
    assert table["_provenance"] and len(table["modules"]) >= 20
    for name, row in table["modules"].items():
        assert name.isidentifier() and row["source"] and row["npu_path"] and row["what"], name


def test_a_file_naming_no_cuda_api_is_still_read(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "norm.py").write_text("import rotary_emb\n\ndef f(x):\n    return rotary_emb.apply(x)\n")
    assert cli.main(["migrate", str(tmp_path / "p"), "--report", str(tmp_path / "r"), "-q"]) == 0
    files = json.loads((tmp_path / "r" / "report.json").read_text())["files"]
    assert [f["rule"] for f in files[0]["findings"]] == ["ASC620"]


def test_xformers_swiglu_gets_mlp_advice_not_attention_advice():
    # TinyLlama imports xformers' SwiGLU: the generic xformers tip (SDPA) pointed at the wrong kernel
    _, result = migrate_source(b"from xformers.ops import SwiGLU\nmlp = SwiGLU(64, 128)\n", Options(target="npu"))
    rows = [f for f in result.findings if f.rule == "ASC604"]
    assert len(rows) == 2 and all("SwiGLU" in f.message and "npu_swiglu" in f.tip for f in rows)
    assert all("scaled_dot_product_attention" not in f.tip for f in rows)
