"""API notes a person can act on: English limits (ours, original kept), rows that apply to the call, one row
per API."""

from __future__ import annotations

import re

from ascendify.core import knowledge
from ascendify.migrate.engine import Options, migrate_source
from ascendify.migrate.model import API, FileResult
from ascendify.migrate.render import api_groups
from ascendify.migrate.rules.api_support import applicable_limit, gloss

CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


def notes(src: str) -> list:
    _, res = migrate_source(src.encode(), Options(target="npu"), path="t.py")
    return [f for f in res.findings if f.kind == API]


def test_every_limit_text_of_the_support_list_has_an_english_translation_beside_it():
    texts = {a["constraints"] for a in knowledge.load("npu_api_support")["apis"] if a.get("constraints")}
    data = knowledge.load("api_limits_en")
    table = {e["zh"]: e["en"] for e in data["texts"]}
    assert set(table) == texts and data["provenance"]["texts"] == len(texts)
    for zh, en in table.items():
        assert en and not CJK.search(en), zh
        assert zh.count("\n") == en.count("\n"), zh  # line by line: a dropped line drops its translation
    assert gloss("`input`仅支持fp32") == "`input` supports fp32 only"
    assert gloss("当前仅支持推理场景，不支持训练场景") == "inference only, not training"


def test_dtype_limits_on_arguments_the_call_does_not_take_as_tensors_are_dropped():
    # module constructors take no tensor (their input comes in forward); a sampler's dataset is no tensor
    src = ("import torch\nfrom torch import nn\nfrom torch.utils.data.distributed import DistributedSampler\n"
           "m = nn.Sequential(nn.Identity(), nn.ReLU())\ns = DistributedSampler(ds)\n")
    assert notes(src) == []
    # the same kind of limit on a function's tensor argument stays, in English
    (relu,) = notes("import torch\ny = torch.nn.functional.relu(x)\n")
    assert relu.severity == "dtype-limits" and relu.gloss.startswith("`input` supports bf16, fp16, fp32")
    assert "仅支持" in relu.message  # the original stays beside the translation


def test_a_constructor_keeps_its_limits_that_are_not_about_tensor_dtypes():
    zh = knowledge.api_support()["torch.nn.Conv2d"]["constraints"]
    assert "`input`仅支持" in zh
    kept, en, dtype_only = applicable_limit("torch.nn.Conv2d", zh)
    assert "`input`仅支持" not in kept and kept and not dtype_only
    assert "allow_internal_format" in en and "supports bf16" not in en
    # an optimizer's params are tensors: their dtype limit applies at the constructor
    kept, en, _ = applicable_limit("torch.optim.AdamW", knowledge.api_support()["torch.optim.AdamW"]["constraints"])
    assert "`params` supports bf16, fp16, fp32" in en


def test_repeated_notes_for_one_api_collapse_into_one_row_with_a_count():
    src = "import torch\nfor x in xs:\n    a = torch.nn.functional.relu(x)\n    b = torch.nn.functional.relu(a)\n"
    (row,) = notes(src + "c = torch.nn.functional.relu(b)\n")
    assert row.line == 3 and row.tip.endswith("(3 calls in this file)")
    r1, r2 = FileResult("a.py", "unchanged"), FileResult("b.py", "unchanged")
    r1.findings, r2.findings = notes(src), notes("import torch\ny = torch.nn.functional.relu(x)\n")
    (group,) = api_groups([r1, r2])
    assert group["calls"] == 3 and group["where"] == ["a.py:3", "b.py:2"]
    assert group["limit"].startswith("`input` supports")


def test_every_kind_of_api_note_is_listed_once_per_file_with_its_count():
    src = ("import torch\na = torch.poisson(r)\nb = torch.poisson(r)\nc = x.double()\nd = y.double()\n"
           "e = z.double()\nf = torch.zeros(2, dtype=torch.float64)\ng = torch.ones(2, dtype=torch.float64)\n")
    rows = {(f.rule, f.api): f for f in notes(src)}
    assert rows[("ASC901", "torch.poisson")].tip.endswith("(2 calls in this file)")
    assert rows[("ASC904", ".double()")].line == 4 and rows[("ASC904", ".double()")].tip.endswith("(3 uses in this file)")
    assert rows[("ASC904", "torch.float64")].tip.endswith("(2 uses in this file)")
    assert len([f for f in notes(src) if f.rule == "ASC904"]) == 2
