"""Weights before lockstep: a differing parameter is a finding (never silently overwritten), the copy only when
asked or when every random parameter differs; the golden's own NaN/Inf said first."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn as nn
from precision_conftest import planted_models as M

from ascendify.precision import compare_models
from ascendify.precision import compare_render as cr
from ascendify.precision.weights import compare_weights


def _rolled():
    t = M.reference()
    with torch.no_grad():
        t.blocks[0].attn.proj.weight.copy_(t.blocks[0].attn.proj.weight.roll(1, 0))
    return t


def test_a_rolled_attention_projection_is_a_finding_not_a_match(tmp_path):
    r = compare_models(M.reference(), _rolled(), M.inputs())
    assert r.verdict == "divergence"
    (w,) = r.weight_findings
    assert w["name"] == "blocks.0.attn.proj.weight" and w["owner"] == "blocks.0.attn.proj"
    assert w["why"] == "the golden rolled by 1 along dim 0" and w["rel_l2"] > 0.1 and w["max_abs"] > 0
    assert not r.weights["copied"]
    assert r.first_divergence.module == "blocks.0.attn.proj"  # the target kept its weights: lockstep sees it too
    lines = cr.summary_lines(r)
    assert "1 weight(s) differ" in lines[0] and "blocks.0.attn.proj.weight" in lines[0]
    assert lines[1].startswith("  weight blocks.0.attn.proj.weight of blocks.0.attn.proj")
    d = json.loads(r.to_json())
    keys = list(d)
    assert keys.index("weights") < keys.index("first_divergence")
    assert d["weights"]["differ"][0]["name"] == "blocks.0.attn.proj.weight"
    cr.write_outputs(r, tmp_path)
    html = (tmp_path / "compare.html").read_text()
    assert html.index('id="weights"') < html.index('id="first-divergence"')
    assert "blocks.0.attn.proj.weight" in html


def test_copy_only_when_asked_or_every_random_parameter_differs():
    r = compare_models(M.reference(), _rolled(), M.inputs(), copy_weights=True)
    assert r.verdict == "match" and r.weights["copied"] and r.weight_findings == []
    assert "copied from the golden" in cr.headline(r)[1]
    r = compare_models(M.reference(0), M.reference(7), M.inputs())  # two random initialisations
    assert r.weights["copied"] and r.weights["all_differ"] and r.verdict == "match"
    assert "every parameter differed" in cr.headline(r)[1]
    r = compare_models(M.reference(0), M.reference(7), M.inputs(), copy_weights=False)
    assert r.verdict == "divergence" and len(r.weight_findings) > 20


def test_the_old_keyword_still_works_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = compare_models(M.reference(), _rolled(), M.inputs(), copy_golden_weights=True)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert r.verdict == "match" and r.weights["copied"]


def test_names_on_one_side_and_shapes_are_listed():
    torch.manual_seed(0)
    g = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    t = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2, bias=False))
    t[0].load_state_dict(g[0].state_dict())
    with torch.no_grad():
        t[1].weight.copy_(g[1].weight)
    w = compare_weights(g, t)
    assert w.missing == [{"name": "1.bias", "side": "golden only"}] and w.differ == []
    r = compare_models(g, t, torch.randn(3, 4))
    assert any("1.bias (golden only)" in line for line in cr.summary_lines(r))
    wide = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3))
    d = compare_weights(g, wide).differ
    assert [x["name"] for x in d if x["rel_l2"] is None] == ["1.weight", "1.bias"]
    assert "shape [2, 4] in the golden, [3, 4] in the target" in next(x["why"] for x in d if x["name"] == "1.weight")


def test_renamed_modules_show_the_mapping_used():
    golden, target = M.reference(), M.twin("renamed_wrapped")
    w = compare_weights(golden, target)
    assert w.how == "by order (names differ)"
    assert {"golden": "blocks.0.mlp.fc1.weight", "target": "blocks.0.mlp.inner.up.weight"} in w.mapping


def test_non_finite_values_in_the_golden_are_said_first():
    g = M.reference()
    with torch.no_grad():
        g.blocks[1].ln2.weight[3] = float("nan")
    t = M.reference()
    r = compare_models(g, t, M.inputs(), copy_weights=True)
    assert r.golden_nonfinite["module"] == "blocks.1.ln2"
    lines = cr.summary_lines(r)
    assert lines[0].startswith("GOLDEN NOT FINITE") and "blocks.1.ln2" in lines[0]
    assert any("golden's weights hold NaN/Inf: blocks.1.ln2.weight" in line for line in lines)
    assert json.loads(r.to_json())["golden_nonfinite"]["module"] == "blocks.1.ln2"


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_a_target_handed_over_in_low_precision_holds_the_same_weights(dtype):
    g = M.reference()
    t = M.reference().to(dtype)
    assert compare_weights(g, t).differ == []


def test_a_missing_submodule_is_listed_in_weights_and_calls():
    t = M.reference()
    t.blocks[1].ln2 = nn.Identity()
    r = compare_models(M.reference(), t, M.inputs())
    assert {"name": "blocks.1.ln2.weight", "side": "golden only"} in r.weights["missing"]
    lines = cr.summary_lines(r)
    assert any("blocks.1.ln2.weight (golden only)" in line for line in lines)
    # the Identity in its place is compared with the golden LayerNorm (the mapping used is said) and named
    assert r.first_divergence.module == "blocks.1.ln2" and "  compared with golden blocks.1.ln2 (LayerNorm)" in lines
    assert any("blocks.1.ln2 (LayerNorm) -> blocks.1.ln2 (Identity)" in line for line in lines)
    t.blocks[0].ln1 = None  # a submodule gone, its call gone: the golden call is listed as unmatched
    t.blocks[0].forward = lambda x, b=t.blocks[0]: (lambda y: y + b.mlp(b.ln2(y)))(x + b.attn(x))
    r = compare_models(M.reference(), t, M.inputs())
    unmatched = next(line for line in cr.summary_lines(r) if line.strip().startswith("unmatched:"))
    assert "golden blocks.0.ln1 (LayerNorm)" in unmatched
