"""The emulated fused operators against Huawei's own CPU golden functions (mindstudio-probe's bench_functions,
which msprobe's accuracy checker compares real NPU results with), where msprobe has one."""

import importlib

import pytest
import torch

pytestmark = pytest.mark.slow  # importing msprobe.pytorch takes ~14 s on this machine (once per process)

torch_npu = pytest.importorskip("torch_npu")
pytest.importorskip("msprobe")
pytest.importorskip("einops")


def bench(name):
    return importlib.import_module(f"msprobe.pytorch.bench_functions.{name}")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_elementwise_and_norm_ops_match_the_golden_functions():
    x, g = rand(4, 6, 32, seed=1), rand(32, seed=2)
    torch.testing.assert_close(torch_npu.npu_rms_norm(x.npu(), g.npu(), 1e-5)[0].cpu(),
                               bench("rms_norm").npu_rms_norm(x, g, 1e-5)[0])
    torch.testing.assert_close(torch_npu.npu_swiglu(x.npu()).cpu(), bench("swiglu").npu_swiglu(x))
    torch.testing.assert_close(torch_npu.npu_fast_gelu(x.npu()).cpu(), bench("fast_gelu").npu_fast_gelu(x))
    q, cos, sin = rand(2, 3, 5, 16, seed=3), rand(1, 1, 5, 16, seed=4), rand(1, 1, 5, 16, seed=5)
    torch.testing.assert_close(torch_npu.npu_rotary_mul(q.npu(), cos.npu(), sin.npu()).cpu(),
                               bench("rotary_mul").npu_rotary_mul(q, cos, sin))
    t = rand(2, 3, 4, seed=6)
    torch.testing.assert_close(torch_npu.npu_confusion_transpose(t.npu(), (0, 2, 1), (2, 12), True).cpu(),
                               bench("confusion_transpose").npu_confusion_transpose(t, (0, 2, 1), (2, 12), True))
    s, m = rand(2, 2, 32, 64, seed=7), rand(2, 1, 32, 64, seed=8) > 0.5
    torch.testing.assert_close(torch_npu.npu_scaled_masked_softmax(s.npu(), m.npu(), 0.7).cpu(),
                               bench("scaled_mask_softmax").npu_scaled_masked_softmax(s, m, 0.7, False))


def test_moe_gating_matches_the_golden_function():
    x = rand(6, 8, seed=9)
    got = torch_npu.npu_moe_gating_top_k_softmax(x.npu(), None, k=2)
    want = bench("moe_gating_top_k_softmax").npu_moe_gating_top_k_softmax(x, None, 2)
    torch.testing.assert_close(got[0].cpu(), torch.as_tensor(want[0]).to(got[0].dtype))
    assert got[1].cpu().tolist() == torch.as_tensor(want[1]).tolist()
    assert got[2].cpu().tolist() == torch.as_tensor(want[2]).tolist()


def test_apply_adam_kernels_match_the_golden_functions():
    var, m, v, grad = rand(8, seed=10), rand(8, seed=11) * 0.1, rand(8, seed=12).abs() * 0.1, rand(8, seed=13)
    args = (0.9 ** 2, 0.999 ** 2, 0.01, 0.05, 0.9, 0.999, 1e-8, grad, None, False, False)
    want = bench("apply_adam_w").npu_apply_adam_w(*args, (var.clone(), m.clone(), v.clone()))
    out = (var.clone().npu(), m.clone().npu(), v.clone().npu())
    torch_npu.npu_apply_adam_w(*args[:7], grad.npu(), *args[8:], out=out)
    for a, b in zip(out, want, strict=True):
        torch.testing.assert_close(a.cpu(), b)
    args = (0.9 ** 3, 0.999 ** 3, 0.01, 0.9, 0.999, 1e-8, grad, False, True)
    want = bench("apply_adam").npu_apply_adam(*args, (var.clone(), m.clone(), v.clone()))
    out = (var.clone().npu(), m.clone().npu(), v.clone().npu())
    torch_npu.npu_apply_adam(*args[:6], grad.npu(), *args[7:], out=out)
    for a, b in zip(out, want, strict=True):
        torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("layout, mode", [("BSND", 3), ("BNSD", 2), ("SBH", 0), ("BSH", 1)])
def test_fusion_attention_matches_the_golden_function(layout, mode):
    b, n, s, d = 2, 4, 40, 16
    q, k, v = rand(b, n, s, d, seed=14), rand(b, n, s, d, seed=15), rand(b, n, s, d, seed=16)
    conv = {"BNSD": lambda t: t, "BSND": lambda t: t.transpose(1, 2).contiguous(),
            "BSH": lambda t: t.transpose(1, 2).reshape(b, s, n * d),
            "SBH": lambda t: t.permute(2, 0, 1, 3).reshape(s, b, n * d)}[layout]
    qq, kk, vv = conv(q), conv(k), conv(v)
    if mode in (2, 3):
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    else:
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 5) | torch.tril(torch.ones(s, s, dtype=torch.bool), -9)
    kw = {"atten_mask": mask, "scale": 0.25, "sparse_mode": mode}
    if mode == 0:
        kw.update(pre_tockens=8, next_tockens=4)
    want = bench("npu_fusion_attention").npu_fusion_attention(qq, kk, vv, n, layout, **kw)
    got = torch_npu.npu_fusion_attention(qq.npu(), kk.npu(), vv.npu(), n, layout,
                                         **{k_: (v_.npu() if isinstance(v_, torch.Tensor) else v_)
                                            for k_, v_ in kw.items()})
    torch.testing.assert_close(got[0].cpu(), want[0].to(got[0].dtype), atol=2e-5, rtol=1e-4)
