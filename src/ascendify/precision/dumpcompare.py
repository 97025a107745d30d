"""Compare two dumps (ours or msprobe's): match their nodes, measure each node's error, name the first divergence.

``compare_dumps(golden, target)`` loads both (``msprobe_io.load_dump``), matches forward nodes structurally
(``matching``: module path, call order, class, shapes; wrapper levels and renamed classes survive), and judges
each matched target node:

* **local error from statistics**: the node's output error (relative error of the L2 norm and of the
  fingerprint, ``metrics.stat_rel_errors``; tensor-mode dumps use the saved arrays) is its own only when its
  inputs agree. A node is flagged when its inputs agree within the limit for the dtype it computed in
  (``thresholds``) and its outputs do not. Downstream of a defect every input disagrees: those nodes show the
  inherited error and are not flagged (msprobe flags them, and names the first LayerNorm after the defect);
* **inputs** are the call's tensor arguments (integer ones too: token ids) and a module call's own
  parameters: weights that an earlier step updated differently make the call's difference inherited, and so
  that of the modules holding it;
* **random calls** (``randomness``: dropout, ``multinomial``, ``randperm``...) whose output differs while their
  inputs agree drew from different generators: *not comparable* (``NodeResult.not_comparable``), never a local
  error, and neither are the modules holding them; the verdict is then ``not comparable``;
* **metadata**: output shapes, NaN/Inf counts, a floating dtype that neither the golden dump nor the target's
  autocast explains (float16 inside a bf16 autocast run), and scalar arguments that differ (an ``eps``, an
  ``approximate="tanh"``). Integer arguments (dims, sizes) are reported, not flagged; devices (a
  ``torch.device``, or a string such as ``'npu'``, ``'cuda:0'``, positional or keyword) are never compared.

The first divergence is the first flagged node with no flagged descendant (``divergence``).

Bad input raises ``DumpError`` naming the file: a truncated or foreign dump (from ``load_dump``), or two dumps
of different models (fewer than half of the golden module calls find a counterpart).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ascendify.precision import matching, metrics, randomness, thresholds
from ascendify.precision.divergence import ComparisonResult, NodeResult
from ascendify.precision.model import Dump, DumpError, Node, ScalarArg, TensorStats
from ascendify.precision.msprobe_io import load_dump

# below this share of matched golden module calls, two dumps are taken to be of different models
MIN_MATCHED_SHARE = 0.5


def _depths(nodes: list[Node]) -> list[int]:
    by_name = {n.name: i for i, n in enumerate(nodes)}
    depth: list[int] = []
    for n in nodes:
        p = by_name.get(n.parent) if n.parent else None
        depth.append(depth[p] + 1 if p is not None and p < len(depth) else 0)
    return depth


# torch.nn.init functions that msprobe (which hooks Tensor methods, not torch.nn.init) sees as the Tensor method
# they call; ours records the init function itself where it dispatches to torch functions (uniform_, normal_,
# constant_, kaiming_uniform_), the Tensor method otherwise
_INIT_TO_METHOD = {"uniform_": "uniform_", "normal_": "normal_", "constant_": "fill_", "ones_": "fill_",
                   "zeros_": "zero_", "xavier_uniform_": "uniform_", "kaiming_uniform_": "uniform_",
                   "xavier_normal_": "normal_", "kaiming_normal_": "normal_"}  # fmt: skip
# Python operators as recorded (``a * b``: Tensor.__mul__) and the method they call (Tensor.mul, torch.mul)
_OPERATORS = {f"__{n}__": n for n in ("add", "sub", "mul", "matmul", "pow", "and", "or", "xor", "lt", "le", "eq",
                                       "ne", "gt", "ge", "neg", "abs", "floordiv")}  # fmt: skip
_OPERATORS["__truediv__"] = "div"
_OPERATORS["__mod__"] = "remainder"


# where ours finds torch.linalg/fft/special functions (``linalg_vector_norm``), and what its node name reads back as
_FLAT_NAMESPACES = ("torch", "torch._C._VariableFunctions", "torch._C._linalg", "torch._C._fft", "torch._C._special")


def api_key(api: str) -> str:
    """One name for one API call whichever tool recorded it, for matching: ours records ``torch.nn.init.normal_``
    and ``torch.linalg.vector_norm`` (node names ``Torch.normal_``, ``Torch.linalg_vector_norm``); msprobe
    records the ``Tensor.normal_`` that init calls, names ``torch.linalg.vector_norm`` ``Torch.vector_norm``
    (the last part of the name only) and ``torch._VF.lstm`` ``VF.lstm``; the same operation reached as a
    function, a ``Tensor`` method or an operator (``torch.mul``, ``x.mul``, ``x * y``) is one call.

    >>> [api_key(a) for a in ("torch.nn.init.normal_", "Tensor.normal_", "torch.normal_")]
    ['normal_', 'normal_', 'normal_']
    >>> [api_key(a) for a in ("torch.linalg.vector_norm", "torch.vector_norm", "torch.linalg_vector_norm")]
    ['vector_norm', 'vector_norm', 'vector_norm']
    >>> [api_key(a) for a in ("torch.nn.functional.gelu", "Tensor.__mul__", "torch.mul", "torch._VF.lstm")]
    ['gelu', 'mul', 'mul', 'lstm']
    >>> api_key("torch.distributed.distributed_c10d.all_reduce"), api_key("torch.distributed.all_reduce")
    ('torch.distributed.all_reduce', 'torch.distributed.all_reduce')
    """
    head, _, name = api.rpartition(".")
    if head.startswith("torch.distributed"):
        return f"torch.distributed.{name}"
    if head in _FLAT_NAMESPACES and name.startswith(("linalg_", "fft_", "special_")):
        name = name.split("_", 1)[1]  # ours: Torch.linalg_vector_norm, the node name read back without our keys
    name = _OPERATORS.get(name, name)
    return _INIT_TO_METHOD.get(name, name)


def _keys(nodes: list[Node]) -> list[matching.CallKey]:
    """Matching keys of ``nodes`` (execution order). An API call's path is its :func:`api_key` and its call number
    counts the calls of that key: each tool numbers calls by its own name (ours ``Torch.kaiming_uniform_.1``
    and ``Torch.uniform_.0`` are msprobe's ``Tensor.uniform_.2`` and ``.1``)."""
    seen: dict[str, int] = {}
    keys = []
    for n, depth in zip(nodes, _depths(nodes), strict=True):
        tin = [x for x in n.inputs if isinstance(x, TensorStats)]
        own = tuple(tuple(s.shape) for s in n.params.values())
        if n.kind == "module":
            path, index = n.module_path or "", n.call_index
        else:
            path = api_key(n.api or n.name)
            index = seen.get(path, 0)
            seen[path] = index + 1
        keys.append(matching.CallKey(
            path=path,
            kind=n.kind,
            class_name=n.class_name,
            in_shapes=tuple(tuple(t.shape) for t in tin),
            out_shapes=tuple(tuple(t.shape) for t in n.outputs),
            own_params=own,
            call_index=index,
            owner=n.module_path if n.kind == "api" else None,
            depth=depth,
        ))  # fmt: skip
    return keys


def _worst(pairs: list[tuple[TensorStats, TensorStats]], integers: bool = False) -> dict[str, Any]:
    """The stats comparison of the worst pair (largest ``worst``), with the count of pairs. ``integers``: integer
    and boolean tensors count too (token ids drawn by ``randint``, a ``randperm``), by every statistic: any
    difference in them is a difference."""
    worst: dict[str, Any] | None = None
    for a, b in pairs:
        if not (a.is_float and b.is_float):
            if integers and not a.is_float and not b.is_float and tuple(a.shape) == tuple(b.shape):
                m = metrics.stat_rel_errors(a, b)
                m["worst"] = m.get("worst_all")
                if worst is None or (m.get("worst") or 0.0) > (worst.get("worst") or 0.0):
                    worst = m
            continue
        m = metrics.stat_rel_errors(a, b)
        if m.get("shape_mismatch"):
            return m
        if worst is None or (m.get("worst") or 0.0) > (worst.get("worst") or 0.0):
            worst = m
    out = worst or {"worst": None}
    out["tensors"] = len(pairs)
    return out


def _tensor_local(gd: Dump, td: Dump, a: TensorStats, b: TensorStats) -> dict[str, Any] | None:
    """Tensor-mode dumps: full metrics from the saved arrays (None when either was not saved)."""
    if not (a.data_ref and b.data_ref):
        return None
    import torch

    x, y = td.load_tensor(a), gd.load_tensor(b)
    if x is None or y is None:
        return None
    return metrics.tensor_metrics(torch.as_tensor(x), torch.as_tensor(y), a.dtype)


# device types a device string may name (PyTorch's DeviceType names, plus npu): ``'cuda:0'``, ``'npu'``, ``'cpu'``
DEVICE_TYPES = frozenset(
    "cpu cuda npu xpu mps meta hpu xla lazy ipu mtia maia vulkan metal mkldnn opengl opencl ideep hip fpga ve "
    "privateuseone".split()
)


def is_device(value: Any) -> bool:
    """True for a device given as a string: ``'cpu'``, ``'npu'``, ``'cuda:0'`` (a type, optionally ``:index``).

    >>> is_device("cuda:0"), is_device("npu"), is_device("cpu"), is_device("mean"), is_device("cuda:x")
    (True, True, True, False, False)
    """
    if not isinstance(value, str):
        return False
    kind, sep, index = value.partition(":")
    return kind in DEVICE_TYPES and (not sep or index.isdigit())


def _scalars(n: Node) -> dict[str, Any]:
    """Non-tensor arguments by key; devices left out (a target on another device is the point of comparing): a
    ``torch.device``, the ``device`` keyword, and a device written as a string, positional or keyword
    (``x.to('npu')``, ``x.to(device='cuda:0')``)."""
    devices = {"device"}
    out = {}
    for i, x in enumerate(n.inputs):
        if isinstance(x, ScalarArg):
            if x.type in ("torch.device", "device") or is_device(x.value):
                devices.add(x.key or f"arg{i}")
            else:
                out[x.key or f"arg{i}"] = x.value
    # n.scalars repeats the arguments by key (x.to('npu') is {'1': 'npu'}): its devices are left out too
    out.update({k: v for k, v in (n.scalars or {}).items() if k not in devices and not is_device(v)})
    return out


def _reduction(n: Node) -> int | None:
    k = 0
    for p in n.params.values():
        if len(p.shape) >= 2:
            k = max(k, p.numel // p.shape[0])
    return k or None


def run_precision(*dumps: Dump) -> str:
    """The lowest precision any node of ``dumps`` computed in (autocast included): a number the program computed
    at run time from such tensors (``loss.item()`` passed on as an argument) carries that rounding."""
    dts: list[str] = []
    for d in dumps:
        for n in d.forward():
            if n.autocast:
                dts.append(n.autocast)
            dts.extend(x.dtype for x in (*n.tensor_inputs, *n.outputs) if x.is_float)
    return thresholds.compute_dtype(dts or ["torch.float32"])


def _judge(node: NodeResult, g: Node, t: Node, gd: Dump, td: Dump, tolerance: float,
           run_low: str | None = None) -> list[str]:
    """Measure and flag one matched call (see the module docstring); returns the reasons that are output errors
    only (``_explain_inside`` may withdraw them)."""
    ac = t.autocast
    dts = [x.dtype for x in (*t.tensor_inputs, *t.outputs) if x.is_float]
    cdt = thresholds.compute_dtype(dts, ac)
    lim = thresholds.limit(cdt, _reduction(t), scale=tolerance)
    node.compute_dtype, node.limit = cdt, lim.rel_l2
    gin, tin = g.tensor_inputs, t.tensor_inputs
    if len(gin) == len(tin):
        node.inputs = _worst(list(zip(tin, gin, strict=True)), integers=True)
    else:
        node.inputs = {"input_count": [len(tin), len(gin)]}
    # parameters are inputs too: weights updated differently in an earlier step make every output differ
    params = _worst(_param_pairs(g, t))
    if (params.get("worst") or 0.0) > (node.inputs.get("worst") or 0.0):
        node.inputs = {**params, "parameters": True}
    if len(g.outputs) != len(t.outputs):
        node.reasons.append(f"{len(t.outputs)} outputs vs golden {len(g.outputs)}")
        node.flagged = True
        return []
    random = randomness.is_random(t)
    node.total = _worst(list(zip(t.outputs, g.outputs, strict=True)), integers=random)
    if node.total.get("shape_mismatch"):
        node.reasons.append(f"output shape {node.total['shape'][0]} vs golden {node.total['shape'][1]}")
    # tensor mode: real metrics
    full = [_tensor_local(gd, td, a, b) for a, b in zip(t.outputs, g.outputs, strict=True)]
    full = [f for f in full if f]
    if full:
        node.total = max(full, key=lambda m: m.get("rel_l2", 0.0))
    out_err = node.total.get("rel_l2", node.total.get("worst"))
    in_err = node.inputs.get("worst") if node.inputs else None
    inputs_agree = in_err is None or in_err <= lim.rel_l2
    numeric: list[str] = []  # reasons that are output errors only (a call inside may explain them)
    if out_err is not None and out_err > lim.rel_l2:
        if inputs_agree and random:
            node.not_comparable = True
            what = t.api or t.class_name or t.name
            node.note = (
                f"not comparable: {what} draws random numbers and the runs drew differently (output error "
                f"{out_err:.1e}); what follows inherits it"
            )
        elif inputs_agree:
            node.local = dict(node.total)
            node.reasons.append(
                f"output error {out_err:.2e} > limit {lim.rel_l2:.1e} for {cdt} while inputs agree "
                f"(input error {0.0 if in_err is None else in_err:.1e})"
            )
            numeric.append(node.reasons[-1])
        else:
            what = "parameters" if node.inputs.get("parameters") else "inputs"
            node.note = f"inherited: {what} already differ by {in_err:.1e}"
    elif out_err is not None:
        node.local = dict(node.total)
        if inputs_agree:
            before = len(node.reasons)
            _scale_check(node, g, t, cdt, lim, tolerance)
            numeric.extend(node.reasons[before:])
    # metadata
    for a, b in zip(t.outputs, g.outputs, strict=True):
        if (a.nan_count > 0) != (b.nan_count > 0) or (a.inf_count > 0) != (b.inf_count > 0):
            if inputs_agree:
                node.reasons.append(f"NaN/Inf: target {a.nan_count}/{a.inf_count} vs golden {b.nan_count}/{b.inf_count}")
            break
    for a, b in zip(t.outputs, g.outputs, strict=True):
        if a.is_float and b.is_float and a.dtype != b.dtype:
            allowed = {thresholds.canonical(b.dtype), thresholds.canonical(ac)} if ac else {b.dtype}
            allowed.add("torch.float32")
            if ac is None and g.autocast is None:
                allowed = {b.dtype}
            if thresholds.canonical(a.dtype) not in allowed:
                node.reasons.append(
                    f"dtype {a.dtype} where golden has {b.dtype}" + (f" and autocast is {ac}" if ac else "")
                )
                break
    gs, ts = _scalars(g), _scalars(t)
    diffs = []
    for k in sorted(set(gs) & set(ts)):
        gv, tv = gs[k], ts[k]
        if gv == tv:
            continue
        if isinstance(gv, (float, str, bool)) or isinstance(tv, (float, str, bool)):
            if isinstance(gv, (int, float)) and isinstance(tv, (int, float)) and not isinstance(gv, bool):
                # a constant rounded to the compute dtype (finfo(bf16).min vs finfo(fp32).min) is the same constant
                if abs(gv - tv) <= 2 * lim.eps * max(abs(gv), abs(tv)):
                    continue
                # a float the program computed at run time (``losses[k] = loss.item()``) from tensors of the
                # run's lowest precision carries their rounding: inherited, not a differing constant
                if isinstance(gv, float) and isinstance(tv, float) and run_low and run_low != cdt:
                    low = thresholds.limit(run_low, scale=tolerance)
                    if abs(gv - tv) <= low.rel_l2 * max(abs(gv), abs(tv)):
                        node.note = (node.note + "; " if node.note else "") + (
                            f"argument {k}={tv!r} vs golden {gv!r}: a value computed at run time, within the "
                            f"rounding of {run_low} the runs computed in (inherited)")
                        continue
            diffs.append(f"{k}={tv!r} vs golden {gv!r}")
        else:
            node.note = (node.note + "; " if node.note else "") + f"argument {k}={tv!r} vs golden {gv!r}"
    if diffs:
        node.reasons.append("arguments differ: " + ", ".join(diffs))
    node.flagged = bool(node.reasons)
    return numeric


def _param_pairs(g: Node, t: Node) -> list[tuple[TensorStats, TensorStats]]:
    """(target, golden) statistics of a module call's own parameters: by name, or in order when the migrated
    code renamed them (same count)."""
    if not g.params or not t.params:
        return []
    if set(g.params) == set(t.params):
        return [(t.params[k], g.params[k]) for k in t.params]
    if len(g.params) == len(t.params):
        return list(zip(t.params.values(), g.params.values(), strict=True))
    return []


def _explain_inside(nodes: list[NodeResult], numeric: dict[int, list[str]]) -> None:
    """A module whose inputs agree can still produce another output when the difference enters inside it: a
    random call whose draws differ (``not_comparable``), or a call whose parameters already differ (updated
    differently in an earlier step). That is no local error of the module: drop the output-only reasons of the
    modules enclosing such a call (other reasons, an argument or a dtype, stay)."""
    for n in nodes:
        if n.not_comparable:
            why = f"holds {n.name}, not comparable (random)"
        elif n.inputs and n.inputs.get("parameters") and (n.note or "").startswith("inherited"):
            why = f"holds {n.name}, whose parameters already differ"
        else:
            continue
        p, hops = n.parent, 0
        while p is not None and hops < len(nodes):
            a = nodes[p]
            own = numeric.get(p, [])
            if a.flagged and own and all(r in own for r in a.reasons):
                a.reasons = []
                a.flagged = False
                a.note = f"inherited: {why}"
            p, hops = a.parent, hops + 1


# a norm moved by more than NORM_NOISE * eps / sqrt(numel) is not rounding noise (measured: <= 4 on the suite)
NORM_NOISE = 16.0


def _scale_check(node: NodeResult, g: Node, t: Node, cdt: str, lim, tolerance: float) -> None:
    """Flag a scale error hidden inside the element-wise tolerance: the output's norm moved by more than rounding
    noise can move a norm (``NORM_NOISE * eps / sqrt(numel)``), by more than 4x what the inputs' norms moved,
    and the fingerprint does not contradict a scale (what is left after scaling it stays within half the
    element-wise limit or half the scale; ``metrics.scale_signature``)."""
    in_norm = 0.0
    for a, b in zip(t.tensor_inputs, g.tensor_inputs, strict=False):
        if a.is_float and b.is_float and a.norm is not None and b.norm and tuple(a.shape) == tuple(b.shape):
            in_norm = max(in_norm, abs(a.norm / b.norm - 1.0))
    floor = thresholds.limit("torch.float32", scale=tolerance).rel_l2
    for a, b in zip(t.outputs, g.outputs, strict=True):
        if not (a.is_float and b.is_float) or tuple(a.shape) != tuple(b.shape):
            continue
        sig = metrics.scale_signature(a, b)
        if sig is None:
            continue
        delta, resid = sig
        noise = NORM_NOISE * lim.eps / max(a.numel, 1) ** 0.5 * tolerance
        # the fingerprint must not contradict a scale: what is left after scaling stays within rounding noise
        if abs(delta) > max(noise, 4.0 * in_norm, floor) and resid <= max(abs(delta), lim.rel_l2) / 2:
            node.reasons.append(
                f"output scaled by {1 + delta:.4f} (norm {delta:+.2e}; {cdt} rounding moves it by at most "
                f"{noise:.1e}; inputs by {in_norm:.1e})"
            )
            return


def _kinds(x: TensorStats | ScalarArg) -> set[str]:
    """``{"NaN", "Inf"}``, the non-finite values a tensor (by its counts, or a NaN/infinite max or min: msprobe
    writes no counts) or a float argument holds."""
    out = set()
    if isinstance(x, ScalarArg):
        v = x.value
        if isinstance(v, float) and not math.isfinite(v):
            out.add("NaN" if math.isnan(v) else "Inf")
        return out
    ext = [v for v in (x.max, x.min) if v is not None]
    if x.nan_count > 0 or any(math.isnan(v) for v in ext):
        out.add("NaN")
    if x.inf_count > 0 or any(math.isinf(v) for v in ext):
        out.add("Inf")
    return out


def _kinds_of(items) -> set[str]:
    out: set[str] = set()
    for x in items:
        out |= _kinds(x)
    return out


def _counts(outs: list[TensorStats]) -> str:
    nan, inf = sum(t.nan_count for t in outs), sum(t.inf_count for t in outs)
    return f" ({nan} NaN, {inf} Inf)" if nan or inf else ""


def _introduced(n: Node) -> set[str]:
    """The non-finite values ``n``'s outputs hold that none of its inputs, parameters or arguments did: they
    appear in this call (an argument such as ``masked_fill(mask, -inf)`` puts them there on purpose)."""
    return _kinds_of(n.outputs) - _kinds_of(n.inputs) - _kinds_of(n.params.values())


def _nonfinite_findings(nodes: list[NodeResult], tn: list[Node], gn: list[Node], t2g: dict[int, int]) -> None:
    """A NaN or Inf in the target that the golden does not hold is a finding wherever it comes from: flag the call
    where it appears (its inputs finite, the golden's counterpart finite, or no counterpart at all: a call the golden
    never made). When it enters through the inputs of a call (from code that was not recorded, or an argument of a
    call the golden never made), the first call whose inputs and outputs hold what the golden's do not is flagged.
    A run whose loss is NaN is therefore never a match."""
    golden_kinds = _kinds_of(x for g in gn for x in g.outputs)
    found = False
    for ti, t in enumerate(tn):
        out = _kinds_of(t.outputs)
        if not out:
            continue
        node = nodes[ti]
        gi = t2g.get(ti)
        g = gn[gi] if gi is not None else None
        new = _introduced(t) - (_kinds_of(g.outputs) if g is not None else set())
        why = None
        if new and g is not None:
            why = (f"{'/'.join(sorted(new))} appears here{_counts(t.outputs)}: its inputs are finite, the golden's "
                   f"output is finite")
        elif new and not (new & golden_kinds):
            why = (f"{'/'.join(sorted(new))} appears here{_counts(t.outputs)}: its inputs are finite, and the golden "
                   "makes no such call")
        elif not found and g is not None:
            enters = _kinds_of((*t.inputs, *t.params.values())) - _kinds_of((*g.inputs, *g.params.values()))
            shows = (out & enters) - _kinds_of(g.outputs)
            if shows:
                why = (f"{'/'.join(sorted(shows))} reaches it through its inputs{_counts(t.outputs)} where the "
                       "golden's inputs and output are finite (from a call the golden never made, or code that was "
                       "not recorded)")
        if why is None:
            continue
        found = True
        node.reasons = [r for r in node.reasons if not r.startswith("NaN/Inf:")] + [why]
        node.flagged = True
        node.note = None if (node.note or "").startswith(("inherited", "not comparable")) else node.note
        node.not_comparable = False  # NaN drawn is no random draw


def _golden_nonfinite(gn: list[Node]) -> dict[str, Any] | None:
    """The first golden call whose outputs hold NaN/Inf that its inputs and arguments did not (lockstep's
    ``golden_nonfinite``): the reference itself is broken there."""
    bad = [g for g in gn if _introduced(g)]
    by_name = {g.name: g for g in gn}
    holders = set()
    for g in bad:  # a module holding the call where it appears is not where it appears
        p, hops = g.parent, 0
        while p and p in by_name and hops < len(gn):
            holders.add(p)
            p, hops = by_name[p].parent, hops + 1
    for g in bad:
        if g.name not in holders:
            return {"call": g.name, "module": g.module_path, "nan": sum(t.nan_count for t in g.outputs),
                    "inf": sum(t.inf_count for t in g.outputs), "source": g.source}
    return None


def _load(d: Dump | str | Path, step: int | None, rank: int | None) -> Dump:
    return d if isinstance(d, Dump) else load_dump(d, step=step, rank=rank)


def compare_dumps(
    golden: Dump | str | Path,
    target: Dump | str | Path,
    *,
    step: int | None = None,
    rank: int | None = None,
    tolerance: float = 1.0,
) -> ComparisonResult:
    """Compare the forward nodes of two dumps (see the module docstring). ``golden``/``target`` are ``Dump``
    objects or paths ``load_dump`` accepts; ``tolerance`` multiplies every limit."""
    gd, td = _load(golden, step, rank), _load(target, step, rank)
    gn, tn = gd.forward(), td.forward()
    if not gn:
        raise DumpError(gd.root, "the golden dump holds no forward nodes")
    if not tn:
        raise DumpError(td.root, "the target dump holds no forward nodes")
    gk, tk = _keys(gn), _keys(tn)
    m = matching.match_calls(gk, tk)
    g_mod = [i for i, k in enumerate(gk) if k.kind == "module"] or list(range(len(gk)))
    matched_g = {g for g, _ in m.pairs}
    share = sum(1 for i in g_mod if i in matched_g) / len(g_mod)
    if share < MIN_MATCHED_SHARE:
        raise DumpError(
            td.root,
            f"not a dump of the same model as {gd.root}: only {share:.0%} of the golden's {len(g_mod)} module "
            "calls find a counterpart in it (compare dumps of one model, or use --model for two implementations)",
        )
    t2g = m.target_to_golden()
    index = {n.name: i for i, n in enumerate(tn)}
    parents = [index.get(n.parent) if n.parent else None for n in tn]
    aliased = matching.alias_wrappers(tk, parents, t2g)
    nodes: list[NodeResult] = []
    numeric: dict[int, list[str]] = {}
    run_low = run_precision(gd, td)
    for ti, t in enumerate(tn):
        node = NodeResult(
            name=t.name,
            kind=t.kind,
            module=t.module_path,
            api=t.api,
            class_name=t.class_name,
            order=ti,
            depth=tk[ti].depth,
            parent=index.get(t.parent) if t.parent else None,
            source=t.source,
        )
        nodes.append(node)
        gi = t2g.get(ti)
        if gi is None:
            node.note = matching.explain_unmatched(tk, ti, "target")
            continue
        node.golden_name = gn[gi].name
        if ti in aliased:
            node.note = f"wrapper level: compared with golden {gn[gi].name}"
        numeric[ti] = _judge(node, gn[gi], t, gd, td, tolerance, run_low)
    _explain_inside(nodes, numeric)
    _nonfinite_findings(nodes, tn, gn, t2g)
    result = ComparisonResult(
        mode="dump",
        golden=f"{gd.root} ({gd.framework}, {gd.level}, {gd.mode}, step {gd.step}, rank {gd.rank})",
        target=f"{td.root} ({td.framework}, {td.level}, {td.mode}, step {td.step}, rank {td.rank})",
        nodes=nodes,
        unmatched_golden=[
            {"name": gn[i].name, "reason": matching.explain_unmatched(gk, i, "golden")} for i in m.unmatched_golden
        ],
        unmatched_target=[
            {"name": tn[i].name, "reason": nodes[i].note} for i in m.unmatched_target if i not in aliased
        ],
        meta={
            "golden_root": gd.root,
            "target_root": td.root,
            "golden_framework": gd.framework,
            "target_framework": td.framework,
            "level": [gd.level, td.level],
            "mode": [gd.mode, td.mode],
            "step": [gd.step, td.step],
            "rank": [gd.rank, td.rank],
            "tolerance": tolerance,
            "golden_meta": gd.meta,
            "target_meta": td.meta,
        },
        golden_nonfinite=_golden_nonfinite(gn),
    )
    _autocast_policy(result, td)
    return result


def _autocast_policy(result: ComparisonResult, td: Dump) -> None:
    """Which target API calls ran in another dtype than CUDA autocast would have (``autocast_policy``)."""
    if not any(n.autocast for n in td.nodes):
        return
    from ascendify.precision import autocast_policy

    try:
        ap = autocast_policy.dump_differences(td)
    except Exception as e:  # an explanation, never a reason to lose the comparison
        ap = {"error": f"{type(e).__name__}: {e}", "calls": []}
    if ap is not None:
        result.meta["autocast_policy"] = ap
