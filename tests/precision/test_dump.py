"""ascendify.precision.dump: what a dump records, statistics and fingerprint, steps/scope/levels, tensor and checksum
modes, memory, and clear errors on bad dumps."""

from __future__ import annotations

import gc
import json
import math
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ascendify.precision import DumpError, TensorStats, dump, list_steps_ranks, load_dump
from ascendify.precision.dumper import DumpTooLarge
from ascendify.precision.stats import fingerprint, hash_uniform, stat_vector, to_tensor_stats


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = F.gelu(self.fc(x), approximate="tanh")  # SOURCE-GELU
        h = self.ln(h) * 2.0
        return self.head(h).sum(dim=-1)


def _model(seed=0):
    torch.manual_seed(seed)
    return Tiny()


def _stats(t: torch.Tensor) -> TensorStats:
    with torch.no_grad():
        row = stat_vector(t).tolist()
    return to_tensor_stats((str(t.dtype), tuple(t.shape), t.requires_grad, str(t.device)), row)


# ---------------------------------------------------------------------------------------------- statistics


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_stats_match_torch(dtype):
    x = (torch.randn(6, 33, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    s = _stats(x)
    ref = x.double()
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 1e-2
    assert s.max == pytest.approx(ref.max().item(), rel=tol)
    assert s.min == pytest.approx(ref.min().item(), rel=tol)
    assert s.mean == pytest.approx(ref.mean().item(), rel=tol, abs=tol)
    assert s.norm == pytest.approx(ref.norm().item(), rel=tol)
    assert s.dtype == str(dtype) and s.shape == (6, 33) and s.nan_count == 0 and s.inf_count == 0


def test_stats_of_non_contiguous_ints_bools_and_specials():
    x = torch.randn(5, 7, 3)
    t = x.transpose(0, 2)
    assert _stats(t).max == pytest.approx(x.max().item()) and _stats(t).norm == pytest.approx(x.norm().item())
    i = torch.arange(10)
    assert (_stats(i).min, _stats(i).max, _stats(i).mean) == (0.0, 9.0, 4.5)
    b = torch.tensor([True, False, True, True])
    assert (_stats(b).min, _stats(b).max, _stats(b).mean) == (0.0, 1.0, 0.75)
    y = torch.tensor([1.0, float("nan"), float("inf"), float("nan"), -float("inf")])
    s = _stats(y)
    assert (s.nan_count, s.inf_count) == (2, 2)
    assert stat_vector(torch.empty(0)) is None


def test_fingerprint_sees_permutation_and_scale_that_statistics_miss():
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(1))
    perm = x[:, torch.randperm(48, generator=torch.Generator().manual_seed(2))]
    scaled = x * 1.02
    base = fingerprint(x)

    def rel(a):
        return ((a - base).norm() / base.norm()).item()

    sx, sp = _stats(x), _stats(perm)
    assert (sx.max, sx.min) == (sp.max, sp.min) and sx.norm == pytest.approx(sp.norm, rel=1e-6)
    assert rel(fingerprint(perm)) > 0.5  # a permutation decorrelates the fingerprint
    assert rel(fingerprint(scaled)) == pytest.approx(0.02, rel=1e-3)  # linear: 2% scale -> 2% change
    assert rel(fingerprint(x.clone())) == 0.0
    # large tensors are sampled (4096 positions) and still see a permutation of rows
    big = torch.randn(3000, 40, generator=torch.Generator().manual_seed(3))
    swapped = big[torch.randperm(3000, generator=torch.Generator().manual_seed(4))]
    fb = fingerprint(big)
    assert ((fingerprint(swapped) - fb).norm() / fb.norm()).item() > 0.5


def test_fingerprint_weights_are_a_fixed_hash():
    # the documented hash, recomputed in plain Python: identical on every machine, no RNG
    def h(i, salt):
        v = (i * 2654435761 + salt * 40503 + 0x9E3779B9) & 0xFFFFFFFF
        v ^= v >> 16
        v = (v * 0x45D9F3B) & 0xFFFFFFFF
        v ^= v >> 16
        return v / 2**31 - 1.0

    w = hash_uniform(5, 101)
    assert w.tolist() == pytest.approx([h(i, 101) for i in range(5)], abs=1e-7)
    x = torch.arange(6, dtype=torch.float32)
    expect0 = sum(h(i, 101) * float(x[i]) for i in range(6)) / math.sqrt(6)
    assert fingerprint(x)[0].item() == pytest.approx(expect0, rel=1e-5)
    assert fingerprint(x.reshape(2, 3)).tolist() == fingerprint(x).tolist()  # logical order, any shape


# ---------------------------------------------------------------------------------------------- what a dump holds


@pytest.fixture
def mix_dump(tmp_path):
    m = _model()
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(5))
    with dump(m, tmp_path / "d", level="mix") as d:
        m(x).sum().backward()
    return load_dump(tmp_path / "d"), m, x, d


