"""compare_dumps beyond the planted suite: tensor-mode dumps (full metrics from the saved arrays), inherited error
downstream of a defect, the result's CSV rows."""

from __future__ import annotations

import pytest
import torch
from precision_conftest import planted_models as M

from ascendify.precision import compare_dumps, dump
from ascendify.precision.compare_render import csv_rows
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


@pytest.mark.parametrize("keyword", [False, True])
def test_device_strings_are_devices(tmp_path, keyword):
    # a device written as a string, positional or keyword ('cuda:0' vs 'cpu' in a real pair): never compared
    class Move(torch.nn.Module):
        def __init__(self, device):
            super().__init__()
            self.device, self.fc = device, torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x.to(device=self.device) if keyword else x.to(self.device, non_blocking=False))

    dumps = []
    for name, device in (("g", "cpu"), ("t", "cpu:0")):
        torch.manual_seed(0)
        with torch.no_grad(), dump(Move(device), tmp_path / name, level="mix", backward=False) as d:
            d.model(torch.ones(2, 4))
        dumps.append(tmp_path / name)
    r = compare_dumps(*dumps)
    assert any(n.api == "Tensor.to" and n.matched for n in r.nodes)
    assert r.verdict == "match", [(n.name, n.reasons) for n in r.flagged]


def test_is_device():
    from ascendify.precision.dumpcompare import is_device

    assert all(map(is_device, ("cpu", "npu", "cuda:0", "npu:7", "xpu", "mps")))
    assert not any(map(is_device, ("mean", "cuda:", "npu:x", "tanh", "", 0, None)))


def test_parameters_changed_through_data_are_summarised_again(tmp_path):
    # a hand-written SGD step (p.data.add_) leaves the parameter's version counter alone: the second call must
    # still see the new weights
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    with dump(model, tmp_path / "d", level="mix", backward=False):
        for _ in range(2):
            with torch.no_grad():
                model(torch.ones(2, 4))
            for p in model.parameters():
                p.data.add_(torch.ones_like(p), alpha=1.0)
    from ascendify.precision import load_dump

    by = load_dump(tmp_path / "d").by_name()
    w0, w1 = (by[f"Module.Linear.forward.{i}"].params["weight"] for i in (0, 1))
    assert w1.mean == pytest.approx(w0.mean + 1.0, abs=1e-6)
    f0, f1 = (by[f"Functional.linear.{i}.forward"].inputs[1] for i in (0, 1))
    assert f1.mean == pytest.approx(f0.mean + 1.0, abs=1e-6)


class _DropNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(6, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.dec = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.dec(self.drop(self.enc(x)))


def _dropout_run(path, mask_seed):
    """Two training steps with hand-written SGD; the dropout masks drawn from generator seed ``mask_seed``."""
    torch.manual_seed(0)
    model = _DropNet()
    x = torch.randn(5, 6)
    torch.manual_seed(mask_seed)
    with dump(model, path, level="mix", backward=False):
        for _ in range(2):
            model.zero_grad()
            model(x).square().mean().backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.5)
    return path


def test_random_call_with_different_draws_is_not_comparable(tmp_path):
    g = _dropout_run(tmp_path / "g", 1)
    r = compare_dumps(g, _dropout_run(tmp_path / "t", 2))
    assert r.verdict == "not comparable" and not r.flagged, [(n.name, n.reasons) for n in r.flagged]
    first = r.not_comparable[0]
    assert first.api == "torch.nn.functional.dropout" and first.not_comparable
    assert first.note.startswith("not comparable")
    # the root module holds the dropout: its output differs while its input agrees, and it is not flagged
    root = r.nodes[0]
    assert root.class_name == "_DropNet" and not root.flagged and "not comparable" in root.note
    # second step: the first layer's input agrees, its weights were updated differently: inherited
    enc1 = next(n for n in r.nodes if n.name == "Module.enc.Linear.forward.1")
    assert not enc1.flagged and enc1.note.startswith("inherited: parameters already differ")
    assert csv_rows(r)[r.nodes.index(first)]["Result"] == "not comparable"
    # the same generator stream in both runs: a match
    assert compare_dumps(g, _dropout_run(tmp_path / "same", 1)).verdict == "match"


