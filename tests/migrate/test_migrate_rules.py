"""Every rule's documented examples are executed: before -> after, and "must not change" cases."""

from __future__ import annotations

import ast

import pytest

from ascendify.migrate import Options, migrate_source
from ascendify.migrate.rules import RULES

CASES = [(r.id, i, e) for r in RULES.values() for i, e in enumerate(r.examples)]


@pytest.mark.parametrize(("rule_id", "i", "example"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_rule_example(rule_id, i, example):
    out, result = migrate_source(example.src, Options(target=example.target, unsafe=example.unsafe))
    if rule_id == "ASC001":
        assert out == example.expected
    else:  # the examples leave out the `import torch_npu` line that ASC001 adds (tested there)
        assert _drop_npu_import(out) == _drop_npu_import(example.expected)
    if example.target == "npu" and out != example.src:
        assert out.count("import torch_npu\n") == 1
    ast.parse(out)
    if example.after is not None and example.fires:
        assert any(f.rule == rule_id and f.kind == "change" for f in result.findings)
    # a second run changes nothing
    again, _ = migrate_source(out, Options(target=example.target, unsafe=example.unsafe))
    assert again == out


def _drop_npu_import(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if line != "import torch_npu\n")


def test_every_rule_is_documented_and_has_examples():
    headings = ("## What it does", "## Why", "## Example", "## Use instead", "## Fix safety")
    for r in RULES.values():
        assert r.id.startswith("ASC") and len(r.id) == 6, r.id
        for h in headings:
            assert h in r.doc, f"{r.id} lacks {h}"
        assert r.examples, f"{r.id} has no example"
        assert r.safety in ("safe", "unsafe", "report-only")


def test_each_rule_lives_in_a_file_of_its_family():
    """ASC612 is a kernels rule: it is defined in rules/kernels.py or rules/kernels_<topic>.py (base.FAMILIES)."""
    from pathlib import Path

    from ascendify.migrate.rules import FAMILIES
    from ascendify.migrate.rules.base import family

    assert family("ASC612") == "kernels" and family("ASC099") == "general"
    wrong = []
    for r in RULES.values():
        fam = family(r.id)
        module = r.check.__module__.rpartition(".")[2]
        if module != fam and not module.startswith(fam + "_"):
            wrong.append(f"{r.id} ({fam}) is defined in rules/{module}.py")
    assert not wrong, wrong
    rules_dir = Path(__file__).resolve().parents[2] / "src" / "ascendify" / "migrate" / "rules"
    files = {p.stem for p in rules_dir.glob("*.py")} - {"__init__", "base"}
    strays = [f for f in files if not any(f == fam or f.startswith(fam + "_") for fam in FAMILIES.values())]
    assert not strays, f"rule files named after no family: {strays}"


def test_report_only_examples_are_reported():
    for r in RULES.values():
        if r.safety != "report-only" or r.id in ("ASC099",):
            continue
        for e in r.examples:
            _, result = migrate_source(e.src, Options(target=e.target))
            assert any(f.rule == r.id for f in result.findings), (r.id, e.src)


def test_unsafe_rule_only_applies_with_unsafe():
    src = "import torch.nn as nn\nm = nn.DataParallel(m, device_ids=[0, 1])\n"
    out, result = migrate_source(src, Options(target="npu"))
    assert out == src
    [row] = [f for f in result.findings if f.rule == "ASC303"]
    assert row.severity == "unsafe-fix" and "DistributedDataParallel" in row.tip
    out2, _ = migrate_source(src, Options(target="npu", unsafe=True))
    assert "DistributedDataParallel(m)" in out2


def test_fp16_reduction_rule_reports_only_assignments():
    flag = "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"
    src = f"import torch\n{flag} = False\nold = {flag}\ncfg.allow_fp16_reduced_precision_reduction = True\n"
    out, result = migrate_source(src, Options(target="npu"))
    assert out == src
    rows = {(f.rule, f.line) for f in result.findings if f.api == flag}
    # the assignment is ASC404's (not ASC403's kernel-selector reason); the read stays with ASC403
    assert rows == {("ASC404", 2), ("ASC403", 3)}
    assert not [f for f in result.findings if f.line == 4]