def test_dump_layout_and_nodes(mix_dump, tmp_path):
    dd, m, x, d = mix_dump
    rank_dir = tmp_path / "d" / "step0" / "rank0"
    assert {p.name for p in rank_dir.iterdir()} == {"dump.json", "stack.json", "construct.json"}
    assert d.written == [rank_dir]
    assert list_steps_ranks(tmp_path / "d") == [(0, 0)]
    assert dd.framework == "ascendify" and dd.level == "mix" and dd.mode == "stats"
    names = [n.name for n in dd.nodes]
    for expected in ["Module.Tiny.forward.0", "Module.fc.Linear.forward.0", "Functional.linear.0.forward",
                     "Functional.gelu.0.forward", "Module.ln.LayerNorm.forward.0", "Functional.layer_norm.0.forward",
                     "Functional.linear.1.forward", "Module.head.Linear.forward.0", "Tensor.sum.0.forward",
                     "Module.fc.Linear.backward.0", "Functional.gelu.0.backward"]:  # fmt: skip
        assert expected in names
    assert names.index("Module.fc.Linear.forward.0") < names.index("Functional.gelu.0.forward")
    assert [n.order for n in dd.nodes] == list(range(len(dd.nodes)))
    by = dd.by_name()
    lin = by["Functional.linear.0.forward"]
    assert lin.kind == "api" and lin.api == "torch.nn.functional.linear" and lin.module_path == "fc"
    assert lin.parent == "Module.fc.Linear.forward.0"
    fc = by["Module.fc.Linear.forward.0"]
    assert fc.kind == "module" and fc.class_name == "Linear" and fc.module_path == "fc"
    assert set(fc.params) == {"weight", "bias"}
    assert fc.params["weight"].norm == pytest.approx(m.fc.weight.norm().item(), rel=1e-6)
    out = m.fc(x)
    assert fc.outputs[0].max == pytest.approx(out.max().item(), rel=1e-6)
    assert fc.outputs[0].shape == (3, 8) and fc.outputs[0].dtype == "torch.float32"
    # scalar arguments and the user's source line
    gelu = by["Functional.gelu.0.forward"]
    assert gelu.scalars == {"approximate": "tanh"}
    assert gelu.source is not None and gelu.source.endswith(f"test_dump.py:{_line_of('SOURCE-GELU')}")
    # backward: gradients and parameter gradients
    bw = by["Module.fc.Linear.backward.0"]
    assert bw.direction == "backward" and set(bw.grads) == {"weight", "bias"}
    assert bw.grads["weight"].norm == pytest.approx(m.fc.weight.grad.norm().item(), rel=1e-5)
    assert by["Functional.gelu.0.backward"].inputs[0].shape == (3, 8)


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return i
    raise AssertionError(marker)


def test_json_keeps_msprobe_schema_and_adds_ours(mix_dump, tmp_path):
    doc = json.loads((tmp_path / "d" / "step0" / "rank0" / "dump.json").read_text())
    assert doc["task"] == "statistics" and doc["level"] == "mix" and doc["framework"] == "pytorch"
    e = doc["data"]["Functional.gelu.0.forward"]
    assert set(e) == {"input_args", "input_kwargs", "output", "ascendify"}
    assert e["input_kwargs"] == {"approximate": {"type": "str", "value": "tanh"}}
    t = e["output"][0]
    assert {"type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"} <= set(t)
    assert len(t["fingerprint"]) == 8
    assert "Module.fc.Linear.parameters_grad.0" in doc["data"]
    construct = json.loads((tmp_path / "d" / "step0" / "rank0" / "construct.json").read_text())
    assert construct["Functional.linear.0.forward"] == "Module.fc.Linear.forward.0"


