"""A fused projection and its split: the projection's statistics wait for the next call (``StatTable.add`` with
``defer``), and when that call splits it, they are combined from the parts' (its memory read once, not twice).
Every number must still be the tensor's own, and any call that could write to it first takes them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from precision_conftest import ref_vector

from ascendify.precision import dump, dumper, load_dump, stats

B, N, H, D = 64, 32, 2, 16  # the projection's output: 64 x 32 x 96 = 196,608 elements, above the deferral size
E = H * D
IN = 24  # the projection's input features


@pytest.fixture(autouse=True)
def _deferral_on(monkeypatch):
    """The deferral is off by default (dumper._DEFER_OUTPUTS: it measured slower with the C++ recorder); these tests
    keep the mechanism right for where it is turned on."""
    monkeypatch.setattr(dumper, "_DEFER_OUTPUTS", True)


def _check(got, t: torch.Tensor, what: str) -> None:
    r = ref_vector(t)
    if r[4]:
        assert math.isnan(got.min) and math.isnan(got.max), what
    else:
        assert (got.min, got.max) == pytest.approx((r[0], r[1]), rel=1e-6), what
        assert got.mean * t.numel() == pytest.approx(r[2], rel=1e-4, abs=1e-2), what
        assert got.norm == pytest.approx(r[3], rel=1e-5), what
    assert (got.nan_count, got.inf_count) == (r[4], r[5]), what
    assert got.fingerprint == pytest.approx(r[6:], rel=1e-4, abs=1e-3, nan_ok=True), what


@pytest.fixture
def full_passes(monkeypatch):
    """Shapes of the tensors the kernel read in full (a view's fingerprint-only pass is not counted)."""
    seen: list[tuple[int, ...]] = []
    inside: list[int] = []
    real = stats.StatTable._fast

    def fast(self, t, i, head):
        if head is None:
            seen.append(tuple(t.shape))
        inside.append(1)
        try:
            return real(self, t, i, head)
        finally:
            inside.pop()

    monkeypatch.setattr(stats.StatTable, "_fast", fast)
    dumper._connect_fastrec()
    real_c = stats._cfill
    if real_c is not None:  # the C++ recorder reads most tensors without _fast

        def cfill(t, row, head, plans, pu1, defer_min):
            got = real_c(t, row, head, plans, pu1, defer_min)
            if got == 1 and head is None and not inside:
                seen.append(tuple(t.shape))
            return got

        monkeypatch.setattr(stats, "_cfill", cfill)
    return seen


def _fused(seed: int = 0, dtype=torch.float32) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(IN, 3 * E).to(dtype)


class _Holds(nn.Module):
    """A module whose child ``qkv`` is ``lin`` and whose forward is ``fn(lin, x)``."""

    def __init__(self, lin, fn):
        super().__init__()
        self.qkv = lin
        self._fn = fn

    def forward(self, x):
        return self._fn(self.qkv, x)


def _dump(tmp_path, lin, fn, x, level: str = "api") -> dict:
    """Dump ``fn(lin, x)`` (statistics, forward only); its nodes by name."""
    m = _Holds(lin, fn)
    with dump(m, tmp_path / "d", level=level, backward=False):
        m(x)
    return load_dump(tmp_path / "d").by_name()


@pytest.mark.parametrize("defer", [True, False], ids=["deferred", "default"])
def test_a_split_projection_is_read_once_and_every_number_is_its_own(tmp_path, full_passes, monkeypatch, defer):
    """Deferred: the projection is read through its parts. Without the deferral (the default), it is read when it is
    made and the parts when they are. Either way every number is the tensor's own."""
    if stats._kernel(torch.float32) is None:
        pytest.skip("no C compiler: the statistics kernel is not built")
    monkeypatch.setattr(dumper, "_DEFER_OUTPUTS", defer)
    lin = _fused()

    def attn(qkv, x):
        q, k, v = qkv(x).split(E, dim=-1)
        return q * k + v

    x = torch.randn(B, N, IN)
    with torch.no_grad():
        y = lin(x)
    by = _dump(tmp_path, lin, attn, x, level="mix")
    # the projection read on its own only without the deferral; its three parts, q * k and its sum with v always
    assert full_passes.count((B, N, 3 * E)) == (0 if defer else 1)
    assert full_passes.count((B, N, E)) == 5
    _check(by["Functional.linear.0.forward"].outputs[0], y, "linear output")
    _check(by["Module.qkv.Linear.forward.0"].outputs[0], y, "module output")
    for i, part in enumerate(y.split(E, dim=-1)):
        _check(by["Tensor.split.0.forward"].outputs[i], part, f"part {i}")


def test_unbind_of_a_permuted_projection_the_vit_way(tmp_path, full_passes):
    """timm's attention: reshape, permute, then ``unbind(0)``. The views wait with the projection; all right."""
    if stats._kernel(torch.float32) is None:
        pytest.skip("no C compiler: the statistics kernel is not built")
    lin = _fused(1)

    def attn(proj, x):
        qkv = proj(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        return (q @ k.transpose(-2, -1)) @ v

    x = torch.randn(B, N, IN)
    with torch.no_grad():
        y = lin(x)
    by = _dump(tmp_path, lin, attn, x)
    assert (B, N, 3 * E) not in full_passes
    _check(by["Functional.linear.0.forward"].outputs[0], y, "linear output")
    r = y.reshape(B, N, 3, H, D)
    _check(by["Tensor.reshape.0.forward"].outputs[0], r, "reshape")
    p = r.permute(2, 0, 3, 1, 4)
    _check(by["Tensor.permute.0.forward"].outputs[0], p, "permute")
    for i in range(3):
        _check(by["Tensor.unbind.0.forward"].outputs[i], p[i], f"part {i}")


def test_an_in_place_write_before_the_split_takes_the_statistics_first(tmp_path):
    lin = _fused(2)

    def fn(proj, x):
        y = proj(x)
        y.mul_(2)
        a, b, c = y.chunk(3, dim=-1)
        return a + b + c

    x = torch.randn(B, N, IN)
    with torch.no_grad():
        y = lin(x)
    by = _dump(tmp_path, lin, fn, x)
    _check(by["Functional.linear.0.forward"].outputs[0], y, "before mul_")
    _check(by["Tensor.mul_.0.forward"].outputs[0], 2 * y, "after mul_")
    for i, part in enumerate((2 * y).chunk(3, dim=-1)):
        _check(by["Tensor.chunk.0.forward"].outputs[i], part, f"part {i}")


def test_a_write_the_dumper_cannot_see_leaves_no_statistics_rather_than_wrong_ones(tmp_path):
    """An in-place write with torch-function handling off never reaches the dumper; the version counter shows
    it, and the projection's row is left empty instead of holding the written values."""
    lin = _fused(3)

    def fn(proj, x):
        y = proj(x)
        with torch._C.DisableTorchFunction():
            y.add_(1)
        return y.split(E, dim=-1)

    x = torch.randn(B, N, IN)
    with torch.no_grad():
        y = lin(x) + 1
    by = _dump(tmp_path, lin, fn, x)
    got = by["Functional.linear.0.forward"].outputs[0]
    assert got.max is None and got.norm is None
    for i, part in enumerate(y.split(E, dim=-1)):
        _check(by["Tensor.split.0.forward"].outputs[i], part, f"part {i}")


def test_nan_in_one_part_and_bfloat16(tmp_path):
    lin = _fused(4, torch.bfloat16)
    with torch.no_grad():
        lin.bias[3] = math.nan  # column 3: part 0 only
        lin.bias[E + 1] = math.inf  # part 1: an inf in every row

    x = torch.randn(B, N, IN, dtype=torch.bfloat16)
    with torch.no_grad():
        y = lin(x)
    by = _dump(tmp_path, lin, lambda proj, x: [t.float().sum() for t in proj(x).split(E, dim=-1)], x)
    got = by["Functional.linear.0.forward"].outputs[0]
    assert got.dtype == "torch.bfloat16"
    assert (got.nan_count, got.inf_count) == (B * N, B * N) and math.isnan(got.max)
    parts = y.split(E, dim=-1)
    _check(by["Tensor.split.0.forward"].outputs[0], parts[0], "part 0 (NaN)")
    p1 = by["Tensor.split.0.forward"].outputs[1]
    assert (p1.nan_count, p1.inf_count, p1.max) == (0, B * N, math.inf)
    _check(by["Tensor.split.0.forward"].outputs[2], parts[2], "part 2")

