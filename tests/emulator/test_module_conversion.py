"""Module.to("npu") / .npu() / .cpu() keep parameter objects, as on a real NPU: tied weights stay tied, an
optimizer built before the move keeps working, gradients and parameter attributes move along."""

import pytest
import torch
from torch import nn


class TiedLM(nn.Module):
    """A GPT-style model whose output projection shares the input embedding's weight."""

    def __init__(self, vocab: int = 11, dim: int = 6):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tokens):
        return self.lm_head(torch.tanh(self.mix(self.wte(tokens))))


def _loss(model, device):
    tokens = torch.tensor([[1, 4, 7, 2], [3, 3, 9, 0]], device=device)
    logits = model(tokens)
    return nn.functional.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten())


CONVERSIONS = {
    "to('npu')": lambda m: m.to("npu"),
    "npu()": lambda m: m.npu(),
    "to(torch.device('npu', 0))": lambda m: m.to(torch.device("npu", 0)),
    "npu() then cpu()": lambda m: m.npu().cpu(),
    "npu() then to(float16)": lambda m: m.npu().to(torch.float16),
    "to('npu', float64)": lambda m: m.to("npu", torch.float64),
}


@pytest.mark.parametrize("name", list(CONVERSIONS))
def test_tied_weights_stay_tied_and_keep_their_object(name, fresh_report):
    fresh_report.settings.float64 = "allow"
    model = TiedLM()
    shared = model.wte.weight
    shared.no_decay = True  # a user attribute on the Parameter
    out = CONVERSIONS[name](model)
    assert out is model
    assert model.lm_head.weight is model.wte.weight is shared
    assert isinstance(shared, nn.Parameter) and shared.requires_grad and shared.no_decay
    assert len(list(model.parameters())) == 3  # the shared weight is listed once
    expected = "cpu" if name.endswith("cpu()") else "npu"
    assert {p.device.type for p in model.parameters()} == {expected}


def test_frozen_parameters_stay_frozen():
    model = TiedLM()
    model.mix.bias.requires_grad_(False)
    bias = model.mix.bias
    model.npu()
    assert model.mix.bias is bias and not bias.requires_grad and model.mix.weight.requires_grad


def test_gradients_move_with_their_parameters():
    model = TiedLM()
    _loss(model, "cpu").backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.npu()
    for n, p in model.named_parameters():
        assert p.grad.device.type == "npu" and torch.equal(p.grad.cpu(), grads[n])
    model.cpu()
    assert all(p.grad.device.type == "cpu" for p in model.parameters())


def test_training_a_tied_model_on_npu_matches_cpu_with_an_optimizer_built_before_the_move():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    npu_model = TiedLM()
    npu_model.load_state_dict(cpu_model.state_dict())
    opt_cpu = torch.optim.AdamW(cpu_model.parameters(), lr=0.05)
    opt_npu = torch.optim.AdamW(npu_model.parameters(), lr=0.05)  # built while still on the CPU
    npu_model.npu()
    for _ in range(4):
        for model, opt, dev in ((cpu_model, opt_cpu, "cpu"), (npu_model, opt_npu, "npu")):
            opt.zero_grad()
            _loss(model, dev).backward()
            opt.step()
    assert npu_model.lm_head.weight is npu_model.wte.weight
    for (n, a), b in zip(cpu_model.state_dict().items(), npu_model.state_dict().values(), strict=True):
        assert b.device.type == "npu" and torch.equal(a, b.cpu()), n
    assert not torch.equal(cpu_model.wte.weight, TiedLM().wte.weight)  # it trained


def test_a_parameter_that_cannot_be_swapped_still_moves_and_stays_tied():
    """A live view of the weight blocks the in-place swap: PyTorch's default path runs, ties kept anyway."""
    model = TiedLM()
    view = model.wte.weight[0]
    model.npu()
    assert model.wte.weight.device.type == "npu" and model.lm_head.weight is model.wte.weight
    assert view.device.type == "cpu"


def test_cpu_only_conversions_are_untouched():
    model = TiedLM()
    shared = model.wte.weight
    model.to(torch.float16)
    assert model.lm_head.weight is shared and shared.dtype == torch.float16
