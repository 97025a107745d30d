"""The one-pass statistics kernel agrees with float64 references, and the torch path serves without it."""

import math

import pytest
import torch

from ascendify.precision import dumper, stats, stats_kernel

pytestmark = pytest.mark.skipif(stats_kernel.kernel() is None, reason="no C compiler here: the torch path serves")


def _ref(t: torch.Tensor) -> list[float]:
    x = t.detach().double()
    return [x.min().item(), x.max().item(), x.sum().item(), x.norm().item()]


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    return torch.randn(8, 33, 96)


LAYOUTS = {
    "contiguous": lambda b: b,
    "slice": lambda b: b[..., 32:64],
    "transpose": lambda b: b[..., 10:90].transpose(1, 2),
    "split-permute": lambda b: b.view(8, 33, 3, 32).permute(2, 0, 1, 3),
    "bf16": lambda b: b.bfloat16(),
    "fp16-slice": lambda b: b.half()[:, 3:, 17:],
    "short": lambda b: b.reshape(-1)[:37],
    "column": lambda b: b[:, :, 5],  # innermost stride 96: the strided run
    "broadcast": lambda b: b[:, :1, :7].expand(8, 5, 7),  # stride 0: every logical element counted
    "scalar": lambda b: b[0, 0, 0],
    "int64": lambda b: (b * 10).long(),  # through a float32 copy
}


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_kernel_matches_float64(base, case):
    t = LAYOUTS[case](base)
    table = stats.StatTable(1)
    assert table._fast(t, table._next(), None), "the kernel covers this layout"
    got = table.vector(0).tolist()
    for a, b in zip(got[:4], _ref(t), strict=True):
        assert a == pytest.approx(b, rel=2e-6, abs=1e-5)
    assert got[4:6] == [0.0, 0.0]


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_kernel_fingerprint_is_the_torch_fingerprint(base, case):
    t = LAYOUTS[case](base)
    fast = stats.stat_vector(t)[6:]
    slow = stats.fingerprint(t.float() if not t.is_floating_point() else t)
    assert (fast - slow).norm() <= 5e-6 * slow.norm() + 1e-7  # logical positions, whatever the strides


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


def test_float64_and_other_devices_use_torch(base):
    t = base.double()[:, 1:, :]
    table = stats.StatTable(1)
    assert not table._fast(t, table._next(), None)  # float64 is reduced in float64 by torch
    v = stats.stat_vector(t).tolist()
    for a, b in zip(v[:4], _ref(t), strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-5)


def test_table_grows_and_keeps_every_row(base):
    table = stats.StatTable(2)
    idx = [table.add(base[i]) for i in range(8)] + [table.add(torch.empty(0)), table.add(base.double()[0])]
    rows = table.rows()
    assert idx == list(range(10)) and len(table) == 10 and rows[8] is None and not table.has(8)
    for i in range(8):
        assert rows[i][:4] == pytest.approx(_ref(base[i]), rel=2e-6, abs=1e-5)
    assert rows[9][:4] == pytest.approx(_ref(base[0]), rel=1e-6, abs=1e-5)
    view = table.add_view(0, base[0].t())  # same elements: statistics copied, fingerprint of the view
    assert table.rows()[view][:6] == rows[0][:6] and table.rows()[view][6:] != rows[0][6:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [300, 20_000])  # every element / 4,096 sampled positions
def test_same_vector_as_the_torch_path(monkeypatch, dtype, n):
    t = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(dtype)
    fast, view = stats.stat_vector(t), stats.view_vector(torch.arange(14.0), t)
    monkeypatch.setattr(stats, "_kernel_fns", {})  # as where no compiler is found
    slow, slow_view = stats.stat_vector(t), stats.view_vector(torch.arange(14.0), t)
    assert torch.allclose(fast[:6], slow[:6], rtol=1e-5, atol=1e-5)
    # the fingerprint: the same sum, in double in the kernel; torch's float32 mv is off by up to ~3e-6 relative
    # over 4,096 terms (depending on its code path), well under float32's compare limit of 1e-5
    assert (fast[6:] - slow[6:]).norm() <= 5e-6 * slow[6:].norm()
    assert torch.equal(view[:6], torch.arange(6.0)) and torch.allclose(view[6:], slow_view[6:], rtol=1e-5, atol=1e-6)


def test_the_python_module_and_ctypes_write_the_same_dump(tmp_path, monkeypatch):
    """Where Python's headers are installed the kernels are also a Python module (``stats_kernel.ext()``): its
    ``fill`` instead of the ctypes call. Without it (ctypes only) a dump must be identical: every layout the kernel
    walks, views reusing rows, a split projection, gradients."""
    import json

    from torch import nn

    from ascendify.precision import dump

    if stats_kernel.ext() is None:
        pytest.skip("no Python headers: ctypes serves")

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)
            self.out = nn.Linear(16, 4)

        def forward(self, x):
            q, k, v = self.qkv(x).split(16, dim=-1)
            q, k = (z.view(2, 8, 2, 8).transpose(1, 2) for z in (q, k))
            att = (q @ k.transpose(-2, -1)).softmax(-1)
            y = (att @ v.view(2, 8, 2, 8).transpose(1, 2)).transpose(1, 2).reshape(2, 8, 16)
            return self.out(y.bfloat16().float()[:, ::2]).sum()

    calls = {"fill": 0}

    class Counting:  # the module, counting its calls
        def __init__(self, real):
            self.real = real

        def fill(self, *a):
            calls["fill"] += 1
            return self.real.fill(*a)

    stats._kernel(torch.float32)
    dumper._connect_fastrec()
    monkeypatch.setattr(stats, "_cfill", None)  # the C++ recorder's own kernel call: tests/precision/test_fastrec.py
    torch.manual_seed(0)
    m, x = Attn(), torch.randn(2, 8, 16, requires_grad=True)
    docs = []
    for name, fx in (("module", Counting(stats._fx)), ("ctypes", None)):  # None: as where it could not be built
        monkeypatch.setattr(stats, "_fx", fx)
        with dump(m, tmp_path / name, level="mix"):
            m(x * 1.0).backward()
        docs.append(json.loads(next((tmp_path / name).rglob("dump.json")).read_text())["data"])
        if fx is not None:
            assert calls["fill"] > 20, calls
    assert docs[0] == docs[1] and len(docs[0]) > 20
