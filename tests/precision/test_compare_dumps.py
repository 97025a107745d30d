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


class _MoveTo(torch.nn.Module):
    """A linear layer whose input is moved with Tensor.to(device) first (golden and target name devices differently)."""

    def __init__(self, device):
        super().__init__()
        self.device = device
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.to(self.device))


def test_device_arguments_are_not_differences(tmp_path):
    # the golden on 'cpu', the target on another device: x.to(device) differs only in the device argument, which
    # is the point of comparing (the worked example: CUDA code on the CPU vs the port on the npu)
    dumps = []
    for name, device in (("g", torch.device("cpu")), ("t", torch.device("cpu:0"))):
        torch.manual_seed(0)
        model = _MoveTo(device).eval()
        with torch.no_grad(), dump(model, tmp_path / name, level="mix", mode="stats", backward=False):
            model(torch.randn(2, 4))
        dumps.append(tmp_path / name)
    r = compare_dumps(*dumps)
    moves = [n for n in r.nodes if n.matched and (n.name or "").startswith("Tensor.to")]
    assert moves, [n.name for n in r.nodes]
    assert not any(n.flagged for n in r.nodes), [(n.name, n.reasons) for n in r.nodes if n.flagged]
    assert r.first_divergence is None
