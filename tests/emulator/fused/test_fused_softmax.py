"""npu_scaled_masked_softmax and npu_dropout_with_add_softmax."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def test_scaled_masked_softmax_fills_masked_with_minus_10000():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 32, 64, generator=g)
    mask = torch.rand(2, 1, 32, 64, generator=g) > 0.6
    mask[0, 0, 3] = True  # a fully masked row: uniform, as Huawei's golden gives
    y = torch_npu.npu_scaled_masked_softmax(x.npu(), mask.npu(), scale=0.5)
    want = torch.softmax((x * 0.5).masked_fill(mask, -10000.0), -1)
    torch.testing.assert_close(y.cpu(), want)
    torch.testing.assert_close(y[0, 0, 3].cpu(), torch.full((64,), 1 / 64))
    yh = torch_npu.npu_scaled_masked_softmax(x.half().npu(), mask.npu())
    assert yh.dtype == torch.float16
    xd = torch.randn(1, 1, 32, 32, dtype=torch.float64, requires_grad=True)
    m = torch.rand(1, 1, 32, 32) > 0.5
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_scaled_masked_softmax(t, m, 0.3), (xd,))


def test_scaled_masked_softmax_constraints():
    with pytest.raises(NpuOpError, match="W axis of x \\(as NCHW\\) must be in \\[32, 4096\\]"):
        torch_npu.npu_scaled_masked_softmax(torch.randn(1, 1, 32, 40).npu(),
                                            torch.zeros(1, 1, 32, 40, dtype=torch.bool).npu())
    with pytest.raises(NpuOpError, match="dtype of mask must be bool"):
        torch_npu.npu_scaled_masked_softmax(torch.randn(1, 1, 32, 32).npu(), torch.zeros(1, 1, 32, 32).npu())
    with pytest.raises(NpuOpError, match="fixed_triu_mask"):
        torch_npu.npu_scaled_masked_softmax(torch.randn(1, 1, 32, 32).npu(),
                                            torch.zeros(1, 1, 32, 32, dtype=torch.bool).npu(), 1.0, True)


def test_dropout_with_add_softmax():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 8, 128, 128, generator=g), torch.randn(4, 8, 128, 128, generator=g)
    torch.npu.manual_seed(7)
    mask, sm, drop = torch_npu.npu_dropout_with_add_softmax(a.npu(), b.npu(), 0.5, 0.25, -1)
    torch.testing.assert_close(sm.cpu(), torch.softmax(b + 0.5 * a, -1))
    assert mask.dtype == torch.uint8 and set(mask.unique().tolist()) == {0, 1}
    assert abs(mask.float().mean().item() - 0.75) < 0.01
    torch.testing.assert_close(drop.cpu(), sm.cpu() * mask.cpu() / 0.75)
    torch.npu.manual_seed(7)
    assert torch.equal(torch_npu.npu_dropout_with_add_softmax(a.npu(), b.npu(), 0.5, 0.25, -1)[0].cpu(), mask.cpu())
    with pytest.raises(NpuOpError, match="H and W must each be one of 128, 256, 384, 512"):
        torch_npu.npu_dropout_with_add_softmax(torch.randn(4, 8, 64, 128).npu(), torch.randn(4, 8, 64, 128).npu(),
                                               1.0, 0.1, -1)
    with pytest.raises(NpuOpError, match="N \\* C must be a multiple of 32"):
        torch_npu.npu_dropout_with_add_softmax(torch.randn(1, 8, 128, 128).npu(), torch.randn(1, 8, 128, 128).npu(),
                                               1.0, 0.1, -1)


def test_dropout_with_add_softmax_gradients_follow_the_returned_mask():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(1, 32, 128, 128, generator=g, dtype=torch.float64).requires_grad_()
    b = torch.randn(1, 32, 128, 128, generator=g, dtype=torch.float64).requires_grad_()
    dy = torch.randn(1, 32, 128, 128, generator=g, dtype=torch.float64)
    mask, _, drop = torch_npu.npu_dropout_with_add_softmax(a, b, 0.5, 0.2, -1)
    got = torch.autograd.grad(drop, (a, b), dy)
    want = torch.autograd.grad(torch.softmax(b + 0.5 * a, -1) * mask / 0.8, (a, b), dy)
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y)


def test_top_k_top_p_filters_in_the_documented_order():
    logits = torch.tensor([[1.0, 5.0, 3.0, 2.0, 4.0], [0.5, 0.1, 0.3, 0.2, 0.4]])
    k = torch.tensor([3, 5], dtype=torch.int32)
    p = torch.tensor([1.0, 0.5])
    out = torch_npu.npu_top_k_top_p(logits.npu(), p.npu(), k.npu())
    inf = float("-inf")
    # row 0: top-3 keeps 5, 4, 3; p = 1 keeps them all
    assert out[0].cpu().tolist() == [inf, 5.0, 3.0, inf, 4.0]
    # row 1: k = 5 keeps all; the smallest whose ascending cumulative probability <= 0.5 go
    probs = torch.softmax(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]), -1)
    drop = (torch.cumsum(probs, -1) <= 0.5).tolist()
    order = [1, 3, 2, 4, 0]  # ascending logits
    want = logits[1].tolist()
    for pos, i in enumerate(order):
        if drop[pos] and pos < 4:
            want[i] = inf
    assert out[1].cpu().tolist() == want
    with pytest.raises(NpuOpError, match="k must be in"):
        torch_npu.npu_top_k_top_p(logits.npu(), p.npu(), torch.tensor([0, 2], dtype=torch.int32).npu())