def test_random_calls_table():
    from ascendify.precision.model import Node
    from ascendify.precision.randomness import is_random

    def api(name, **scalars):
        return Node(f"{name}.0.forward", "api", "forward", api=name, scalars=scalars)

    assert is_random(api("torch.nn.functional.dropout", **{"1": 0.1, "2": True}))
    assert is_random(api("torch.nn.functional.dropout"))  # training defaults to True
    assert not is_random(api("torch.nn.functional.dropout", p=0.0))
    assert not is_random(api("torch.nn.functional.dropout", training=False))
    assert not is_random(api("torch.nn.functional.rrelu"))  # training defaults to False
    assert is_random(api("torch.nn.functional.rrelu", training=True))
    assert all(is_random(api(n)) for n in ("torch.multinomial", "torch.randperm", "torch.rand", "Tensor.bernoulli_"))
    assert not is_random(api("torch.matmul"))
    assert is_random(Node("Module.drop.Dropout.forward.0", "module", "forward", class_name="Dropout"))
    assert not is_random(Node("Module.fc.Linear.forward.0", "module", "forward", class_name="Linear"))


class _Sampler(torch.nn.Module):
    """Samples token ids (torch.multinomial) and embeds them: the ids are integers."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 4)

    def forward(self, probs):
        return self.emb(torch.multinomial(probs, 6, replacement=True))


def test_integer_draws_are_not_comparable_and_what_uses_them_is_inherited(tmp_path):
    paths = []
    for name, seed in (("g", 1), ("t", 2)):
        torch.manual_seed(0)
        model = _Sampler()
        torch.manual_seed(seed)
        with torch.no_grad(), dump(model, tmp_path / name, level="mix", backward=False):
            model(torch.full((2, 16), 1 / 16))
        paths.append(tmp_path / name)
    r = compare_dumps(*paths)
    assert r.verdict == "not comparable" and not r.flagged, [(n.name, n.reasons) for n in r.flagged]
    assert r.not_comparable[0].api == "torch.multinomial"
    emb = next(n for n in r.nodes if n.module == "emb" and n.kind == "module")
    assert emb.note.startswith("inherited: inputs already differ")


class _LossBook(torch.nn.Module):
    """nanoGPT's estimate_loss shape: a bf16-autocast forward, then ``losses[k] = loss.item()``."""

    def __init__(self, low):
        super().__init__()
        self.fc, self.low = torch.nn.Linear(4, 3), low

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.low):
            y = self.fc(x).float().pow(2).mean()
        book = torch.zeros(2)
        book[0] = y.item()
        return book


@pytest.mark.parametrize("low", [True, False])
def test_a_float_computed_at_run_time_carries_the_runs_rounding(tmp_path, low):
    dumps = []
    for name, bump in (("g", 0.0), ("t", 2e-3)):
        torch.manual_seed(0)
        model = _LossBook(low).eval()
        with torch.no_grad():
            model.fc.bias.add_(bump)  # a difference of the size bf16 rounding makes (about 1e-3 relative)
        with torch.no_grad(), dump(model, tmp_path / name, level="mix", backward=False):
            model(torch.ones(2, 4))
        dumps.append(tmp_path / name)
    r = compare_dumps(*dumps)
    setitem = [n for n in r.nodes if (n.api or "").startswith("Tensor.__setitem__")]
    assert setitem
    if low:  # within bf16's rounding, which the run computed in: inherited, said so, not flagged
        assert not setitem[0].flagged and "computed at run time" in (setitem[0].note or "")
    else:  # an fp32 run has no such excuse: the argument differs
        assert setitem[0].flagged and "arguments differ" in " ".join(setitem[0].reasons)
