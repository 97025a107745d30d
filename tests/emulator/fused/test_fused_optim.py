"""torch_npu.optim.NpuFused* and npu_apply_adam(_w) against torch.optim and the written-out Adam math."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def _train(opt_cls, steps=3, **kw):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4, 3).npu())
    opt = opt_cls([p], **kw)
    for i in range(steps):
        opt.zero_grad()
        (p * (i + 1)).pow(2).sum().backward()
        opt.step()
    return p.detach().cpu()


def test_fused_optimizers_have_torch_npu_defaults_and_torch_math():
    from torch_npu.optim import NpuFusedAdam, NpuFusedAdamW, NpuFusedRMSprop, NpuFusedSGD

    assert NpuFusedAdamW.__module__ == "torch_npu.optim"
    assert NpuFusedAdamW([torch.nn.Parameter(torch.zeros(1))]).defaults["weight_decay"] == 1e-2
    with pytest.raises(TypeError):
        NpuFusedSGD([torch.nn.Parameter(torch.zeros(1))])  # lr is required, as in torch_npu
    pairs = [(NpuFusedAdamW, torch.optim.AdamW, {"lr": 0.1}), (NpuFusedAdam, torch.optim.Adam, {"lr": 0.1}),
             (NpuFusedSGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
             (NpuFusedRMSprop, torch.optim.RMSprop, {"lr": 0.01})]
    for npu_cls, torch_cls, kw in pairs:
        kw_torch = dict(kw, weight_decay=1e-2) if npu_cls is NpuFusedAdamW else kw
        assert torch.equal(_train(npu_cls, **kw), _train(torch_cls, **kw_torch)), npu_cls.__name__


def test_apply_adam_w_matches_adamw_with_beta1_power_of_the_previous_step():
    torch.manual_seed(1)
    p0 = torch.randn(5)
    ref = torch.nn.Parameter(p0.clone())
    opt = torch.optim.AdamW([ref], lr=0.05, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    var, m, v = p0.clone().npu(), torch.zeros(5).npu(), torch.zeros(5).npu()
    for step in range(1, 4):
        grad = torch.randn(5)
        ref.grad = grad.clone()
        opt.step()
        out = torch_npu.npu_apply_adam_w(0.9 ** (step - 1), 0.99 ** (step - 1), 0.05, 0.1, 0.9, 0.99, 1e-8,
                                         grad.npu(), None, False, False, out=(var, m, v))
        assert out[0] is var
    torch.testing.assert_close(var.cpu(), ref.detach())


def test_apply_adam_tensorflow_rule_and_missing_out():
    var, m, v, g = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.tensor([0.5, -1.0, 2.0])
    torch_npu.npu_apply_adam(0.9, 0.999, 0.1, 0.9, 0.999, 1e-8, g, False, False, out=(var, m, v))
    m_want, v_want = 0.1 * g, 0.001 * g * g
    lr_t = 0.1 * (1 - 0.999) ** 0.5 / (1 - 0.9)
    torch.testing.assert_close(var, 1 - lr_t * m_want / (v_want.sqrt() + 1e-8))
    with pytest.raises(NpuOpError, match="out=\\(var, m, v\\) is required"):
        torch_npu.npu_apply_adam_w(1, 1, 0.1, 0.0, 0.9, 0.999, 1e-8, g, None, False, False)
