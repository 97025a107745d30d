"""Adversarial checks of the one-call statistics table (stats.StatTable, the stats_kernel kernel), the dumper's reuse
of statistics for views, and the step writer (orjson, shared entries, non-finite scalars), against float64
references computed here with torch."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from precision_conftest import ref_vector

from ascendify.precision import dump, load_dump, msprobe_io, stats
from ascendify.precision.model import ScalarArg, TensorStats
from ascendify.precision.stats import STAT_LEN, StatTable, fingerprint_plan

# ------------------------------------------------------------------------------------------------ references


_ref = ref_vector  # [min, max, sum, norm, nans, infs, fingerprint (8)] in float64


def _close(a: float, b: float, scale: float, rel: float = 2e-6) -> bool:
    if math.isnan(b):
        return math.isnan(a)
    if math.isinf(b):
        return a == b
    return abs(a - b) <= rel * scale + 1e-30


def _assert_row(row, t: torch.Tensor) -> None:
    ref = _ref(t)
    assert row is not None and len(row) == STAT_LEN
    x = t.detach().to(torch.float64)
    fin = x[torch.isfinite(x)]
    amax = fin.abs().max().item() if fin.numel() else 0.0
    asum = fin.abs().sum().item()
    fpn = max(abs(v) for v in ref[6:]) if all(math.isfinite(v) for v in ref[6:]) else math.inf
    assert _close(row[0], ref[0], amax) and _close(row[1], ref[1], amax), (row[:2], ref[:2])
    assert _close(row[2], ref[2], asum, 4e-6), (row[2], ref[2])
    assert _close(row[3], ref[3], ref[3] if math.isfinite(ref[3]) else 0.0, 4e-6), (row[3], ref[3])
    assert row[4:6] == ref[4:6]
    for a, b in zip(row[6:], ref[6:], strict=True):
        # the fingerprint sums in float32 over 64 samples, then double: a few ulp of the largest term
        assert _close(a, b, max(fpn, amax), 2e-5), (row[6:], ref[6:])


def _row(t: torch.Tensor) -> list[float] | None:
    table = StatTable(1)
    i = table.add(t)
    return table.rows()[i]


def _with(t: torch.Tensor, where: tuple, value: float) -> torch.Tensor:
    t = t.clone()
    t[where] = value
    return t


torch.manual_seed(0)
_B = torch.randn(6, 7, 8)


class _Sub(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


LAYOUTS = {
    "0-d": lambda: torch.tensor(-3.5),
    "0-d view with offset": lambda: _B[1, 2, 3],
    "size-1 dim, odd stride": lambda: torch.randn(5, 1, 4).as_strided((5, 1, 4), (4, 999, 1)),
    "broadcast inner": lambda: torch.randn(3, 1).expand(3, 9),
    "broadcast outer": lambda: torch.randn(1, 9).expand(4, 9),
    "broadcast inner and outer": lambda: torch.randn(1, 5, 1).expand(3, 5, 4),
    "broadcast 0-d": lambda: torch.tensor(2.25).expand(10, 10),
    "broadcast middle, transposed": lambda: torch.randn(4, 1, 3).expand(4, 6, 3).transpose(0, 2),
    "as_strided overlapping rows": lambda: torch.arange(20.0).as_strided((5, 4), (2, 1)),
    "as_strided equal strides": lambda: torch.arange(20.0).as_strided((4, 5), (1, 1)),
    "as_strided 3-d overlap": lambda: torch.randn(30).as_strided((3, 3, 3), (2, 1, 1)),
    "as_strided stride 0 with 1": lambda: torch.randn(100).as_strided((3, 4, 5), (0, 1, 1)),
    "flip": lambda: _B.flip(1),
    "narrow": lambda: _B.narrow(2, 3, 4),
    "unfold": lambda: torch.arange(30.0).unfold(0, 5, 2),
    "unfold last dim": lambda: _B.unfold(2, 3, 1),
    "bf16 with offset": lambda: _B.bfloat16()[2:, 1:, 3:],
    "f16 stepped": lambda: _B.half()[:, ::2, 1::3],
    "f16 transposed": lambda: _B.half().transpose(0, 2),
    "storage offset, column": lambda: torch.randn(5000, 3)[:, 1],
    "nan/inf in a strided view": lambda: _with(_with(_with(_B, (0, 0, 1), math.nan), (1, 2, 1), math.inf),
                                              (2, 4, 3), -math.inf)[:, ::2, 1:],
    "nan outside the view": lambda: _with(torch.randn(3, 4), (0, 1), math.nan)[:, ::2],
    "all nan": lambda: torch.full((3, 4), math.nan),
    "only inf, broadcast": lambda: torch.tensor([math.inf, -1.0]).expand(3, 2),
    "bool transposed": lambda: torch.tensor([[True, False], [True, True]]).t(),
    "uint8 stepped": lambda: torch.arange(200, dtype=torch.uint8).view(10, 20)[:, ::3],
    "int64 large": lambda: torch.tensor([2**40, -(2**40), 7]),
    "float64 transposed": lambda: _B.double().transpose(0, 1),
    "nn.Parameter": lambda: nn.Parameter(torch.randn(4, 5)),
    "requires_grad non-leaf": lambda: (torch.randn(4, 5, requires_grad=True) * 2).t(),
    "__torch_function__ subclass": lambda: torch.randn(3, 4).as_subclass(_Sub).t(),
    "17 dims": lambda: torch.randn([1] * 14 + [2, 3, 2]),
    "17 dims transposed": lambda: torch.randn([2] * 17).transpose(0, 16),
    "long, sampled fingerprint": lambda: torch.randn(100_003)[3:].view(100, 1000).t(),
}


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_every_layout_matches_float64(case):
    t = LAYOUTS[case]()
    _assert_row(_row(t), t)


def test_inference_mode_tensors():
    with torch.inference_mode():
        t = torch.randn(3, 4).t()
        row = _row(t)
    _assert_row(row, t)


def test_more_than_sixteen_dims_falls_back_to_torch():
    t = torch.randn([2] * 17).transpose(3, 9)
    table = StatTable(1)
    i = table.add(t)
    assert i in table._dev  # not the kernel (16 dims at most) ...
    _assert_row(table.rows()[i], t)  # ... and the right numbers


def test_numel_beyond_int32():
    t = torch.tensor(1.5).expand(2**16, 2**15 + 1)  # 2**31 + 2**16 elements, one float of memory
    assert t.numel() > 2**31
    row = _row(t)
    assert row[:6] == [1.5, 1.5, 1.5 * t.numel(), pytest.approx(1.5 * math.sqrt(t.numel()), rel=1e-6), 0, 0]
    pos, w, scale = fingerprint_plan(t.numel(), torch.device("cpu"))
    assert pos is not None and int(pos.max()) < t.numel()
    assert row[6:] == pytest.approx((w.double().sum(0) * 1.5 * scale).tolist(), rel=1e-5, abs=1e-6)


def test_empty_complex_and_sparse_have_no_statistics():
    table = StatTable(2)
    idx = [table.add(torch.empty(0, 3)), table.add(torch.randn(3, dtype=torch.complex64)),
           table.add(torch.eye(3).to_sparse()), table.add(torch.randn(3))]  # fmt: skip
    rows = table.rows()
    assert [rows[i] is None for i in idx] == [True, True, True, False]
    assert [table.has(i) for i in idx] == [False, False, False, True]


# ------------------------------------------------------------------------------------------------ exotic tensors


_WRAPPER = r"""
import torch
from torch.utils._pytree import tree_map
from ascendify.precision.stats import StatTable

