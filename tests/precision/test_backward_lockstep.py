"""Backward lockstep: forward-identical twins whose gradients differ (``models.BACKWARD_TWINS``) must be named
first with phase "backward"; clean twins (clamps, dropout in eval, renamed modules) flag nothing, in float32 and
under bf16 autocast (CPU here; the emulated NPU runs the same code path)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from precision_conftest import HERE
from precision_conftest import planted_models as M

from ascendify.precision import compare_models
from ascendify.precision import compare_render as cr
from ascendify.precision.gradients import LossError, default_loss, summary

CASES = list(M.BACKWARD_TWINS)


@pytest.fixture(scope="module", autouse=True)
def _emulator_before_the_first_backward():
    """These tests run backward() in the pytest process: the emulated NPU (which later tests enable in this
    process) must exist before the first backward, or autograd can never run on it here (emulator docs)."""
    import ascendify.emulator as emu

    emu.enable()


def _run(name: str, autocast=None):
    golden, target = M.backward_pair(name)
    scale = M.BACKWARD_TWINS[name][3]
    loss = None if scale is None else (default_loss, lambda out: default_loss(out) * scale)
    return compare_models(golden, target, M.inputs(), backward=True, loss_fn=loss, target_autocast=autocast)


@pytest.mark.parametrize("autocast", [None, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", CASES)
def test_backward_defect_is_named_first(case, autocast):
    planted = M.BACKWARD_TWINS[case][2]
    r = _run(case, autocast)
    assert r.weight_findings == []
    assert not any(n.flagged for n in r.nodes if n.phase == "forward"), "the forward is the same"
    fd = r.first_divergence
    if planted is None:
        assert r.verdict == "match" and fd is None, [(n.name, n.reasons) for n in r.flagged]
        return
    assert fd is not None and fd.phase == "backward", r.flagged
    assert (fd.name if planted == "(loss)" else fd.module) == planted, (fd.name, fd.reasons)


def test_backward_nodes_order_metrics_and_json():
    r = _run("bw_hand_backward")
    back = [n for n in r.nodes if n.phase == "backward"]
    assert back[0].name == "(loss)"  # backward order: the loss, then the last layers first
    assert back[1].module == "" and back[2].module == "head"
    act = next(n for n in back if n.module == "blocks.1.mlp.act")
    assert act.flagged and act.local["rel_l2"] > 0.1 and act.inputs["rel_l2"] < 1e-5  # received right, gave wrong
    fc2 = next(n for n in back if n.module == "blocks.1.mlp.fc2")
    assert not fc2.flagged and set(fc2.grads) == {"weight", "bias"}
    d = json.loads(r.to_json())
    assert d["first_divergence"]["phase"] == "backward" and d["first_divergence"]["module"] == "blocks.1.mlp.act"
    assert cr.headline(r)[1].startswith("DIVERGENCE (backward): first at blocks.1.mlp.act (HandGelu)")
    # the modules before it in the forward received a wrong gradient, but are not flagged: inherited
    fc1 = next(n for n in back if n.module == "blocks.1.mlp.fc1")
    assert fc1.inputs["rel_l2"] > 0.1 and not fc1.flagged


def test_a_cut_branch_lists_the_parameters_left_without_gradient():
    r = _run("bw_detach")
    missing = {m["name"] for m in r.missing_grads if m["side"] == "target"}
    assert {"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.bias", "blocks.0.ln1.weight"} <= missing
    assert r.first_divergence.module == "blocks.0"
    assert any("gradient on one side only" in line for line in cr.summary_lines(r))
    s = summary(r)  # what port writes to gradients.json
    assert s["verdict"] == "divergence" and s["first"] == "blocks.0"
    assert [d["name"] for d in s["differ"] if d["culprit"]] == ["blocks.0"]
    assert {"name": "blocks.0.attn.qkv.weight", "owner": "blocks.0.attn.qkv", "side": "target",
            "why": "no gradient reached it"} in s["missing"]


def test_the_loss_scale_is_said():
    r = _run("bw_loss_scale")
    assert "128x" in r.first_divergence.reasons[0] and "loss scale" in r.first_divergence.reasons[0]


def test_loss_fn_must_return_a_scalar():
    with pytest.raises(LossError, match=r"scalar tensor \(one element\).*shape \(4, 16, 64\)"):
        compare_models(M.reference(), M.reference(), M.inputs(), backward=True, loss_fn=lambda out: out * 2)
    with pytest.raises(LossError, match="returned a float"):
        compare_models(M.reference(), M.reference(), M.inputs(), backward=True, loss_fn=lambda out: 1.0)
    with pytest.raises(ValueError, match="callable"):
        compare_models(M.reference(), M.reference(), M.inputs(), backward=True, loss_fn="mse")


def test_the_models_own_gradients_and_modes_are_kept():
    g, t = M.backward_pair("bw_clean")
    t.train()
    sentinel = torch.full_like(t.head.weight, 3.0)
    t.head.weight.grad = sentinel
    r = compare_models(g, t, M.inputs(), backward=True)
    assert r.verdict == "match" and t.training and t.head.weight.grad is sentinel and g.head.weight.grad is None


def test_backward_from_the_command_line(tmp_path, capsys):
    from ascendify.cli import main

    models = HERE / "models.py"
    args = ["compare", "--golden-model", f"{models}:Reference", "--model", f"{models}:_with(Reference, _hook_attn)()",
            "--inputs", "4x16:int64:64", "--target", "cpu:fp32", "-o", str(tmp_path / "o")]
    assert main(args) == 0  # forward only: the hook changes nothing there
    capsys.readouterr()
    assert main([*args, "--backward"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("DIVERGENCE (backward): first at blocks.0.attn (HookAttention)"), first
    d = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert d["first_divergence"]["phase"] == "backward"


def test_a_loss_that_is_not_a_scalar_is_a_clear_error_on_the_command_line(tmp_path, capsys):
    from ascendify.cli import main

    (tmp_path / "losses.py").write_text("def per_token(out):\n    return (out ** 2).mean(-1)\n")
    models = HERE / "models.py"
    rc = main(["compare", "--model", f"{models}:Reference", "--inputs", "4x16:int64:64", "--target", "cpu:fp32",
               "--backward", "--loss", f"{tmp_path / 'losses.py'}:per_token", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 3 and "loss_fn must return a scalar tensor (one element)" in err and "(4, 16)" in err
    assert not (tmp_path / "o").exists()


class _Trunk(torch.nn.Module):
    """Returns its features and a pooling of them (as Hugging Face's ResNetModel does); BatchNorm in eval."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return h, h.mean((2, 3))


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = _Trunk()
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.trunk(x)[1])  # the features themselves are not used outside the trunk


