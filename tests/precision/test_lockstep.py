"""compare_models: weights, in-place ops, module state, matching, result object (the planted suite is in
test_planted.py)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
from precision_conftest import planted_models as M

from ascendify.precision import compare_models
from ascendify.precision.lockstep import copy_weights


def test_result_object_and_json():
    r = compare_models(M.reference(), M.twin("scaled_1.02"), M.inputs(), copy_weights=True)
    fd = r.first_divergence
    assert r.verdict == "divergence"
    assert fd.module == "blocks.0.attn" and fd.api is None
    assert fd.metrics["rel_l2"] == pytest.approx(0.02, rel=1e-3)
    assert fd.source and fd.source.endswith(":67")  # the line in Block.forward that calls self.attn
    assert fd.defined_at and "models.py" in fd.defined_at
    d = json.loads(r.to_json())
    assert d["first_divergence"]["module"] == "blocks.0.attn"
    assert d["culprits"] == [n.name for n in r.nodes if n.module == "blocks.0.attn" and n.kind == "module"]
    # ancestors are flagged but explained by the culprit
    assert {n.module for n in r.flagged} == {"", "blocks.0", "blocks.0.attn"}


def test_same_model_object_is_copied_and_matches():
    m = M.reference()
    r = compare_models(m, m, M.inputs())
    assert r.verdict == "match" and r.first_divergence is None
    assert r.weights["differ"] == [] and not r.weights["copied"] and r.weights["how"] == "by name"


def test_weights_copied_by_order_when_names_differ():
    golden, target = M.reference(), M.twin("renamed_wrapped", seed=123)  # other seed: other initial weights
    assert copy_weights(golden, target) == "by order"
    torch.testing.assert_close(target.blocks[0].mlp.inner.up.weight, golden.blocks[0].mlp.fc1.weight)


def test_weights_of_a_different_model_are_refused():
    with pytest.raises(ValueError, match="cannot copy weights"):
        copy_weights(nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 5)))


class _InplaceNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU(inplace=True)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.act(self.bn(self.conv(x)))  # ReLU overwrites the BatchNorm output in place
        y.mul_(2.0)
        return self.fc(y.mean((2, 3)))


def test_inplace_ops_and_batchnorm_state():
    torch.manual_seed(0)
    g, t = _InplaceNet(), _InplaceNet()
    g.bn.running_mean.fill_(0.3)
    g.eval()
    t.train()
    x = torch.randn(2, 3, 5, 5)
    r = compare_models(g, t, x)
    assert r.verdict == "match", [n.reasons for n in r.flagged]
    assert t.training and not g.training  # training flags restored
    torch.testing.assert_close(t.bn.running_mean, torch.full((4,), 0.3))  # buffers copied, not updated by reruns
    bn = next(n for n in r.nodes if n.module == "bn")
    assert bn.local["rel_l2"] == 0.0  # the recorded golden output is the pre-ReLU value, not the overwritten one


def test_extra_and_missing_calls_are_reported_not_flagged():
    class WithDropout(M.Reference):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.1)  # identity in eval mode: an extra call, same computation

        def forward(self, idx):
            return super().forward(idx) if False else self.head(self.drop(self.ln_f(self._trunk(idx))))

        def _trunk(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
            for blk in self.blocks:
                x = blk(x)
            return x

    torch.manual_seed(0)
    r = compare_models(M.reference(), WithDropout(), M.inputs())
    assert r.verdict == "match"
    assert [u["name"] for u in r.unmatched_target] == ["drop (Dropout)"]
    assert "extra call" in r.unmatched_target[0]["reason"]


def test_different_call_counts_match_by_order():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(torch.tanh(self.fc(x)))

    class Unrolled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(torch.tanh(self.fc(x))) * 1.05  # the scale shows on the root only

    torch.manual_seed(0)
    r = compare_models(Twice(), Unrolled(), torch.randn(3, 4))
    fcs = [n for n in r.nodes if n.module == "fc"]
    assert len(fcs) == 2 and all(n.matched and not n.flagged for n in fcs)
    assert r.first_divergence.module == ""


def test_mix_level_names_the_api_inside_the_module():
    r = compare_models(M.reference(), M.twin("gelu_tanh"), M.inputs(), copy_weights=True, level="mix")
    fd = r.first_divergence
    assert fd.module == "blocks.1.mlp.act"
    assert fd.api == "torch.nn.functional.gelu"


def test_tolerance_scales_every_limit():
    r = compare_models(M.reference(), M.twin("ln_eps"), M.inputs(), copy_weights=True, tolerance=1e3)
    assert r.verdict == "match"


def test_bad_level():
    with pytest.raises(ValueError, match="level"):
        compare_models(M.reference(), M.reference(), M.inputs(), level="api")
