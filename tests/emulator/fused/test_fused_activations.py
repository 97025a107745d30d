"""npu_swiglu, npu_geglu and fast_gelu against torch's activations, with gradients."""

import pytest
import torch
import torch.nn.functional as F

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def test_swiglu_values_dims_and_half_rounding():
    x = torch.randn(3, 10, 4, generator=torch.Generator().manual_seed(0))
    for dim in (-1, 1):
        a, b = x.chunk(2, dim)
        torch.testing.assert_close(torch_npu.npu_swiglu(x.npu(), dim=dim).cpu(), F.silu(a) * b)
    xh = x.half()
    a, b = xh.chunk(2, -1)
    want = (F.silu(a.float()).half().float() * b.float()).half()  # silu rounded to fp16 first
    assert torch.equal(torch_npu.npu_swiglu(xh.npu()).cpu(), want)


def test_swiglu_gradcheck_and_constraints():
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(torch_npu.npu_swiglu, (x,))
    with pytest.raises(NpuOpError, match="along dim -1 \\(5\\) must be even"):
        torch_npu.npu_swiglu(torch.randn(2, 5).npu())
    with pytest.raises(NpuOpError, match="input must be contiguous"):
        torch_npu.npu_swiglu(torch.randn(4, 6).npu().t())
    with pytest.raises(NpuOpError, match="dtype of input must be float16/bfloat16/float32"):
        torch_npu.npu_swiglu(torch.ones(2, 4, dtype=torch.int32).npu())


def test_geglu_activates_the_right_half_by_default():
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    left, right = x.chunk(2, -1)
    y, gelu = torch_npu.npu_geglu(x.npu())
    torch.testing.assert_close(gelu.cpu(), F.gelu(right, approximate="tanh"))
    torch.testing.assert_close(y.cpu(), left * F.gelu(right, approximate="tanh"))
    y, gelu = torch_npu.npu_geglu(x.npu(), dim=-1, approximate=0, activate_left=True)
    torch.testing.assert_close(y.cpu(), F.gelu(left) * right)
    xd = x.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_geglu(t)[0], (xd,))


def test_fast_gelu_both_spellings_and_gradient():
    x = torch.linspace(-6, 6, 25)
    want = x / (1 + torch.exp(-1.702 * x))
    torch.testing.assert_close(torch_npu.fast_gelu(x.npu()).cpu(), want)
    torch.testing.assert_close(torch_npu.npu_fast_gelu(x.npu()).cpu(), want)
    assert torch.autograd.gradcheck(torch_npu.npu_fast_gelu, (x.double().requires_grad_(),))


def test_swiglu_backward_equals_autograd_of_the_forward():
    g = torch.Generator().manual_seed(30)
    x = torch.randn(3, 4, 10, generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    a, b = x.chunk(2, -1)
    (F.silu(a) * b).backward(dy)
    torch.testing.assert_close(torch_npu.npu_swiglu_backward(dy, x.detach(), -1), x.grad)
    xf = x.detach().float()
    got = torch_npu.npu_swiglu_backward(dy.float().npu(), xf.npu(), -1)
    assert got.device.type == "npu" and got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), x.grad.float(), rtol=1e-5, atol=1e-5)
    with pytest.raises(NpuOpError, match="grad_output must have the shape"):
        torch_npu.npu_swiglu_backward(dy[..., :4].float().npu(), xf.npu(), -1)


def test_clipped_swiglu_interleaved_limits_bias_and_groups():
    g = torch.Generator().manual_seed(31)
    x = torch.randn(5, 8, generator=g) * 6
    got = torch_npu.npu_clipped_swiglu(x.npu(), alpha=1.5, limit=4.0, bias=0.5)
    a, b = x[:, 0::2].clamp(max=4.0), x[:, 1::2].clamp(-4.0, 4.0)
    torch.testing.assert_close(got.cpu(), a * torch.sigmoid(1.5 * a) * (b + 0.5))
    halves = torch_npu.npu_clipped_swiglu(x.npu(), interleaved=False)
    a, b = x[:, :4].clamp(max=7.0), x[:, 4:].clamp(-7.0, 7.0)
    torch.testing.assert_close(halves.cpu(), a * torch.sigmoid(1.702 * a) * (b + 1.0))
    grouped = torch_npu.npu_clipped_swiglu(x.npu(), group_index=torch.tensor([2, 1]).npu())
    assert grouped[3:].abs().sum() == 0 and grouped[:3].abs().sum() > 0  # rows past sum(group_index)
    with pytest.raises(NpuOpError, match="must be even"):
        torch_npu.npu_clipped_swiglu(x[:, :7].npu())
