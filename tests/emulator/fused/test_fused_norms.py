"""npu_rms_norm and npu_add_rms_norm against hand-written RMSNorm, with gradients."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def rms_ref(x, gamma, eps, dims=1):
    axes = tuple(range(x.dim() - dims, x.dim()))
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(axes, keepdim=True) + eps) * gamma.double()


def test_rms_norm_values_shapes_and_dtypes():
    g = torch.Generator().manual_seed(0)
    x, gamma = torch.randn(2, 3, 4, 8, generator=g), torch.randn(4, 8, generator=g)
    y, rstd = torch_npu.npu_rms_norm(x.npu(), gamma.npu(), epsilon=1e-5)
    assert y.device.type == "npu" and rstd.shape == (2, 3, 1, 1) and rstd.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), rms_ref(x, gamma, 1e-5, dims=2).float())
    torch.testing.assert_close(rstd.cpu(), torch.rsqrt(x.pow(2).mean((2, 3), keepdim=True) + 1e-5))
    yh, rh = torch_npu.npu_rms_norm(x.bfloat16().npu(), gamma.float().npu())  # bf16 x with fp32 gamma (A2)
    assert yh.dtype == torch.bfloat16 and rh.dtype == torch.float32
    torch.testing.assert_close(yh.cpu().float(), rms_ref(x.bfloat16(), gamma, 1e-6, dims=2).float(),
                               atol=2e-2, rtol=2e-2)


def test_rms_norm_gradcheck_float64_and_rstd_has_no_gradient():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: torch_npu.npu_rms_norm(a, b)[0], (x, gamma))
    assert not torch_npu.npu_rms_norm(x, gamma)[1].requires_grad


def test_rms_norm_gradients_on_npu_match_cpu_reference():
    g = torch.Generator().manual_seed(2)
    x, gamma, dy = torch.randn(4, 6, generator=g), torch.randn(6, generator=g), torch.randn(4, 6, generator=g)
    xn, gn = x.npu().requires_grad_(), gamma.npu().requires_grad_()
    torch.autograd.backward(torch_npu.npu_rms_norm(xn, gn)[0], dy.npu())
    xr, gr = x.double().requires_grad_(), gamma.double().requires_grad_()
    torch.autograd.backward(rms_ref(xr, gr, 1e-6), dy.double())
    torch.testing.assert_close(xn.grad.cpu(), xr.grad.float())
    torch.testing.assert_close(gn.grad.cpu(), gr.grad.float())


def test_add_rms_norm_returns_y_rstd_and_the_sum():
    g = torch.Generator().manual_seed(3)
    x1, x2, gamma = (torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
                     for s in ((2, 4, 8), (2, 4, 8), (8,)))
    y, rstd, s = torch_npu.npu_add_rms_norm(x1, x2, gamma)
    torch.testing.assert_close(s, x1 + x2)
    torch.testing.assert_close(y, rms_ref(x1 + x2, gamma, 1e-6))
    assert rstd.shape == (2, 4, 1)
    assert torch.autograd.gradcheck(lambda a, b, c: sum(t.sum() for t in torch_npu.npu_add_rms_norm(a, b, c)[::2]),
                                    (x1, x2, gamma))
    yn = torch_npu.npu_add_rms_norm(*(t.detach().half().npu() for t in (x1, x2, gamma)))
    assert yn[0].dtype == yn[2].dtype == torch.float16


def test_rms_norm_constraints():
    x = torch.randn(4, 8).npu()
    with pytest.raises(NpuOpError, match="shape of gamma"):
        torch_npu.npu_rms_norm(x, torch.ones(4).npu())
    with pytest.raises(NpuOpError, match="dtype combination of self \\(torch.float32\\) and gamma \\(torch.float16\\)"):
        torch_npu.npu_rms_norm(x, torch.ones(8).half().npu())
    with pytest.raises(NpuOpError, match="self must have 2 to 8 dims"):
        torch_npu.npu_rms_norm(torch.randn(8).npu(), torch.ones(8).npu())
    with pytest.raises(NpuOpError, match="x1, x2 and gamma must have the same dtype"):
        torch_npu.npu_add_rms_norm(x, x, torch.ones(8).half().npu())


def test_rms_norm_bf16_is_refused_on_atlas_training_chips(fresh_report):
    fresh_report.settings.device_name = "Ascend910A"
    with pytest.raises(NpuOpError, match="not supported on this product"):
        torch_npu.npu_rms_norm(torch.randn(2, 8).bfloat16().npu(), torch.ones(8).bfloat16().npu())


def test_rms_norm_backward_equals_autograd_of_the_forward():
    g = torch.Generator().manual_seed(40)
    x = torch.randn(3, 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(8, generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(3, 4, 8, generator=g, dtype=torch.float64)
    y = rms_ref(x, gamma, 1e-6)
    y.backward(dy)
    rstd = torch.rsqrt(x.detach().pow(2).mean(-1, keepdim=True) + 1e-6)
    dx, dgamma = torch_npu.npu_rms_norm_backward(dy, x.detach(), gamma.detach(), rstd)
    torch.testing.assert_close(dx, x.grad)
    torch.testing.assert_close(dgamma, gamma.grad)
    dxn, dgn = torch_npu.npu_rms_norm_backward(dy.float().npu(), x.detach().float().npu(),
                                               gamma.detach().float().npu(), rstd.float().npu())
    assert dxn.device.type == "npu" and dgn.dtype == torch.float32
    torch.testing.assert_close(dgn.cpu(), gamma.grad.float(), rtol=1e-4, atol=1e-4)


def test_add_rms_norm_quant_and_dynamic_quant():
    g = torch.Generator().manual_seed(41)
    x1, x2 = torch.randn(3, 16, generator=g).half(), torch.randn(3, 16, generator=g).half()
    gamma, beta = torch.randn(16, generator=g).half(), torch.randn(16, generator=g).half()
    s = (x1.float() + x2.float())
    y = (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.float() + beta.float())
    scales = torch.full((16,), 0.05).half()
    y1, y2, xs = torch_npu.npu_add_rms_norm_quant(x1.npu(), x2.npu(), gamma.npu(), scales.npu(), None,
                                                  beta=beta.npu())
    assert torch.equal(xs.cpu(), (x1.float() + x2.float()).half())
    assert y1.dtype == torch.int8 and not y2.any()
    torch.testing.assert_close(y1.cpu().float(), torch.round(y / 0.05).clamp(-128, 127), atol=1, rtol=0)
    smooth = torch.rand(16, generator=g).half() + 0.5
    q1, q2, _, sc1, sc2 = torch_npu.npu_add_rms_norm_dynamic_quant(x1.npu(), x2.npu(), gamma.npu(), beta=beta.npu(),
                                                                   smooth_scale1=smooth.npu())
    ys = y * smooth.float()
    torch.testing.assert_close(sc1.cpu(), ys.abs().amax(-1) / 127, rtol=1e-3, atol=1e-6)
    assert (q1.cpu().float() - torch.round(ys / (ys.abs().amax(-1, keepdim=True) / 127))).abs().max() <= 1
    assert q2.numel() == 0 and sc2.numel() == 0  # y2 only with both smooth scales
    with pytest.raises(NpuOpError, match="at least one of y1 and y2"):
        torch_npu.npu_add_rms_norm_dynamic_quant(x1.npu(), x2.npu(), gamma.npu(), output_mask=[False, False])
