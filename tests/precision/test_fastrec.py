"""The dump's C++ recorder (``precision/fastrec.cpp``): the same reads, rows and entries as the Python path it
replaces, and the Python path where it is not built."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from ascendify.precision import dump, dumper, fastrec, msprobe_io, stats
from ascendify.precision.model import ScalarArg

FNS = fastrec.functions(build_if_missing=False)
needs_fastrec = pytest.mark.skipif(FNS is None, reason=f"the C++ recorder is not built here ({fastrec.why()})")


def _python_reads(t: torch.Tensor) -> tuple:
    """What the Python path reads of ``t``: ``probe``'s answer."""
    try:
        ver = t._version
    except RuntimeError:
        ver = None
    return (dumper._meta(t), ver, bool(t.requires_grad and t.is_leaf), dumper._memory_key(t, ver))


def _tensors() -> list[tuple[str, torch.Tensor]]:
    torch.manual_seed(0)
    x = torch.randn(4, 6, 5)
    with torch.inference_mode():
        inf = torch.randn(3)
    leaf = torch.randn(3, 2, requires_grad=True)
    return [
        ("contiguous", x),
        ("transposed", x.transpose(0, 2)),
        ("sliced", x[:, 1:5:2]),
        ("broadcast", torch.randn(5).expand(4, 5)),
        ("a column", x[:, :, 2]),
        ("0-d", torch.tensor(3.5)),
        ("empty", torch.empty(0, 3)),
        ("bfloat16", x.to(torch.bfloat16)),
        ("int64", torch.arange(12).view(3, 4)),
        ("bool", torch.ones(4, dtype=torch.bool)),
        ("complex", torch.randn(3, dtype=torch.complex64)),
        ("an inference tensor", inf),
        ("a leaf that requires grad", leaf),
        ("a non-leaf", leaf * 2),
        ("a parameter", nn.Parameter(torch.randn(2, 2))),
        ("a meta tensor", torch.empty(2, 3, device="meta")),
        ("a sparse tensor", torch.eye(3).to_sparse()),
    ]


@needs_fastrec
@pytest.mark.parametrize(("what", "t"), _tensors(), ids=[w for w, _ in _tensors()])
def test_probe_reads_what_the_python_path_reads(what, t):
    probe = FNS[0]
    if t.layout != torch.strided:
        got = probe(t)
        assert got is None or got[3] is None, what  # no memory key for another layout
        return
    assert probe(t) == _python_reads(t), what


@needs_fastrec
def test_probe_leaves_tensor_subclasses_to_python():
    class Mine(torch.Tensor):
        pass

    t = torch.randn(3).as_subclass(Mine)
    assert FNS[0](t) is None  # its __torch_function__ may answer differently: the Python path asks it
    assert FNS[0](nn.parameter.UninitializedParameter()) is None  # a lazy parameter has no shape yet


@needs_fastrec
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(7,), (3, 4, 5), (1, 5000), (70_000,)])
@pytest.mark.parametrize("layout", ["dense", "strided"])
def test_fill_writes_the_row_the_python_path_writes(dtype, shape, layout, monkeypatch):
    """fastrec.fill against StatTable._fast without it (the kernel's Python call, stats._offsets for a strided
    view): the same row; a large dense tensor may be deferred (2), a strided one is read at once."""
    if stats._kernel(dtype) is None:
        pytest.skip(f"no statistics kernel for {dtype} here")
    torch.manual_seed(1)
    t = torch.randn(*shape).to(dtype)
    t.view(-1)[3] = float("nan")
    if layout == "strided":  # a transpose, or every other element
        t = t.transpose(0, -1) if t.dim() > 1 and t.shape[0] > 1 else t.reshape(-1)[::2]
        assert not t.is_contiguous()
    fill = FNS[1]
    table = stats.StatTable()
    py = table._next()
    with monkeypatch.context() as m:
        m.setattr(stats, "_cfill", None)
        assert stats.StatTable._fast.__get__(table)(t, py, None)  # the Python call (plans built)
    row = table._next()
    assert fill(t, table._base + row * stats._ROW, None, stats._plans, False, 0) == 1
    a, b = table._host[py], table._host[row]
    assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    # a large enough dense tensor may be deferred: nothing read, 2
    assert fill(t, table._base + row * stats._ROW, None, stats._plans, False, 1) == (2 if layout == "dense" else 1)