def test_levels_scope_steps_and_ranks(tmp_path):
    m = _model()
    x = torch.randn(2, 4)
    with dump(m, tmp_path / "mod", level="module", backward=False):
        m(x)
    kinds = {n.kind for n in load_dump(tmp_path / "mod").nodes}
    assert kinds == {"module"}
    with dump(m, tmp_path / "api", level="api", backward=False):
        m(x)
    api = load_dump(tmp_path / "api")
    assert {n.kind for n in api.nodes} == {"api"}
    assert api.by_name()["Functional.linear.0.forward"].module_path == "fc"  # module paths still known
    with dump(m, tmp_path / "scope", scope=["ln"], backward=False):
        m(x)
    assert {n.module_path for n in load_dump(tmp_path / "scope").nodes} == {"ln"}
    with dump(m, tmp_path / "steps", steps=[1, 2], backward=False) as d:
        for _ in range(4):
            m(x)
            d.step()
    assert list_steps_ranks(tmp_path / "steps") == [(1, 0), (2, 0)]
    assert load_dump(tmp_path / "steps", step=2).step == 2
    with dump(m, tmp_path / "ranks", ranks=[3], backward=False):
        m(x)
    assert not (tmp_path / "ranks").exists()  # rank 0 is not selected: nothing recorded


def test_autocast_dtype_is_recorded(tmp_path):
    m = _model()
    with dump(m, tmp_path / "ac", backward=False), torch.autocast("cpu", dtype=torch.bfloat16):
        m(torch.randn(2, 4))
    by = load_dump(tmp_path / "ac").by_name()
    assert by["Functional.linear.0.forward"].autocast == "torch.bfloat16"
    assert by["Functional.linear.0.forward"].outputs[0].dtype == "torch.bfloat16"


def test_inplace_ops_and_views_get_their_own_statistics(tmp_path):
    class M(nn.Module):
        def forward(self, x):
            y = x * 1.0
            y.add_(1.0)  # in place: the output differs from the input it was
            return y.t()  # a view: same statistics, other positions

    x = torch.randn(4, 6)
    with dump(M(), tmp_path / "v", backward=False):
        M()(x)
    by = load_dump(tmp_path / "v").by_name()
    add = by["Tensor.add_.0.forward"]
    assert add.inputs[0].max == pytest.approx(x.max().item())
    assert add.outputs[0].max == pytest.approx(x.max().item() + 1.0)
    t = by["Tensor.t.0.forward"]
    assert t.outputs[0].norm == pytest.approx(add.outputs[0].norm) and t.outputs[0].shape == (6, 4)
    assert t.outputs[0].fingerprint != add.outputs[0].fingerprint