class _HalvingHead(torch.nn.Linear):
    """A head whose input gradient is halved by a hook: everything before it inherits a wrong gradient."""

    def forward(self, x):
        if x.requires_grad:
            x.register_hook(lambda g: g * 0.5)
        return super().forward(x)


def test_an_output_used_inside_its_module_and_batchnorm_re_runs():
    torch.manual_seed(0)
    golden = _Net()
    golden.trunk.bn.running_var.fill_(2.0)
    target = copy.deepcopy(golden)
    target.head.__class__ = _HalvingHead
    r = compare_models(golden, target, torch.randn(2, 3, 8, 8), backward=True)
    assert r.first_divergence.module == "head" and r.first_divergence.phase == "backward"
    # the trunk received a wrong gradient, so it is re-run from the golden's: its own backward is right (its
    # features' use inside it not counted twice, its BatchNorm statistics intact for the backward)
    trunk = next(n for n in r.nodes if n.phase == "backward" and n.module == "trunk")
    assert trunk.inputs["rel_l2"] > 0.1 and trunk.note is None
    assert not trunk.flagged and trunk.local["rel_l2"] < 1e-6, trunk.reasons


class _Cache:
    """A key cache every layer appends to (as Hugging Face's DynamicCache)."""

    def __init__(self):
        self.keys = []


class _CachedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, cache):
        cache.keys.append(self.fc(x))
        return torch.stack(cache.keys).sum(0)


class _CachedNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = _CachedLayer(), _CachedLayer()

    def forward(self, x):
        cache = _Cache()
        return self.b(self.a(x, cache), cache)


def test_a_cache_changed_by_each_call_is_re_run_as_the_call_saw_it():
    torch.manual_seed(0)
    net = _CachedNet()
    r = compare_models(net, net, torch.randn(3, 4), backward=True, tolerance=1e-3)
    assert r.verdict == "match", [(n.name, n.reasons) for n in r.flagged]