@needs_fastrec
def test_fill_leaves_what_it_does_not_read_to_python():
    fill, table = FNS[1], stats.StatTable()
    i = table._next()
    addr = table._base + i * stats._ROW
    stats._cpu_plan(12)
    for t in (torch.arange(12), torch.arange(12.0, dtype=torch.float64),
              torch.empty(0), torch.empty(3, device="meta")):
        assert fill(t, addr, None, stats._plans, False, 0) == 0, t.dtype
    assert fill(torch.randn(123457), addr, None, {}, False, 0) == 0  # no plan for this size yet


# ---------------------------------------------------------------------------------------------- entries


def _item(key, v, idx=None):
    if isinstance(v, torch.Tensor):
        return (key, dumper._meta(v), idx)
    return (key, v if isinstance(v, ScalarArg) else dumper._scalar(v, key), None)


def _entries_both_ways(recs, rows):
    """(what the C++ writer made of each rec, or None where it left it; what the Python path made)."""
    specs = [(r.name, r.args, r.outputs, r.params if r.kind == "module" else None,
              (r.kind, r.module_path, r.api, r.class_name, i, r.call_index, "x.py:1", r.autocast))
             for i, r in enumerate(recs)]  # fmt: skip
    import orjson

    data = {r.name: None for r in recs}
    missed = set(fastrec.entries()(specs, rows, orjson.Fragment, data))
    fast = [None if i in missed else json.loads(orjson.dumps(data[r.name])) for i, r in enumerate(recs)]
    return fast, missed


class _Rec:
    def __init__(self, name, args, outputs=(), kind="api", params=None):
        self.name, self.args, self.outputs, self.kind = name, list(args), list(outputs), kind
        self.params = params or {}
        self.module_path, self.api, self.class_name, self.call_index, self.autocast = "m.a", "torch.x", None, 0, None


@needs_fastrec
def test_entries_write_what_the_python_path_writes(tmp_path):
    torch.manual_seed(2)
    t0, t1 = torch.randn(2, 3), torch.randn(4)
    rows = [[*torch.randn(14).tolist()] for _ in range(3)]
    rows[1][2] = math.inf
    rows[2] = None
    odd = "quote \" back \\ new\nline tab\t bell\x07 é 中"
    recs = [
        _Rec("plain.0.forward", [_item("0", t0, 0), _item("1", 2.5), _item("2", True), _item("3", None)],
             [_item("0", t0, 0)]),
        _Rec("kw.0.forward", [_item("0", t1, 1), _item("1.0", 3), _item("1.1", 4), _item("2", t0, 0),
                              _item("dim", -1), _item("eps", float("nan")), _item("name", odd),
                              _item("size", torch.Size([2, 3])), _item("s", slice(1, None, 2))],
             [_item("0", t1, 1), _item("1", t1, 2), _item("2", t0, None)]),
        _Rec("Module.m.0.forward", [_item("0", t0, 0)], [_item("0", t1, 1)], kind="module",
             params={"weight": (dumper._meta(t0), 0), "bias": (dumper._meta(t1), 2)}),
        _Rec("huge.0.forward", [_item("0", 2**70)]),  # an int beyond 64 bits: left to Python
        _Rec("dictout.0.forward", [_item("0", t0, 0)], [_item("logits", t0, 0)]),  # a dict's output: Python
        _Rec("deep.0.forward", [_item("0.0.0", t0, 0)]),  # nested twice: Python
        _Rec("kwlist.0.forward", [_item("0", t0, 0), _item("sizes.0", 1)]),  # a list by keyword: Python
        _Rec("floatlist.0.forward", [_item("0", ScalarArg("list", [1.5], "0"))]),  # a float in a list: Python
    ]
    fast, missed = _entries_both_ways(recs, rows)
    assert missed == {3, 4, 5, 6, 7}

    class D:  # what _write_step reads of a dumper
        mode, level, step_index, rank, scope, root = "stats", "mix", 0, 0, (), tmp_path

        def source_text(self, src):
            return ("x.py:1", None)

        def check_disk(self, *a):
            pass

    for r in recs:
        r.direction, r.source, r.parent, r.grads, r.base = "forward", None, None, {}, r.name
    saved = msprobe_io._fast_entries
    try:
        msprobe_io._fast_entries = lambda: None
        msprobe_io._write_step(D(), recs, rows, tmp_path / "py")
    finally:
        msprobe_io._fast_entries = saved
    want = json.loads((tmp_path / "py" / "dump.json").read_text())["data"]
    for got, r in zip(fast, recs, strict=True):
        if got is not None:
            assert got == want[r.name], r.name
    assert fast[1]["input_args"][1] == [{"type": "int", "value": 3}, {"type": "int", "value": 4}]
    assert fast[1]["input_kwargs"]["name"]["value"] == odd and fast[1]["input_kwargs"]["eps"]["value"] == "NaN"
    out = fast[1]["output"]
    assert out[0]["Mean"] == "Infinity" and out[1]["Max"] is None and out[2]["fingerprint"] == []