class W(torch.Tensor):  # a wrapper subclass (as DTensor, FakeTensor): no storage of its own, data_ptr() is 0
    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                strides=elem.stride())
        r.elem = elem
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        un = lambda x: x.elem if isinstance(x, W) else x
        out = func(*tree_map(un, args), **tree_map(un, kwargs or {}))
        return W(out) if REWRAP and func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default) else out

for REWRAP in (False, True):
    table = StatTable(1)
    i = table.add(W(torch.arange(6.0).view(2, 3)))
    row = table.rows()[i]
    print(row is None or row[:6] == [0.0, 5.0, 15.0, row[3], 0.0, 0.0])
"""


def test_wrapper_subclass_does_not_crash_the_process():
    """A tensor subclass without storage reports data_ptr() == 0: the C kernel must not read address 0."""
    r = subprocess.run([sys.executable, "-c", _WRAPPER], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.split() == ["True", "True"]


def test_a_meta_tensor_does_not_lose_the_step():
    table = StatTable(2)
    a = table.add(torch.arange(4.0))
    m = table.add(torch.empty(3, device="meta"))
    b = table.add(torch.arange(4.0).double())
    rows = table.rows()  # the meta row has no data: it must not take the others with it
    assert rows[m] is None
    assert rows[a][:3] == [0.0, 3.0, 6.0] and rows[b][:3] == [0.0, 3.0, 6.0]


# ------------------------------------------------------------------------------------------------ the table


def test_growth_mixed_rows_keep_their_order():
    ts = [torch.randn(5, 3) * (i + 1) for i in range(9)]
    kinds = [lambda t: t, lambda t: t.double(), lambda t: t.t(), lambda t: torch.empty(0), lambda t: t.bfloat16()]
    table = StatTable(1)  # grows 1 -> 2 -> 4 -> 8 -> 16 -> 32 while host, torch and None rows interleave
    added = []
    for i, t in enumerate(ts * 3):
        x = kinds[i % len(kinds)](t)
        added.append((table.add(x), x))
    rows = table.rows()
    assert [i for i, _ in added] == list(range(len(added))) and len(rows) == len(added)
    for i, x in added:
        if x.numel() == 0:
            assert rows[i] is None
        else:
            _assert_row(rows[i], x)


def test_add_view_of_a_torch_row_a_none_row_and_across_growth():
    base = torch.randn(4, 6)
    table = StatTable(1)
    f64 = table.add(base.double())  # torch row (float64)
    none = table.add(torch.empty(0))
    host = table.add(base)  # host row; the next add_view grows the table before writing
    v1 = table.add_view(f64, base.double().t())  # view of a torch row: torch again
    v2 = table.add_view(host, base.t())  # copies row `host` from the grown table
    v3 = table.add_view(none, base)  # the base has no statistics: neither has its view
    v4 = table.add_view(f64, base.t().contiguous())  # a float32 copy of a float64 tensor's values
    rows = table.rows()
    assert rows[none] is None and rows[v3] is None and not table.has(v3)
    for i, x in [(f64, base.double()), (host, base), (v1, base.double().t()), (v2, base.t()), (v4, base.t())]:
        _assert_row(rows[i], x)
    assert rows[v2][:6] == rows[host][:6]


def test_view_vector_and_stat_vector_agree_with_the_table():
    t = torch.randn(7, 5)
    vec = stats.stat_vector(t)
    assert vec.dtype == torch.float32 and vec.shape == (STAT_LEN,)
    _assert_row(vec.tolist(), t)
    _assert_row(stats.view_vector(vec, t.t()).tolist(), t.t())
    _assert_row(stats.view_vector(vec.double(), t.t()).tolist(), t.t())  # a float64 base vector


# ------------------------------------------------------------------------------------------------ the dumper


def test_views_of_other_elements_are_not_given_the_base_statistics(tmp_path):
    """The dumper reuses a tensor's statistics for a later tensor of the same (data_ptr, numel, dtype): only right
    when both hold exactly the same elements (a transpose, a view); a slice or a broadcast of a slice may not."""

    class M(nn.Module):
        def forward(self, x):
            y = x * 1.0
            a = y[:, :2]  # strided, 8 elements at y's data_ptr
            b = y[:2]  # contiguous, 8 other elements at the same data_ptr
            z = y[:, :1].expand(4, 4)  # y's data_ptr and numel, other elements
            u = y.t()  # the same elements: reuse is right
            return a + 0, b + 0, z + 0, u + 0

    x = torch.arange(16.0).view(4, 4) - 5.0
    m = M()
    with dump(m, tmp_path / "v", level="api", backward=False):
        m(x)
    by = load_dump(tmp_path / "v").by_name()
    y = x * 1.0
    for name, ref in [("Tensor.__getitem__.0.forward", y[:, :2]), ("Tensor.__getitem__.1.forward", y[:2]),
                      ("Tensor.expand.0.forward", y[:, :1].expand(4, 4)), ("Tensor.t.0.forward", y.t())]:  # fmt: skip
        got = by[name].outputs[0]
        r = _ref(ref)
        assert (got.min, got.max) == (r[0], r[1]), name
        assert got.mean == pytest.approx(r[2] / ref.numel(), rel=1e-6, abs=1e-6), name
        assert got.norm == pytest.approx(r[3], rel=1e-6), name
        assert got.fingerprint == pytest.approx(r[6:], rel=1e-5, abs=1e-5), name


class _Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = F.gelu(self.fc(x))
        h = self.ln(h).transpose(0, 1).contiguous().transpose(0, 1)
        return self.head(h[:, ::2].repeat(1, 2))


def test_a_model_dump_matches_float64_references(tmp_path):
    torch.manual_seed(3)
    m = _Small()
    x = torch.randn(40, 16) * 3
    seen: dict[str, torch.Tensor] = {}
    for name, mod in m.named_modules():
        mod.register_forward_hook(lambda mod, a, out, name=name: seen.__setitem__(name, out.detach().clone()))
    with dump(m, tmp_path / "m", level="mix"):
        m(x).square().mean().backward()
    by = load_dump(tmp_path / "m").by_name()
    checked = 0
    for path, out in seen.items():
        cls = type(m.get_submodule(path)).__name__
        node = by[f"Module.{path + '.' if path else ''}{cls}.forward.0"]
        got, r = node.outputs[0], _ref(out)
        assert got.shape == tuple(out.shape)
        assert (got.min, got.max) == pytest.approx((r[0], r[1]), rel=1e-6)
        assert got.mean == pytest.approx(r[2] / out.numel(), rel=1e-5, abs=1e-6)
        assert got.norm == pytest.approx(r[3], rel=1e-6)
        assert got.fingerprint == pytest.approx(r[6:], rel=1e-5, abs=1e-5)
        checked += 1
    assert checked == 4
    w = by["Module.fc.Linear.forward.0"].params["weight"]
    assert w.norm == pytest.approx(m.fc.weight.double().norm().item(), rel=1e-6)
    g = by["Module.fc.Linear.backward.0"].grads["weight"]
    assert g.norm == pytest.approx(m.fc.weight.grad.double().norm().item(), rel=1e-6)


# ------------------------------------------------------------------------------------------------ the writer


class _Scalars(nn.Module):
    def forward(self, x):
        a = torch.add(x, math.nan)
        b = torch.clamp(x, min=-math.inf, max=math.inf)
        c = torch.mul(x, np.float64(math.inf))  # a float subclass: orjson refuses it, json writes it
        d = x[: 2**70]  # an integer beyond 64 bits in a slice: orjson refuses it
        e = torch.mul(x, np.float64(-math.inf))
        return a, b, c, d, e


@pytest.mark.parametrize("writer", ["orjson", "json"])
def test_non_finite_and_huge_scalar_arguments_round_trip(tmp_path, monkeypatch, writer):
    if writer == "json":
        monkeypatch.setattr(msprobe_io, "_orjson", None)
    elif msprobe_io._orjson is None:
        pytest.skip("orjson is not installed")
    m = _Scalars()
    with dump(m, tmp_path / "s", level="api", backward=False):
        m(torch.randn(3))
    text = (tmp_path / "s" / "step0" / "rank0" / "dump.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON"))  # strict JSON
    by = load_dump(tmp_path / "s").by_name()
    add = by["Torch.add.0.forward"].scalars["1"]
    assert isinstance(add, float) and math.isnan(add)
    assert by["Torch.clamp.0.forward"].scalars == {"min": -math.inf, "max": math.inf}
    assert by["Torch.mul.0.forward"].scalars == {"1": math.inf}
    assert by["Torch.mul.1.forward"].scalars == {"1": -math.inf}
    assert by["Tensor.__getitem__.0.forward"].scalars == {"1": [None, 2**70, None]}


def test_a_string_argument_that_reads_nan_stays_a_string(tmp_path):
    class M(nn.Module):
        def forward(self, x):
            return F.gelu(x, approximate="none"), torch.full((2,), math.inf)

    m = M()
    with dump(m, tmp_path / "s", level="api", backward=False):
        m(torch.randn(3))
    doc = json.loads((tmp_path / "s" / "step0" / "rank0" / "dump.json").read_text())
    e = doc["data"]["Functional.gelu.0.forward"]["input_kwargs"]["approximate"]
    assert e == {"type": "str", "value": "none"}
    # the reader: "NaN" as a str argument is text, as a float argument a number
    out: list = []
    msprobe_io._values([{"type": "str", "value": "NaN"}, {"type": "float", "value": "-Infinity"}], "", out, None)
    assert out[0] == ScalarArg("str", "NaN", "0") and out[1].value == -math.inf


def test_shared_entries_keep_their_own_keys(tmp_path):
    class D(nn.Module):
        def forward(self, x):
            y = x * 2.0
            return {"first": y, "second": y, "nested": [y, x]}

    for mode in ("stats", "checksum"):
        m = D()
        with dump(m, tmp_path / mode, level="mix", backward=False, mode=mode):
            m(torch.randn(4))
        doc = json.loads((tmp_path / mode / "step0" / "rank0" / "dump.json").read_text())
        mul = doc["data"]["Tensor.__mul__.0.forward"]["output"][0]
        assert "key" not in mul  # the API node's entry is the same tensor, not renamed by the module's dict
        outs = doc["data"]["Module.D.forward.0"]["output"]
        assert [o["key"] for o in outs] == ["first", "second", "nested.0", "nested.1"]
        assert outs[0]["Max"] == outs[1]["Max"] == outs[2]["Max"] == mul["Max"]
        if mode == "checksum":
            assert outs[0]["md5"] == mul["md5"] and outs[3]["md5"] != mul["md5"]
        nodes = load_dump(tmp_path / mode).by_name()
        assert [t.key for t in nodes["Module.D.forward.0"].outputs] == ["first", "second", "nested.0", "nested.1"]


def test_tensor_mode_entries_are_not_shared(tmp_path):
    class D(nn.Module):
        def forward(self, x):
            y = x * 2.0
            return y, y

    m = D()
    with dump(m, tmp_path / "t", level="mix", backward=False, mode="tensors"):
        m(torch.randn(4))
    doc = json.loads((tmp_path / "t" / "step0" / "rank0" / "dump.json").read_text())
    outs = doc["data"]["Module.D.forward.0"]["output"]
    names = ["Module.D.forward.0.output.0.pt", "Module.D.forward.0.output.1.pt"]
    assert [o["data_name"] for o in outs] == names  # each entry its own file name: not one shared entry
    assert all((tmp_path / "t" / "step0" / "rank0" / "dump_tensor_data" / n).exists() for n in names)


def _slow_nest(items, conv):
    """An independent rebuild of the nesting (the reference for ``_nest``)."""
    tree: dict = {}
    for it in items:
        parts = [int(p) for p in it[0].split(".")]
        cur = tree
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = conv(it)

    def build(node):
        if not isinstance(node, dict):
            return node
        return [build(node[i]) if i in node else None for i in range(max(node) + 1)]

    return build(tree)


@pytest.mark.parametrize(
    "keys",
    [["0", "1", "2"], ["0", "1.0", "1.1", "2"], ["1", "0"], ["0", "2"], ["0", "1.1", "1.0"],
     [str(i) for i in range(70)], [str(i) for i in range(64)], ["0", "1", "1"][:2] + ["3"]],  # fmt: skip
)
def test_nest_matches_an_independent_rebuild(keys):
    items = [(k, ScalarArg("int", i, k), None) for i, k in enumerate(keys)]
    conv = lambda it: it[1].value  # noqa: E731
    assert msprobe_io._nest(items, conv) == _slow_nest(items, conv)


def test_writer_falls_back_to_json_for_what_orjson_refuses():
    doc = {"a": 2**70, "b": [1.5, None, "x"], "c": np.float64(0.25)}
    assert json.loads(msprobe_io._dumps(doc)) == {"a": 2**70, "b": [1.5, None, "x"], "c": 0.25}
    assert msprobe_io._dumps({"x": 1}).endswith(b"\n")


def test_tensorstats_from_a_shared_entry_are_equal(tmp_path):
    class Twice(nn.Module):
        def forward(self, x):
            y = torch.relu(x)
            return y, y

    m = Twice()
    with dump(m, tmp_path / "t", level="mix", backward=False):
        m(torch.randn(5))
    node = load_dump(tmp_path / "t").by_name()["Module.Twice.forward.0"]
    a, b = node.outputs
    assert isinstance(a, TensorStats) and (a.key, b.key) == ("0", "1")
    assert dataclasses.replace(a, key="x") == dataclasses.replace(b, key="x")


def _count_passes(monkeypatch) -> dict[str, int]:
    """Counts of full statistics passes (``add``) and fingerprint-only reuses (``add_view``) from now on."""
    from ascendify.precision import dumper as dumper_mod
    from ascendify.precision import stats as stats_mod

    # the C++ recorder's own table add (fastrec.item) calls no Python method to count: the Python path here (both
    # take the same branches: tests/precision/test_fastrec.py)
    monkeypatch.setattr(dumper_mod, "_citem", None)
    monkeypatch.setattr(dumper_mod, "_cinputs", None)  # (and with them the C++ mode handler, which uses both)
    calls = {"add": 0, "add_view": 0}
    real_add, real_view = stats_mod.StatTable.add, stats_mod.StatTable.add_view

    def add(self, t, defer=False):
        calls["add"] += 1
        return real_add(self, t, defer)

    def add_view(self, base, t):
        calls["add_view"] += 1
        return real_view(self, base, t)

    monkeypatch.setattr(stats_mod.StatTable, "add", add)
    monkeypatch.setattr(stats_mod.StatTable, "add_view", add_view)
    return calls


def test_views_of_a_slice_reuse_its_statistics_and_are_right(tmp_path, monkeypatch):
    """The q/k/v pattern: a strided slice of a fused projection, then ``view`` and ``transpose`` of it, cover the
    same memory: their statistics come from the slice's row (one pass over its memory, not three), and are right."""
    calls = _count_passes(monkeypatch)

    class M(nn.Module):
        def forward(self, qkv):
            q = qkv.split(8, dim=-1)[0]  # strided: rows of 8 out of 24
            return q.view(2, 3, 2, 4).transpose(1, 2)

    qkv = torch.randn(2, 3, 24)
    with dump(M(), tmp_path / "q", level="api", backward=False):
        M()(qkv)
    # inputs: qkv; split's three outputs; view and transpose reuse the first output's row
    assert calls == {"add": 4, "add_view": 2}, calls
    by = load_dump(tmp_path / "q").by_name()
    ref = qkv[..., :8]
    for name in ("Tensor.view.0.forward", "Tensor.transpose.0.forward"):
        got = by[name].outputs[0]
        r = _ref(ref)
        assert (got.min, got.max) == (r[0], r[1]) and got.norm == pytest.approx(r[3], rel=1e-6), name


def test_a_view_made_after_its_slice_is_gone_still_reuses_the_row(tmp_path, monkeypatch):
    """Attention code drops the q/k/v slices once it has their head views; ``k.transpose(-2, -1)`` in the score
    matmul covers the same memory as the (dead) slice and the (live) view: it reuses their row, and is right."""
    calls = _count_passes(monkeypatch)

    class M(nn.Module):
        def forward(self, qkv):
            q, k = (z.view(2, 3, 2, 4).transpose(1, 2) for z in qkv.split(8, dim=-1)[:2])
            return torch.matmul(q, k.transpose(-2, -1))

    qkv = torch.randn(2, 3, 24)
    with dump(M(), tmp_path / "k", level="api", backward=False):
        M()(qkv)
    # full passes: qkv, split's three outputs, the matmul's output; every view and transpose of q and k reuses
    assert calls == {"add": 5, "add_view": 5}, calls
    got = load_dump(tmp_path / "k").by_name()["Tensor.transpose.2.forward"].outputs[0]
    r = _ref(qkv[..., 8:16])
    assert (got.min, got.max) == (r[0], r[1]) and got.norm == pytest.approx(r[3], rel=1e-6)
    assert got.shape == (2, 2, 4, 3)
