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