def _model_dump(tmp_path, name: str, fast: bool) -> dict:
    """A small transformer-like model's dump (forward with autocast, backward, an optimizer step)."""
    torch.manual_seed(3)
    m = nn.Sequential(nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(16, 48), nn.GELU(), nn.Linear(48, 50))
    x = torch.randint(0, 50, (2, 7))
    saved = (dumper._probe, dumper._citem, dumper._cinputs, dumper._cmode, stats._cfill, msprobe_io._fast_entries)
    if not fast:
        dumper._probe, dumper._citem, dumper._cinputs, dumper._cmode, stats._cfill = None, None, None, None, None
        msprobe_io._fast_entries = lambda: None
    try:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with dump(m, tmp_path / name, level="mix"):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = m(x)
            z = y.float() + 0
            z.mul_(1.5)  # in place: its gradient hooks are on each version's grad_fn
            h = z.softmax(-1)
            q, k = h.split(25, dim=-1)
            (q.sum() * k.mean() + h.clamp(min=float("-inf"), max=1.0).sum()).backward()
            opt.step()
    finally:
        dumper._probe, dumper._citem, dumper._cinputs, dumper._cmode, stats._cfill, msprobe_io._fast_entries = saved
    return json.loads(next((tmp_path / name).rglob("dump.json")).read_text())


@needs_fastrec
def test_a_dump_is_the_same_with_and_without_the_cpp_recorder(tmp_path):
    dumper._connect_fastrec()
    assert dumper._probe is not None and stats._cfill is not None and msprobe_io._fast_entries() is not None
    fast, slow = _model_dump(tmp_path, "fast", True), _model_dump(tmp_path, "slow", False)
    assert len(fast["data"]) > 20
    assert list(fast["data"]) == list(slow["data"])  # the same nodes in the same order
    assert fast == slow  # every value read back the same


def test_without_a_compiler_the_python_path_records_the_dump(tmp_path):
    """A failed build: the dump is written by the Python path, and the next process does not build again."""
    code = ("import torch, json, pathlib\n"
            "from ascendify.precision import dump, dumper, fastrec\n"
            "m = torch.nn.Linear(3, 2)\n"
            f"with dump(m, {str(tmp_path / 'd')!r}):\n"
            "    m(torch.randn(4, 3)).sum().backward()\n"
            "assert dumper._probe is None\n"
            f"doc = json.loads(next(pathlib.Path({str(tmp_path / 'd')!r}).rglob('dump.json')).read_text())\n"
            "print(len(doc['data']), fastrec.why())\n")  # fmt: skip
    env = {**os.environ, "CXX": "/bin/false", "ASCENDIFY_CACHE": str(tmp_path / "cache"), fastrec.ENV: "1"}
    said = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        said.append(r.stdout.strip().splitlines()[-1])
    assert said[0].split()[0] == said[1].split()[0] and int(said[0].split()[0]) >= 2
    assert "the C++ build failed" in said[0] and ".failed to try again" in said[1]
    assert list((tmp_path / "cache" / "fastrec").glob("*.failed"))


@needs_fastrec
def test_probe_of_a_tensor_whose_data_pointer_may_not_be_read():
    t = torch.randn(1000)
    torch._C._set_throw_on_mutable_data_ptr(t)  # data_ptr() raises, as for a FakeTensor
    name = FNS[0](t)[0][0]
    before = sys.getrefcount(name)
    for _ in range(1000):
        assert FNS[0](t) == _python_reads(t)  # no memory key, as _memory_key
    assert sys.getrefcount(name) == before  # nothing made before the error is kept