def test_fused_fast_path_is_seen(tmp_path):
    """Eval-mode MultiheadAttention without grad runs one fused native op that msprobe does not see; at module
    level the call is recorded with its output, at API level its computation shows up op by op."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        expect, _ = mha(x, x, x)
        with dump(mha, tmp_path / "mha", level="mix"):
            got, _ = mha(x, x, x)
    assert torch.allclose(got, expect, atol=1e-6)
    dd = load_dump(tmp_path / "mha")
    root = dd.by_name()["Module.MultiheadAttention.forward.0"]
    assert root.outputs[0].max == pytest.approx(expect.max().item(), rel=1e-5)
    apis = [n for n in dd.nodes if n.kind == "api"]
    assert apis and all(n.module_path == "" for n in apis)


def test_stats_mode_keeps_no_activation_alive(tmp_path):
    class Big(nn.Module):
        def forward(self, x):
            return F.relu(x * 2.0) + 1.0

    x = torch.randn(256, 1024)
    big = Big()
    with dump(big, tmp_path / "m", backward=False) as d:
        out = big(x)
        ref = weakref.ref(out)
        assert len(d._table) and all(len(r) == 14 for r in d._table.rows() if r is not None)
        del out
        gc.collect()
        assert ref() is None  # the dumper holds statistics vectors only
    assert len(load_dump(tmp_path / "m").nodes) == 4  # Module.Big, mul, relu, add


# ---------------------------------------------------------------------------------------------- tensor and checksum


def test_tensor_mode_saves_plain_tensors(tmp_path):
    m = _model()
    x = torch.randn(3, 4)
    with dump(m, tmp_path / "t", mode="tensors", backward=False):
        y = m(x)
    dd = load_dump(tmp_path / "t")
    assert dd.mode == "tensors"
    node = dd.by_name()["Module.fc.Linear.forward.0"]
    arr = dd.load_tensor(node.outputs[0])
    assert arr.shape == (3, 8) and torch.allclose(torch.from_numpy(arr), m.fc(x), atol=1e-6)
    final = dd.by_name()["Module.Tiny.forward.0"].outputs[0]
    assert torch.allclose(torch.from_numpy(dd.load_tensor(final)), y.detach())
    for f in (tmp_path / "t" / "step0" / "rank0" / "dump_tensor_data").iterdir():
        assert f.suffix == ".pt"
        assert isinstance(torch.load(f, weights_only=True), torch.Tensor)


def test_tensor_mode_refuses_past_max_bytes_and_writes_nothing(tmp_path):
    m = _model()
    with pytest.raises(DumpTooLarge, match=r"max_bytes.*Raise the limit"):
        with dump(m, tmp_path / "t", mode="tensors", max_bytes=256, backward=False):
            m(torch.randn(64, 4))
    assert not (tmp_path / "t" / "step0").exists()


def test_checksum_mode(tmp_path):
    class Twice(nn.Module):
        def forward(self, x):
            return x.clone(), x.clone() * 1.0, x + 1

    m = Twice()
    with dump(m, tmp_path / "c", mode="checksum", backward=False):
        m(torch.randn(3, 3))
    outs = load_dump(tmp_path / "c").by_name()["Module.Twice.forward.0"].outputs
    assert outs[0].md5 and outs[0].md5 == outs[1].md5 != outs[2].md5


# ---------------------------------------------------------------------------------------------- bad input


def _good(tmp_path):
    m = _model()
    with dump(m, tmp_path / "g", backward=False):
        m(torch.randn(2, 4))
    return tmp_path / "g" / "step0" / "rank0" / "dump.json"


def test_bad_dumps_name_the_file(tmp_path):
    f = _good(tmp_path)
    text = f.read_text()
    f.write_text(text[: len(text) // 2])
    with pytest.raises(DumpError, match="not valid JSON") as e:
        load_dump(tmp_path / "g")
    assert e.value.path == str(f)
    f.write_text(json.dumps({"name": "a package.json, say", "version": "1"}))
    with pytest.raises(DumpError, match="not a dump.json") as e:
        load_dump(f)
    assert e.value.path == str(f)
    f.write_text("")
    with pytest.raises(DumpError, match="empty"):
        load_dump(f)
    with pytest.raises(DumpError, match="no such file"):
        load_dump(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpError, match="not a dump"):
        load_dump(tmp_path / "empty")


def test_missing_rank_and_step(tmp_path):
    _good(tmp_path)
    with pytest.raises(DumpError, match=r"no rank 1 \(ranks present: 0\)"):
        load_dump(tmp_path / "g", rank=1)
    with pytest.raises(DumpError, match=r"no step 5 \(steps present: 0\)"):
        load_dump(tmp_path / "g", step=5)
    (tmp_path / "g" / "step0" / "rank0" / "dump.json").unlink()
    with pytest.raises(DumpError, match="interrupted"):
        load_dump(tmp_path / "g" / "step0")
    with pytest.raises(DumpError, match="interrupted"):
        load_dump(tmp_path / "g")


def test_bad_arguments():
    with pytest.raises(ValueError, match="level must be one of"):
        dump(None, "x", level="L9")
    with pytest.raises(ValueError, match="mode must be one of"):
        dump(None, "x", mode="pictures")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        dump("model", "x")


def test_copies_reuse_statistics_but_not_the_fingerprint(tmp_path):
    class M(nn.Module):
        def forward(self, x):
            y = x * 3.0
            return y.t().contiguous().reshape(-1)

    x = torch.randn(5, 7)
    m = M()
    with dump(m, tmp_path / "c", backward=False):
        out = m(x)
    by = load_dump(tmp_path / "c").by_name()
    cont = by["Tensor.contiguous.0.forward"].outputs[0]
    ref = _stats((x * 3.0).t().contiguous())
    assert (cont.max, cont.min) == (ref.max, ref.min) and cont.norm == pytest.approx(ref.norm, rel=1e-6)
    assert cont.fingerprint == pytest.approx(ref.fingerprint, rel=1e-5)  # of the copy's own positions
    assert by["Tensor.reshape.0.forward"].outputs[0].fingerprint == pytest.approx(_stats(out).fingerprint, rel=1e-5)


def test_operators_are_named_as_msprobe_names_them(tmp_path):
    class M(nn.Module):
        def forward(self, x):
            y = x * 2.0  # msprobe wraps Tensor.__mul__: the operator form keeps its name
            y += 1.0
            z = y.mul(3.0)  # the method keeps the method's name
            return (z > 0) & (z @ z.t() != 0).any()

    m = M()
    with dump(m, tmp_path / "ops", backward=False):
        m(torch.randn(3, 3))
    names = [n.name for n in load_dump(tmp_path / "ops").nodes if n.kind == "api" and n.module_path == ""]
    assert names[:5] == ["Tensor.__mul__.0.forward", "Tensor.__iadd__.0.forward", "Tensor.mul.0.forward",
                         "Tensor.__gt__.0.forward", "Tensor.t.0.forward"]  # fmt: skip
    assert {"Tensor.__matmul__.0.forward", "Tensor.__ne__.0.forward", "Tensor.__and__.0.forward"} <= set(names)


def test_inference_mode_dict_outputs_and_a_failing_forward(tmp_path):
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with torch.inference_mode(), dump(m, tmp_path / "inf"):
        y = m(torch.randn(2, 4))
    relu = load_dump(tmp_path / "inf").by_name()["Module.1.ReLU.forward.0"]
    assert relu.outputs[0].max == pytest.approx(y.max().item())  # inference tensors have no version counter

    class D(nn.Module):
        def forward(self, x):
            return {"logits": x * 2, "aux": [x + 1, None]}

    d = D()
    with dump(d, tmp_path / "dict"):
        d(torch.randn(2))
    outs = load_dump(tmp_path / "dict").by_name()["Module.D.forward.0"].outputs
    assert [t.key for t in outs] == ["logits", "aux.0"]

    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    b = nn.Sequential(nn.Linear(2, 2), Boom())
    with pytest.raises(RuntimeError, match="boom"), dump(b, tmp_path / "boom"):
        b(torch.randn(1, 2))
    names = [n.name for n in load_dump(tmp_path / "boom").nodes]
    assert "Module.0.Linear.forward.0" in names and "Module.1.Boom.forward.0" in names  # written, error kept


def test_infinite_values_and_arguments_are_dumped_as_msprobe_writes_them(tmp_path):
    # attention masks filled with -inf are everywhere; msprobe writes them as JSON's Infinity / -Infinity
    lin = nn.Linear(4, 4)
    mask = torch.tensor([[True, False, False, False]] * 2)
    with dump(lin, tmp_path / "d", level="mix", mode="stats"):
        scores = lin(torch.randn(2, 4)).masked_fill(mask, float("-inf"))
        torch.softmax(scores, -1)
    d = load_dump(tmp_path / "d")
    fill = next(n for n in d.nodes if n.name.startswith("Tensor.masked_fill"))
    assert fill.outputs[0].min == -math.inf
    assert any(getattr(a, "value", None) == -math.inf for a in fill.inputs)
    assert "-Infinity" in next((tmp_path / "d").rglob("dump.json")).read_text()


def test_entries_shared_between_nodes_stay_their_own_and_json_serves_without_orjson(tmp_path, monkeypatch):
    from ascendify.precision import msprobe_io

    class D(nn.Module):
        def forward(self, x):
            y = x * 2
            return {"logits": y, "again": y.relu()}

    d, x = D(), torch.randn(3)
    for kind in ("fast", "slow"):  # one line of source for both dumps
        if kind == "slow":
            monkeypatch.setattr(msprobe_io, "_orjson", None)  # as where orjson is not installed
        with dump(d, tmp_path / kind):
            d(x)
    docs = [json.loads(next((tmp_path / k).rglob("dump.json")).read_text()) for k in ("fast", "slow")]
    assert docs[0]["data"] == docs[1]["data"]  # the same document either way
    data = docs[0]["data"]
    # the module's dict output names its keys; the same tensor as the mul's output and relu's input does not
    assert [e["key"] for e in data["Module.D.forward.0"]["output"]] == ["logits", "again"]
    assert "key" not in data["Tensor.__mul__.0.forward"]["output"][0]
    assert "key" not in data["Tensor.relu.0.forward"]["input_args"][0]
    assert data["Tensor.__mul__.0.forward"]["output"][0]["Max"] == pytest.approx((x * 2).max().item())


def test_msprobe_style_bare_nan_and_infinity_still_load(tmp_path):
    lin = nn.Linear(2, 2)
    with dump(lin, tmp_path / "d", level="module"):
        lin(torch.randn(1, 2))
    f = next((tmp_path / "d").rglob("dump.json"))
    doc = json.loads(f.read_text())
    out = doc["data"]["Module.Linear.forward.0"]["output"][0]
    out["Max"], out["Min"] = float("nan"), float("-inf")
    f.write_text(json.dumps(doc))  # json writes bare NaN / -Infinity, as msprobe's files hold them
    assert "NaN" in f.read_text() and '"NaN"' not in f.read_text()
    t = load_dump(tmp_path / "d").by_name()["Module.Linear.forward.0"].outputs[0]
    assert math.isnan(t.max) and t.min == -math.inf


def test_lazy_modules_are_dumped_with_their_parameters(tmp_path):
    """``ascendify dump``'s global hooks run before a lazy module's own pre-hook gives its parameters a shape: they
    are recorded when the module returns (the dump's hook used to fail on the uninitialised parameter), and a call
    on an uninitialised parameter (``.to`` before the first forward) is recorded without statistics."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.LazyLinear(3), nn.ReLU())
    x = torch.randn(2, 5)
    with dump(None, tmp_path / "lazy", level="mix"):
        m.to(torch.float32)
        m(x).sum().backward()
    by = load_dump(tmp_path / "lazy").by_name()
    lin = by["Module.0.LazyLinear.forward.0"]  # the class it had when called
    assert list(lin.params) == ["weight", "bias"]
    assert lin.params["weight"].shape == (3, 5) and lin.params["bias"].shape == (3,)
    assert lin.params["weight"].max == pytest.approx(m[0].weight.max().item())
    grads = by["Module.0.LazyLinear.backward.0"].grads
    assert grads["weight"].max == pytest.approx(m[0].weight.grad.max().item())
    assert by["Functional.linear.0.forward"].outputs[0].shape == (2, 3)



class _PublicOnly:
    """A dumper seen only through its public surface (any private attribute read raises), writing under ``root``."""

    def __init__(self, dumper, root):
        self._d, self.root = dumper, root

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(f"the writer read the dumper's private {name}")
        return getattr(self.__dict__["_d"], name)


@pytest.mark.parametrize("mode", ["stats", "tensors", "checksum"])
def test_the_writer_reads_the_dumper_only_through_its_public_surface(tmp_path, monkeypatch, mode):
    from ascendify.precision import msprobe_io

    real = msprobe_io.write_step

    def writes(dumper, recs, rows):
        real(_PublicOnly(dumper, tmp_path / "public"), recs, rows)
        return real(dumper, recs, rows)

    monkeypatch.setattr(msprobe_io, "write_step", writes)
    model = _model()
    with dump(model, tmp_path / "dump", mode=mode):
        model(torch.randn(3, 4)).sum().backward()
    docs = [json.loads((tmp_path / d / "step0/rank0/dump.json").read_text()) for d in ("dump", "public")]
    for doc in docs:
        doc.pop("dump_data_dir")
    assert docs[0] == docs[1]  # the same step, written through the public surface alone
    out = docs[1]["data"]["Functional.gelu.0.forward"]["output"][0]
    if mode == "tensors":
        assert (tmp_path / "public/step0/rank0/dump_tensor_data" / out["data_name"]).is_file()
    if mode == "checksum":
        assert len(out["md5"]) == 32


def test_the_young_generation_collects_less_often_while_a_dump_runs(tmp_path):
    """A step's records are freed at flush: the dump raises gc's first threshold meanwhile (no collection every 700
    allocations walking the step's tensors) and gives the program's own back at stop."""
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 7, 9)
        model = _model()
        with dump(model, tmp_path / "d"):
            inside = gc.get_threshold()
            model(torch.randn(3, 4))
        assert inside[0] >= 10_000 and inside[1:] == (7, 9)
        assert gc.get_threshold() == (700, 7, 9)
        gc.set_threshold(0, 7, 9)  # collection turned off by the program: left off
        with dump(model, tmp_path / "d2"):
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold() == (0, 7, 9)
    finally:
        gc.set_threshold(*saved)


