"""compare_dumps beyond the planted suite: tensor-mode dumps (full metrics from the saved arrays), inherited error
downstream of a defect, the result's CSV rows."""

from __future__ import annotations

import pytest
import torch
from conftest import planted_models as M

from ascendify.precision import compare_dumps, dump
from ascendify.precision.compare_report import csv_rows
from ascendify.precision.lockstep import copy_weights


def _dump(model, path, mode):
    copy_weights(M.reference(), model)
    model.eval()
    with torch.no_grad(), dump(model, path, level="mix", mode=mode, backward=False):
        model(M.inputs())
    return path


def test_tensor_mode_dumps_use_the_saved_arrays(tmp_path):
    g = _dump(M.reference(), tmp_path / "g", "tensors")
    t = _dump(M.twin("head_permutation"), tmp_path / "t", "tensors")
    r = compare_dumps(g, t)
    fd = r.first_divergence
    assert fd.module == "blocks.1.attn"
    assert fd.metrics["cosine"] < 0.9 and "ulp_max" in fd.metrics  # real tensor metrics, not statistics
    # downstream calls show the inherited error and are not flagged
    after = [n for n in r.nodes if n.order > r.nodes[fd.index].order and n.matched and n.module == "blocks.1.ln2"]
    assert after and not any(n.flagged for n in after)
    assert any((n.note or "").startswith("inherited") for n in after)


def test_csv_rows_mark_the_culprit(tmp_path):
    g = _dump(M.reference(), tmp_path / "g", "stats")
    t = _dump(M.twin("ln_eps"), tmp_path / "t", "stats")
    rows = csv_rows(compare_dumps(g, t))
    culprits = [r for r in rows if r["Culprit"] == "yes"]
    assert [r["Module"] for r in culprits] == ["blocks.1.ln2"] and culprits[0]["Result"] == "error"
    assert {r["Result"] for r in rows} <= {"pass", "warning", "error", "skip"}
    assert culprits[0]["Local RelL2"] == pytest.approx(2e-4, rel=0.2)