def _state(d: dumper.Dumper) -> tuple:
    """What recording left in a dumper: the table's rows (NaN as text), what _seen and _storage say of each tensor
    (version, row), the deferred row, tensor mode's copies."""

    def norm(row):
        return None if row is None else [("nan" if math.isnan(v) else v) for v in row]

    pending = d._table.pending
    rows = [norm(r) for r in d._table.rows()]
    return (rows, {k: v[1:] for k, v in d._seen.items()}, {k: v[1:] for k, v in d._storage.items()},
            None if pending is None else pending[1:], {k: v.to_dense().tolist() for k, v in d._tensors.items()})  # fmt: skip


@needs_fastrec
@pytest.mark.parametrize("mode", ["stats", "tensors"])
@pytest.mark.parametrize("defer", [False, True])
def test_item_records_what_the_python_path_records(tmp_path, mode, defer):
    """fastrec.item against Dumper._item_graph_py, tensor by tensor on two dumpers: the same items, rows, and
    entries of _seen and _storage, on every kind of tensor, one seen again, views of a large (deferrable) one."""
    dumper._connect_fastrec()
    assert dumper._citem is not None
    torch.manual_seed(1)
    big = torch.randn(300, 300)  # deferred where the call may defer
    leaf = nn.Parameter(torch.randn(4))
    # (tensor mode cannot copy a meta tensor, on either path)
    tensors = [t for w, t in _tensors() if mode == "stats" or w != "a meta tensor"]
    tensors += [big, big, big.t(), big[:100], big.view(-1), leaf, leaf]
    tensors.append(torch.randn(*[2] * 17))  # more dimensions than the kernel takes, large enough to defer
    tensors.append(tensors[0])  # the first again: seen
    big.add_(1)
    tensors.append(big)  # a new version of the same tensor
    got = {}
    for fast in (True, False):
        d = dumper.Dumper(None, tmp_path / str(fast), level="mix", mode=mode)
        d._stack.append((None, "", None))  # inside a top-level call: parameters are remembered
        call = d._item_graph if fast else d._item_graph_py
        items = [call(t, str(i), defer) for i, t in enumerate(tensors)]
        got[fast] = ([(it[0][0], it[0][1], it[0][2], it[1]) for it in items], _state(d))
    assert got[True] == got[False]


@needs_fastrec
def test_inputs_records_what_the_python_path_records(tmp_path):
    """fastrec.inputs against the Python loop of Dumper._record_inputs: tensors, scalars (a float subclass), lists
    of tensors, of scalars (a shape), of other things, a tensor subclass, with gradient hooks on the non-leaf
    ones."""
    dumper._connect_fastrec()
    torch.manual_seed(2)
    w = torch.randn(5, 5, requires_grad=True)
    h = w * 2

    class Sub(torch.Tensor):
        pass

    class Num(float):
        pass

    args = (h, 3, 2.5, None, [h, torch.ones(2)], torch.randn(3).as_subclass(Sub), w, torch.Size([2, 3]), "s",
            [1, 2], (4, True), [], [1, slice(1, 2)], Num(1.5), True)  # fmt: skip
    got = {}
    saved = dumper._cinputs
    for fast in (True, False):
        dumper._cinputs = saved if fast else None
        try:
            d = dumper.Dumper(None, tmp_path / str(fast), level="mix")
            rec = d._new_rec("Torch.f", "api", None, "torch.f", None)
            d._record_inputs(rec, args, {"dim": -1, "other": h}, True)
        finally:
            dumper._cinputs = saved
        targets = {i: [(side, key) for _, side, key in ts] for i, ts in d._grad_targets.items()}
        got[fast] = (rec.args, targets, _state(d))
    assert got[True] == got[False]
    assert len(got[True][1]) == 1 and got[True][1][0] == [("output", "0"), ("output", "4.0"), ("output", "other")]