def test_each_call_is_attributed_to_the_line_that_made_it(tmp_path):
    """The source of a recorded call (read when the step is written, from the instruction the caller was at) is the
    caller's line, as frame.f_lineno gives it: in a long function, a call over several lines, a loop."""
    import inspect

    lines: dict[str, int] = {}

    class Long(nn.Module):
        def forward(self, x):
            y = x + 1
            y = y * 2
            for _ in range(2):
                y = y - 0.5
            y = y.reshape(
                -1,
            )
            lines["reshape"] = inspect.currentframe().f_lineno - 3
            lines["sub"] = lines["reshape"] - 1
            lines["mul"] = lines["reshape"] - 3
            z = torch.tanh(y)
            lines["tanh"] = inspect.currentframe().f_lineno - 1
            return z

    m = Long()
    with dump(m, tmp_path / "d", level="api"):
        m(torch.randn(3))
    doc = json.loads(next((tmp_path / "d").rglob("dump.json")).read_text())["data"]
    got = {name: int(v["ascendify"]["source"].rsplit(":", 1)[1]) for name, v in doc.items()}
    assert got["Tensor.__mul__.0.forward"] == lines["mul"]
    assert got["Tensor.__sub__.0.forward"] == got["Tensor.__sub__.1.forward"] == lines["sub"]
    assert got["Tensor.reshape.0.forward"] == lines["reshape"]
    assert got["Torch.tanh.0.forward"] == lines["tanh"]
    assert all(v["ascendify"]["source"].startswith("tests") or "test_dump.py" in v["ascendify"]["source"]
               for v in doc.values())


def test_the_module_walk_is_named_modules():
    """dumper._named_modules (one loop) gives what named_modules() gives: pre-order, a shared module once at its
    first path, None children skipped; a class with its own named_modules is asked."""
    from ascendify.precision import dumper

    shared = nn.Linear(2, 2)
    m = nn.Sequential(nn.Sequential(shared, nn.ReLU()), nn.ModuleDict({"a": shared, "b": nn.Tanh()}), shared)
    m.add_module("gone", None)
    m.append(nn.ModuleList([nn.Sequential(nn.GELU()), nn.Identity()]))
    assert [(n, id(x)) for n, x in dumper._named_modules(m)] == [(n, id(x)) for n, x in m.named_modules()]

    class Own(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(1, 1)

        def named_modules(self, *a, **k):
            yield "only", self

    wrapped = nn.Sequential(Own())
    assert [n for n, _ in dumper._named_modules(wrapped)] == [n for n, _ in wrapped.named_modules()]
