"""`ascendify advise` on the test programs (conftest.advised): every planted slow pattern is named at its line by
its rule, the clean twins get at most one finding, the outputs (terminal at 80 columns, JSON, HTML with a plot, the
trace) are there and agree, and --apply's rewrite of the planted language model matches in lockstep with fewer ops
per step."""

from __future__ import annotations

import json

import pytest

from ascendify.advise import analyze
from ascendify.advise.trace import Trace

from .conftest import planted


def _doc(advised, name):
    return json.loads((advised / f"{name}.json").read_text())


def _all(doc):
    return doc["findings"] + doc["minor_findings"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lm_planted", "loop_planted"])
def test_every_planted_pattern_is_named_at_its_line(advised, name):
    doc = _doc(advised, name)
    found = {(f["line"], f["rule"]) for f in _all(doc) if f["file"] and f["file"].endswith(f"{name}.py")}
    missing = [p for p in planted(name) if p not in found]
    assert not missing, f"not named: {missing}; found {sorted(found)}"
    # and every finding names a line of the program, never ours or torch's
    assert all(f["file"] and f["file"].endswith(f"{name}.py") for f in _all(doc)), [f["where"] for f in _all(doc)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lm_clean", "loop_clean"])
def test_a_clean_twin_gets_at_most_one_finding(advised, name):
    doc = _doc(advised, name)
    assert len(_all(doc)) <= 1, [(f["rule"], f["where"], f["message"]) for f in _all(doc)]


@pytest.mark.slow
def test_outputs_fit_80_columns_and_agree(advised):
    for name in ("lm_planted", "loop_planted", "lm_clean"):
        text = (advised / f"{name}.txt").read_text()
        assert "ascendify advise:" in text and "Estimated step on Ascend 910B3" in text
        long = [ln for ln in text.splitlines() if len(ln) > 80 and not ln.startswith(("final loss", "loss", "epoch"))]
        assert not long, long
        html = (advised / f"{name}-html" / "advise.html").read_text()
        assert "Make it fast on the NPU" in html and "<img" in html
        doc = _doc(advised, name)
        assert doc["schema"] == "ascendify.advise/1" and doc["estimate"]["estimate"] is True
        for f in doc["findings"]:
            assert f["where"] in text and f["sources"] and f["fix"] and f["why"]
    # the trace, analysed again here, gives the same findings as the run
    trace = Trace.from_dict(json.loads((advised / "lm_planted.trace.json").read_text()))
    again = analyze(trace)
    doc = _doc(advised, "lm_planted")
    assert [(f.rule, f.line) for f in again.findings] == [(f["rule"], f["line"]) for f in doc["findings"]]


@pytest.mark.slow
def test_apply_rewrites_the_fused_findings_and_proves_them(advised):
    doc = json.loads((advised / "lm-fast" / "advise-apply.json").read_text())
    rules = {a["rule"] for a in doc["applied"]}
    assert {"ADV401", "ADV402", "ADV404", "ADV405"} <= rules, doc["applied"]
    ls = doc["lockstep"]
    assert ls["verdict"] == "match", ls
    assert {"RMSNorm", "Block"} <= set(ls["swapped_classes"])  # the rewritten code ran, not the original
    ops = doc["ops_per_step"]
    assert ops["after"] < ops["before"], ops
    assert {"ADV401", "ADV402", "ADV404", "ADV405"} <= set(ops["rules_gone"])
    diff = (advised / "lm-fast" / "advise-apply.diff").read_text()
    assert "+import torch_npu" in diff and "npu_rms_norm" in diff and "scaled_dot_product_attention" in diff
    # the copy is whole: the other programs came along untouched
    assert (advised / "lm-fast" / "lm_clean.py").is_file()