@needs_fastrec
def test_inputs_raises_what_isinstance_raises():
    """An argument whose ``__class__`` raises: the Python path's isinstance raises it; so does fastrec.inputs (a C++
    exception out of torch's THPVariable_Check would have ended the process)."""
    dumper._connect_fastrec()

    class Odd:
        @property
        def __class__(self):
            raise RuntimeError("no class here")

    d = dumper.Dumper(None, "unused", level="mix")
    rec = d._new_rec("Torch.f", "api", None, "torch.f", None)
    with pytest.raises(RuntimeError, match="no class here"):
        dumper._cinputs(d, rec, (torch.ones(2), Odd()), False)
    with pytest.raises(RuntimeError, match="no class here"):
        isinstance(Odd(), torch.Tensor)


@needs_fastrec
def test_compiled_autograd_runs_under_a_dump(tmp_path):
    """The dump's gradient hooks are Python hooks, which compiled autograd takes (torch's C++ tensor hooks stop it:
    compiled_args nyi); the gradient is recorded."""
    from torch._dynamo import compiled_autograd

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    with dump(m, tmp_path / "d", level="mix") as d:
        y = (m(torch.randn(3, 4)) * 2).sum()
        with compiled_autograd._enable(torch.compile(backend="eager")):
            y.backward()
        assert any(r.direction == "backward" for r in d._recs)


@needs_fastrec
def test_entries_read_the_rows_where_the_table_keeps_them():
    """entries given StatTable.host_rows() (rows read from the table's memory, the others from its dictionary)
    writes what it writes from StatTable.rows(): a row the kernel wrote, a NaN row, one without statistics, one torch
    computed (float64 here), and a view's."""
    dumper._connect_fastrec()
    table = stats.StatTable(2)  # grown on the way
    ts = [torch.randn(3, 4), torch.tensor([1.0, math.nan]), torch.randn(0), torch.randn(5, dtype=torch.float64)]
    idx = [table.add(t) for t in ts]
    idx.append(table.add_view(idx[0], ts[0].t()))
    ts.append(ts[0].t())
    assert table._dev and table._none  # the float64 row is torch's, the empty tensor's is None
    recs = [_Rec(f"n{i}.0.forward", [_item("0", t, j)], [_item("0", t, j)])
            for i, (t, j) in enumerate(zip(ts, idx, strict=True))]
    from_lists, missed = _entries_both_ways(recs, table.rows())
    from_memory, missed2 = _entries_both_ways(recs, table.host_rows())
    assert missed == missed2 == set()
    assert from_memory == from_lists
    assert from_memory[1]["output"][0]["Max"] == "NaN" and from_memory[2]["output"][0]["Max"] is None


def test_a_step_moves_the_rows_torch_made_to_the_host_once(tmp_path, monkeypatch):
    """The writer takes the table (its rows read where they are); a step with backward nodes (written by the Python
    path, which wants lists) still moves the rows torch computed (float64 here, a device's elsewhere) once."""
    calls = []
    real = stats.StatTable._others

    def others(self):
        calls.append(len(self._dev))
        return real(self)

    monkeypatch.setattr(stats.StatTable, "_others", others)
    m = nn.Linear(3, 2).double()
    with dump(m, tmp_path / "d", level="mix"):
        m(torch.randn(4, 3, dtype=torch.float64)).sum().backward()
    assert len(calls) == 1 and calls[0] > 0
    doc = json.loads(next((tmp_path / "d").rglob("dump.json")).read_text())
    assert any(name.endswith(".backward") for name in doc["data"])


def _handler_program(m: nn.Module, x: torch.Tensor) -> None:
    """Calls of every kind the mode's handler meets: operators (msprobe's Tensor.__add__ names), keyword inputs (a
    tensor among them), copy and split calls, several outputs, a call that raises, a no-grad part, autocast, an
    optimizer step, calls outside any module and inside nested ones."""
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    y = m(x)
    z = (y * 2 + 1 > 0.5).float() - y
    z += 1
    s = torch.add(z, other=y, alpha=2).softmax(dim=-1)
    a, b = s.split(3, dim=-1)
    c = a.reshape(-1).contiguous() @ b.reshape(-1)
    vals, idx = torch.max(s, dim=0)
    try:
        torch.matmul(torch.ones(2, 3), torch.ones(2, 3))
    except RuntimeError:
        pass
    with torch.no_grad():
        w = y.abs().sqrt()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v = m(x)
    (c + vals.sum() + idx.float().sum() + w.sum() + v.float().mean()).backward()
    opt.step()


