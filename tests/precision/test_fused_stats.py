"""The one-pass statistics kernel agrees with float64 references, and the torch path serves without it."""

import math

import pytest
import torch

from ascendify.precision import fused_stats, stats

pytestmark = pytest.mark.skipif(fused_stats.kernel() is None, reason="no C compiler here: the torch path serves")


def _ref(t: torch.Tensor) -> list[float]:
    x = t.detach().double()
    return [x.min().item(), x.max().item(), x.sum().item(), x.norm().item()]


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    return torch.randn(8, 33, 96)


@pytest.mark.parametrize("case", ["contiguous", "slice", "transpose", "split-permute", "bf16", "fp16-slice", "short"])
def test_kernel_matches_float64(base, case):
    t = {
        "contiguous": base,
        "slice": base[..., 32:64],
        "transpose": base[..., 10:90].transpose(1, 2),
        "split-permute": base.view(8, 33, 3, 32).permute(2, 0, 1, 3),
        "bf16": base.bfloat16(),
        "fp16-slice": base.half()[:, 3:, 17:],
        "short": base.reshape(-1)[:37],
    }[case]
    head = stats._fused_head(stats._memory_order(t))
    assert head is not None, "the kernel covers this layout"
    got = head.tolist()
    for a, b in zip(got[:4], _ref(t), strict=True):
        assert a == pytest.approx(b, rel=2e-6, abs=1e-5)
    assert got[4:] == [0.0, 0.0]


def test_non_finite_values_are_counted_and_min_max_are_nan(base):
    z = base.clone()
    z[0, 0, 0] = float("nan")
    z[1, 2, 3] = float("inf")
    z[2, 3, 4] = -float("inf")
    v = stats.stat_vector(z[..., :64]).tolist()  # strided: the counting pass walks the runs
    assert math.isnan(v[0]) and math.isnan(v[1])
    assert v[4:6] == [1.0, 2.0]
    w = stats.stat_vector(torch.tensor([1.0, float("inf"), -2.0])).tolist()
    assert w[:2] == [-2.0, float("inf")] and w[3] == float("inf") and w[4:6] == [0.0, 1.0]


def test_layouts_the_kernel_does_not_cover_use_torch(base):
    col = base[:, :, 5]  # innermost stride 96: no contiguous run
    assert stats._fused_head(stats._memory_order(col)) is None
    v = stats.stat_vector(col).tolist()
    for a, b in zip(v[:4], _ref(col), strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [300, 20_000])  # every element / 4,096 sampled positions
def test_same_vector_as_the_torch_path(monkeypatch, dtype, n):
    t = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(dtype)
    fast, view = stats.stat_vector(t), stats.view_vector(torch.arange(14.0), t)
    monkeypatch.setattr(stats, "_fused_fns", {})  # as where no compiler is found
    slow, slow_view = stats.stat_vector(t), stats.view_vector(torch.arange(14.0), t)
    assert torch.allclose(fast[:6], slow[:6], rtol=1e-5, atol=1e-5)
    # the fingerprint: the same sum, in double in the kernel; torch's float32 mv is off by up to ~3e-6 relative
    # over 4,096 terms (depending on its code path), well under float32's compare limit of 1e-5
    assert (fast[6:] - slow[6:]).norm() <= 5e-6 * slow[6:].norm()
    assert torch.equal(view[:6], torch.arange(6.0)) and torch.allclose(view[6:], slow_view[6:], rtol=1e-5, atol=1e-6)