class _Pair(nn.Module):
    def forward(self, x, *, scale=1.0):  # a keyword input, two outputs
        return x * scale, x.sum()


class _Fails(nn.Module):
    def forward(self, x):
        return x @ torch.ones(5, 5)  # raises: the stack keeps its entry until a later module's hook pops past it


class _Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.out = nn.Linear(6, 6)
        self.lazy = nn.LazyLinear(6)  # its parameters have a shape once it runs (recorded as it returns)
        self.pair = _Pair()
        self.fails = _Fails()
        self.tied = nn.Linear(6, 6)
        self.tied.weight = self.out.weight  # one parameter in two modules: read once a top-level call
        self.out.bias.requires_grad_(False)  # a frozen parameter: no gradient hook

    def forward(self, x):
        h = self.inner(x) * 0.5
        try:
            self.fails(h)
        except RuntimeError:
            pass
        a, b = self.pair(h, scale=2.0)
        built = nn.Identity()  # built on the fly: named after its class under its caller
        return self.out(built(torch.relu(a) + b + x.mean(dim=0, keepdim=True))) + self.lazy(x) + self.tied(h)


def _handler_dump(tmp_path, name: str, c_handler: bool, **kw) -> tuple[dict, int]:
    """The program's dump files (name -> JSON) with the C++ handler or the Python one, and how many API calls the
    Python handler recorded."""
    torch.manual_seed(5)
    m = _Nested()
    x = torch.randn(4, 6)
    saved = (dumper._cmode, dumper._chooks)
    ended = []  # API calls the Python handler recorded (its _end; the C++ handler's are its own)
    real = dumper.Dumper._end

    def end(self, rec, out):
        ended.append(rec.kind)
        return real(self, rec, out)

    dumper.Dumper._end = end
    if not c_handler:
        dumper._cmode = dumper._chooks = None
    try:
        with dumper.Dumper(m, tmp_path / name, **{"level": "mix", **kw}) as d:
            mode = d._mode
            if mode is not None:
                handler = mode.__dict__.get("__torch_function__")
                assert (handler is not None) == c_handler
                assert handler is None or handler.__self__ is mode  # torch asks it of a mode's handler
            hooks = m.inner._forward_pre_hooks.values()
            assert all(type(h).__name__ == ("builtin_function_or_method" if c_handler else "method") for h in hooks)
            _handler_program(m, x)
        assert mode is None or "__torch_function__" not in mode.__dict__  # unbound at stop: no cycle left
    finally:
        dumper._cmode, dumper._chooks = saved
        dumper.Dumper._end = real
    files = {str(p.relative_to(tmp_path / name)): json.loads(p.read_text())
             for p in sorted((tmp_path / name).rglob("*.json"))}  # fmt: skip
    for f, doc in files.items():  # the lazy module's initialisation reads torch.empty's memory: its values differ
        if f.endswith("dump.json"):
            for node, entry in doc["data"].items():
                if node.startswith(("Torch.kaiming_uniform_.", "Torch.uniform_.")):
                    entry.pop("input_kwargs", None)
                    entry.pop("input_args", None)
    return files, ended.count("api")


@needs_fastrec
@pytest.mark.parametrize("emulator", [False, True], ids=["", "emulator-loaded"])
@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("kw", [{}, {"scope": ["Module.out"]}, {"skip_optimizer": False}], ids=["all", "scope", "opt"])
def test_the_mode_handler_records_what_the_python_handler_records(tmp_path, monkeypatch, defer, kw, emulator):
    """The C++ handler (fastrec.mode_handler) against _ApiMode.__torch_function__: the same dump files (nodes,
    values, call stacks, the module tree), the C++ one first, on calls it has not named yet. What it leaves to Python
    (autocast, a scope, the optimizer's calls, a deferred row) is in the program too; with the emulator loaded, each
    call's caller is asked whether it is the emulator's kernel code (it is not, here)."""
    dumper._connect_fastrec()
    assert dumper._cmode is not None
    monkeypatch.setattr(dumper, "_DEFER_OUTPUTS", defer)
    if emulator:
        import ascendify.emulator  # noqa: F401
    else:
        monkeypatch.delitem(sys.modules, "ascendify.emulator", raising=False)
    dumper._api_cache.clear()  # the handler's first sight of each function: the Python handler names it
    fast, begun_fast = _handler_dump(tmp_path, "c", True, **kw)
    slow, begun_slow = _handler_dump(tmp_path, "py", False, **kw)
    assert fast == slow
    nodes = fast["step0/rank0/dump.json"]["data"]
    assert "Module.out.Linear.forward.0" in nodes
    if not kw:
        assert "Tensor.__add__.0.forward" in nodes and "Tensor.__gt__.0.forward" in nodes and len(nodes) > 30  # once each function is named, the C++ handler serves every call but autocast's (7 of 42)
        again, begun_again = _handler_dump(tmp_path, "c2", True)
        assert again == fast and begun_again < begun_slow / 3 < begun_fast, (begun_again, begun_fast, begun_slow)


@needs_fastrec
def test_the_mode_handler_clears_busy_when_a_call_raises(tmp_path):
    """A call that raises inside the handler leaves the dumper recording the calls after it."""
    dumper._connect_fastrec()
    assert dumper._cmode is not None
    with dump(None, tmp_path / "e", level="api") as d:
        torch.ones(2).add(1)  # named: the next ones take the C++ path
        for _ in range(2):
            with pytest.raises(RuntimeError):
                torch.ones(2).add(torch.ones(3))
            assert d._busy is False
        torch.ones(2).add(2)
        names = [r.name for r in d._recs]
    assert names[-1] == "Tensor.add.3.forward" and "Tensor.add.2.forward" in names


@needs_fastrec
@pytest.mark.parametrize("level", ["module", "api"])
def test_the_module_hooks_record_what_the_python_hooks_record(tmp_path, level):
    """fastrec.module_hooks against Dumper._pre_hook/_post_hook at the other two levels (mix: above)."""
    dumper._connect_fastrec()
    assert dumper._chooks is not None
    fast, _ = _handler_dump(tmp_path, "c", True, level=level)
    slow, _ = _handler_dump(tmp_path, "py", False, level=level)
    assert fast == slow
    nodes = fast["step0/rank0/dump.json"]["data"]
    assert ("Module.pair._Pair.forward.0" in nodes) == (level == "module")


def _nodes_both_ways(tmp_path, program) -> tuple[dict, dict]:
    """The node names of every dump.json ``program(root)`` writes, with the C++ handler and hooks, and with the
    Python ones."""
    dumper._connect_fastrec()
    saved = (dumper._cmode, dumper._chooks)
    got = []
    for c in (True, False):
        if not c:
            dumper._cmode = dumper._chooks = None
        root = tmp_path / ("c" if c else "py")
        try:
            program(root)
        finally:
            dumper._cmode, dumper._chooks = saved
        got.append({str(p.relative_to(root)): list(json.loads(p.read_text())["data"])
                    for p in sorted(root.rglob("dump.json"))})  # fmt: skip
    return got[0], got[1]


@needs_fastrec
def test_a_dump_inside_another_names_operators_alike(tmp_path):
    """Two dumps at once: the outer dump's handler is called from the inner one's, which is a frame when it is
    Python's and none when it is C++'s. Both look past it to the program's instruction: Tensor.__mul__ in both
    dumps, on the first call (named by the Python handler) and the next ones (the C++ handler's)."""
    x = torch.randn(3)

    def program(root):
        with dump(None, root / "outer", level="api"), dump(None, root / "inner", level="api"):
            for _ in range(2):
                x * 2

    fast, slow = _nodes_both_ways(tmp_path, program)
    assert fast == slow
    assert fast["outer/step0/rank0/dump.json"] == ["Tensor.__mul__.0.forward", "Tensor.__mul__.1.forward"]


@needs_fastrec
def test_a_deep_copy_of_a_dumped_model_records_alike(tmp_path):
    """copy.deepcopy of a model under a dump (an EMA copy) keeps the hooks, which record into the same dump with
    the C++ hooks and the Python ones (Dumper.__deepcopy__ is the dumper itself)."""
    import copy

    def program(root):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 4))
        with dump(m, root, level="module") as d:
            m(torch.randn(2, 4))
            copy.deepcopy(m)(torch.randn(2, 4))
            assert copy.deepcopy(d) is d

    fast, slow = _nodes_both_ways(tmp_path, program)
    assert fast == slow
    assert len(fast["step0/rank0/dump.json"]) == 4
