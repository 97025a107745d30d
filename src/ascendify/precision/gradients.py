"""Backward in lockstep: one backward on both sides, gradients compared module call by module call.

With ``compare_models(..., backward=True)`` both forward runs keep their autograd graphs, and:

* every float tensor a module call receives passes through a *tap* (an identity autograd function that clones it
  and keeps the gradient flowing back through it): the gradient that call gives back to its inputs, its share
  only, even when the input is also used elsewhere (a residual);
* every float tensor a module call returns passes through a tap too: the gradient its users outside the call
  give it (a tensor hook would also count a use inside the call);
* one loss per side (``loss_fn(outputs)``, default the mean of the squared float outputs, computed in float32)
  and one ``backward()``; parameter gradients are collected and the models' own ``.grad`` restored after.

Each matched module call becomes a *backward node* (``phase="backward"``), in backward order (the reverse of the
order in which the forward calls finished), with the same noise model as forward:

* ``inputs``: the gradient the call received, target against golden (inherited error);
* ``total``: the gradients it gave (to its inputs and to its own parameters) as they came out of the real runs;
* ``local``: the call re-run on the *golden* inputs and backpropagated from the *golden* incoming gradient, in the
  target setting (device, dtype, autocast), against the golden's gradients for the same call: the error its own
  backward adds. Only calls whose total is over the limit (or where a gradient is missing) are re-run: a call
  whose real gradients agree cannot be the culprit.

A node is flagged on its local error (over the limit for the dtype it computed in, widened by
``BACKWARD_FACTOR``), or when a gradient exists on one side only in the re-run (a ``.detach()``, a
``torch.no_grad()`` or a frozen parameter inside the call's own code). Parameters whose gradient is missing on
one side in the real runs are listed as findings (``ComparisonResult.missing_grads``) even when the cut lies
elsewhere. The loss is a node of its own (``"(loss)"``, first in backward order): the loss functions' gradients
with respect to the golden outputs, compared, name a loss scale that was not undone.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ascendify.precision import metrics, thresholds
from ascendify.precision.divergence import NodeResult

# backward limits over forward ones: a backward computes two products per layer (input and weight gradients),
# the weight gradient reducing over every token; calibrated on the clean twins of tests/precision (see the docs)
BACKWARD_FACTOR = 2.0
# in a lower precision than the golden's, the device check's limit is widened again: a clamp, a ReLU or a rounding
# inside a composite module flips gradients wherever rounding moved its input across the edge, and the flips are
# spread over every input by the layers below (a clean bf16 twin with clamps reaches 2.4x the plain limit); the
# code check (the target's code in the golden setting, untrimmed, at the golden's limit) is what names a defect in
# backward code there
LOW_PRECISION_FACTOR = 4.0
# a tensor's gradient error is measured against at least this share of its part of the call's whole gradient
# (see _floor)
FLOOR_SHARE = 0.1


class LossError(ValueError):
    """The loss cannot be backpropagated: ``loss_fn`` returned no scalar tensor, or the outputs carry no
    gradient."""


class _Tap(torch.autograd.Function):
    """Identity that clones its input (a clone: the module may modify it in place) and stores the gradient that
    flows back through it in ``store[key]``."""

    @staticmethod
    def forward(ctx, x, store, key):
        ctx.store, ctx.key = store, key
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.store[ctx.key] = g.detach()
        return g, None, None


def _tensors(obj) -> list[torch.Tensor]:
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def _wants_grad(x) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad and (x.is_floating_point() or x.is_complex())


def tap_inputs(args, kwargs, store: dict) -> tuple[tuple, dict, list[int]]:
    """``args``/``kwargs`` with every tensor that requires a gradient passed through a tap (positions counted
    over the call's tensors in flattening order); returns them and the tapped positions."""
    flat, spec = tree_flatten((args, kwargs))
    out, tapped, pos = [], [], -1
    for x in flat:
        if isinstance(x, torch.Tensor):
            pos += 1
            if _wants_grad(x):
                x = _Tap.apply(x, store, pos)
                tapped.append(pos)
        out.append(x)
    a, k = tree_unflatten(out, spec)
    return a, k, tapped


def tap_outputs(out, store: dict):
    """``out`` with every tensor that requires a gradient passed through a tap: ``store[position]`` receives the
    gradient its users outside the module give it (a tensor hook would also count a use inside the module: a
    model that returns its last hidden state and a pooling of it)."""
    flat, spec = tree_flatten(out)
    pos, changed = -1, False
    for i, x in enumerate(flat):
        if isinstance(x, torch.Tensor):
            pos += 1
            if _wants_grad(x):
                flat[i] = _Tap.apply(x, store, pos)
                changed = True
    return tree_unflatten(flat, spec) if changed else None


def default_loss(out) -> torch.Tensor:
    """The mean of the squared float outputs (all of them, as one vector), in float32."""
    ts = [t for t in _tensors(out) if t.is_floating_point() and t.requires_grad]
    if not ts:
        raise LossError("backward: the model's output holds no floating tensor with a gradient (nothing to "
                         "backpropagate: is it computed under torch.no_grad() or detached?)")
    n = sum(t.numel() for t in ts)
    return sum(t.float().pow(2).sum() for t in ts) / max(n, 1)


def loss_fns(loss_fn) -> tuple[Any, Any]:
    """``(golden loss, target loss)``: one callable for both, a pair, or None (:func:`default_loss`)."""
    if loss_fn is None:
        return default_loss, default_loss
    if isinstance(loss_fn, (tuple, list)):
        if len(loss_fn) != 2 or not all(callable(f) for f in loss_fn):
            raise ValueError("loss_fn must be a callable or a pair (golden loss, target loss) of callables")
        return loss_fn[0], loss_fn[1]
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be a callable (outputs -> scalar tensor), not {type(loss_fn).__name__}")
    return loss_fn, loss_fn


def check_loss(loss, side: str) -> torch.Tensor:
    """``loss`` if it is a scalar floating tensor with a gradient, else a ``ValueError`` saying what it is."""
    if not isinstance(loss, torch.Tensor):
        raise LossError(f"loss_fn must return a scalar tensor; on the {side} it returned a {type(loss).__name__}")
    if loss.numel() != 1:
        raise LossError(f"loss_fn must return a scalar tensor (one element); on the {side} it returned a tensor "
                         f"of shape {tuple(loss.shape)}: reduce it (.mean() or .sum())")
    if not loss.is_floating_point():
        raise LossError(f"loss_fn must return a floating tensor; on the {side} it returned {loss.dtype}")
    if not loss.requires_grad:
        raise LossError(f"the loss on the {side} does not depend on anything with a gradient (computed under "
                         "torch.no_grad(), or from detached outputs)")
    return loss.reshape(())


@dataclass
class SideGrads:
    """One side's backward: the loss value, each parameter's gradient by ``id`` (None: no gradient), the frozen
    parameters (``requires_grad=False``), and the model's parameter names by ``id``."""

    loss: float
    grads: dict[int, torch.Tensor | None] = field(default_factory=dict)
    frozen: set[int] = field(default_factory=set)
    names: dict[int, str] = field(default_factory=dict)


def run_backward(model: torch.nn.Module, loss: torch.Tensor) -> SideGrads:
    """``loss.backward()`` with the model's own ``.grad`` kept aside and restored; returns the gradients."""
    params = list(model.named_parameters(remove_duplicate=True))
    saved = [(p, p.grad) for _, p in params]
    for _, p in params:
        p.grad = None
    try:
        loss.backward()
        res = SideGrads(loss=float(loss.detach()))
        for n, p in params:
            res.names[id(p)] = n
            if not p.requires_grad:
                res.frozen.add(id(p))
            res.grads[id(p)] = p.grad.detach().clone() if p.grad is not None else None
        return res
    finally:
        for p, g in saved:
            p.grad = g


def _own_params(module) -> list[tuple[str, torch.nn.Parameter]]:
    return list(module.named_parameters(recurse=False)) if isinstance(module, torch.nn.Module) else []


def _pair_params(tmod, gmod) -> list[tuple[str, Any, Any]]:
    """``(target local name, target param, golden param)`` for the call modules' own parameters: by name, else by
    order where the shapes agree."""
    tp, gp = _own_params(tmod), _own_params(gmod)
    gd = dict(gp)
    if all(n in gd for n, _ in tp):
        return [(n, p, gd[n]) for n, p in tp]
    if len(tp) == len(gp) and all(a.shape == b.shape for (_, a), (_, b) in zip(tp, gp, strict=True)):
        return [(n, p, q) for (n, p), (_, q) in zip(tp, gp, strict=True)]
    return [(n, p, gd.get(n)) for n, p in tp]


def _metric(t, g, cdt: str) -> dict[str, Any]:
    if t.shape != g.shape and t.numel() != g.numel():
        return {"shape_mismatch": True, "shape": [list(t.shape), list(g.shape)], "rel_l2": float("inf")}
    return metrics.tensor_metrics(t.detach().float().cpu().reshape(g.shape), g.detach().float().cpu(), cdt)


def _fast_metric(t, g, cdt: str) -> dict[str, Any]:
    """Relative L2 only, in float32, one pass: the screening of the real runs' gradients (every call, so it must
    cost little); the full metrics where it is not finite (NaN/Inf placement then matters) or shapes differ."""
    if t.numel() != g.numel():
        return _metric(t, g, cdt)
    a = t.detach().to("cpu", torch.float32).reshape(-1)
    b = g.detach().to("cpu", torch.float32).reshape(-1)
    nb = float(torch.linalg.vector_norm(b))
    d = float(torch.linalg.vector_norm(a - b))
    if not (math.isfinite(nb) and math.isfinite(d)):
        return _metric(t, g, cdt)
    return {"rel_l2": (0.0 if d == 0.0 else math.inf) if nb == 0.0 else d / nb}


def _scale_hint(m: dict[str, Any], t, g) -> str:
    """``"; target is 128x golden's"`` when the two gradients point the same way and differ by a factor."""
    if m.get("cosine", 0) < 0.9999:
        return ""
    gn = float(g.detach().double().norm())
    if gn == 0:
        return ""
    r = float(t.detach().cpu().double().norm()) / gn
    return f" (the target's is {r:.4g}x the golden's: a scale)" if abs(r - 1) > 1e-3 else ""


@dataclass
class _Grads:
    """Gradients a call gave: per input position and per own parameter (target local name)."""

    inputs: dict[int, torch.Tensor | None] = field(default_factory=dict)
    params: dict[str, torch.Tensor | None] = field(default_factory=dict)


def _judged(m: dict[str, Any]) -> float:
    """The error a node is judged on: the trimmed relative L2 where computed (device check in a lower precision
    than the golden's), else the relative L2."""
    v = m.get("trimmed_rel_l2", m.get("rel_l2", 0.0))
    return float(v) if v is not None else 0.0


def _compare(t: _Grads, g: _Grads, cdt: str, where: str, trim: bool = False, fast: bool = False
             ) -> tuple[dict[str, Any] | None, list[str], dict]:
    """Worst metrics over the gradients present on both sides (with ``trim``, judged on
    ``metrics.trimmed_rel_l2``), the reasons for those present on one side only, and per-parameter relative L2."""
    worst, reasons, per = None, [], {}
    items = [(f"input {p}", t.inputs.get(p), g.inputs.get(p)) for p in sorted(set(t.inputs) | set(g.inputs))]
    items += [(f"parameter {n}", t.params.get(n), g.params.get(n)) for n in t.params]
    # the call's whole golden gradient, for the floor below
    sq = n_all = 0.0
    for _, a, b in items:
        if a is not None and b is not None:
            v = float(torch.linalg.vector_norm(b.detach().float()))
            if math.isfinite(v):
                sq += v * v
                n_all += b.numel()
    rms_all = math.sqrt(sq / n_all) if n_all else 0.0
    for label, a, b in items:
        if a is None and b is None:
            continue
        if a is None or b is None:
            side = "target" if a is None else "golden"
            reasons.append(f"{where}: gradient of {label} missing on the {side} (present on the other)")
            continue
        m = _fast_metric(a, b, cdt) if fast else _metric(a, b, cdt)
        m["of"] = label
        if trim and not fast and not m.get("shape_mismatch"):
            m["trimmed_rel_l2"] = metrics.trimmed_rel_l2(a.detach().float().cpu().reshape(b.shape), b)
        _floor(m, a, b, rms_all)
        if label.startswith("parameter "):
            per[label[10:]] = m.get("rel_l2")
        if m.get("shape_mismatch"):
            reasons.append(f"{where}: gradient of {label} has shape {m['shape'][0]} vs golden {m['shape'][1]}")
            continue
        ni = m.get("nan_inf") or {}
        if ni and not ni.get("agree", True):
            reasons.append(f"{where}: NaN/Inf in the gradient of {label} differ")
        if worst is None or not (_judged(m) <= _judged(worst)):
            worst = m
            worst["_pair"] = (a, b)
    return worst, reasons, per


def _floor(m: dict[str, Any], a, b, rms_all: float) -> None:
    """Relative errors against at least ``FLOOR_SHARE`` of the tensor's share of the call's whole gradient. A
    gradient that is zero in exact arithmetic (an attention key's bias: softmax ignores a constant added to every
    key) is rounding noise on both sides, and relative to itself any two noises differ by 100%."""
    nb = float(torch.linalg.vector_norm(b.detach().float()))
    floor = FLOOR_SHARE * rms_all * math.sqrt(b.numel())
    if not (math.isfinite(nb) and floor > nb) or m.get("shape_mismatch"):
        return
    d = float(torch.linalg.vector_norm(a.detach().to("cpu", torch.float32).reshape(b.shape) - b.detach().float().cpu()))
    if not math.isfinite(d):
        return
    m["floored"] = True
    m["rel_l2"] = d / floor
    if "trimmed_rel_l2" in m:
        t = m["trimmed_rel_l2"]
        m["trimmed_rel_l2"] = t * nb / floor if (nb > 0 and math.isfinite(t)) else d / floor


def _strip(m: dict[str, Any] | None) -> dict[str, Any]:
    if not m:
        return {}
    return {k: v for k, v in m.items() if k != "_pair"}


def _rerun_backward(call, module, args, kwargs, gout: dict, want: list[int], ctx) -> _Grads:
    """Run ``module`` on ``args``/``kwargs`` (fresh leaves; those at positions ``want`` require a gradient) with
    grad on, backpropagate ``gout`` (position -> incoming gradient) and return the gradients it gives; buffers
    restored afterwards."""
    flat, spec = tree_flatten((args, kwargs))
    pos, leaves = -1, {}
    for i, x in enumerate(flat):
        if isinstance(x, torch.Tensor):
            pos += 1
            if pos in want and (x.is_floating_point() or x.is_complex()):
                flat[i] = x.detach().requires_grad_(True)
                leaves[pos] = flat[i]
    a, k = tree_unflatten(flat, spec)
    bufs = [(b, b.detach().clone()) for b in module.buffers()] if isinstance(module, torch.nn.Module) else []
    res = _Grads()
    try:
        with torch.enable_grad(), ctx:
            out = module(*a, **k)
        outs = _tensors(out)
        sel, grads_out = [], []
        for p, g in gout.items():
            if p < len(outs) and _wants_grad(outs[p]):
                o = outs[p]
                sel.append(o)
                grads_out.append(g.to(device=o.device, dtype=o.dtype).reshape(o.shape))
        params = [(n, p) for n, p in _own_params(module) if p.requires_grad]
        wrt = list(leaves.values()) + [p for _, p in params]
        if sel and wrt:
            got = torch.autograd.grad(sel, wrt, grads_out, allow_unused=True)
        else:
            got = [None] * len(wrt)
    finally:
        # after the backward: an eval-mode BatchNorm saves its running statistics for it, and restoring them
        # in place before would bump their version
        with torch.no_grad():
            for b, saved in bufs:
                b.copy_(saved)
    for (p, _), g in zip(leaves.items(), got[: len(leaves)], strict=True):
        res.inputs[p] = g
    for (n, _), g in zip(params, got[len(leaves):], strict=True):
        res.params[n] = g
    for n, _p in _own_params(module):
        res.params.setdefault(n, None)  # frozen in this model
    return res


def backward_nodes(grec, trec, t2g: dict[int, int], fwd_nodes: list[NodeResult], gside: SideGrads,
                   tside: SideGrads, *, convert, golden_in, t_ctx, target_device, target_dtype, tolerance: float,
                   leaves: list[int], reduction, ref=None, golden_dtype: str = "torch.float32"
                   ) -> tuple[list[NodeResult], list[dict[str, Any]]]:
    """The backward nodes (see the module docstring) for the matched module calls, in backward order, and the
    parameters whose gradient is missing on one side of the real runs.

    Where the target computes in a lower precision than the golden, the device check is judged on the trimmed
    relative L2 (``metrics.trimmed_rel_l2``: a clamp's or a ReLU's gradient flips where rounding moved an input
    across its edge) and a *code check* runs the call's backward again with ``ref`` (the target's code in the
    golden setting) against the golden's, untrimmed, at the golden dtype's limit: a defect in the backward's
    code shows there at full precision."""
    n_fwd = len(fwd_nodes)
    # calls that share a module or a parameter: their golden per-call gradients come from a re-run, not the totals
    uses: dict[int, int] = {}
    for c in grec.calls:
        if c.kind == "module":
            for _, p in _own_params(c.module):
                uses[id(p)] = uses.get(id(p), 0) + 1
    order = sorted((i for i, c in enumerate(trec.calls) if c.kind == "module" and i in t2g),
                   key=lambda i: -trec.calls[i].end)
    index = {ti: k for k, ti in enumerate(order)}
    nodes: list[NodeResult] = []
    missing: list[dict[str, Any]] = []
    seen_params: set[int] = set()
    for k, ti in enumerate(order):
        tc = trec.calls[ti]
        gc = grec.calls[t2g[ti]]
        fn = fwd_nodes[ti]
        parent = tc.parent
        while parent is not None and parent not in index:
            parent = trec.calls[parent].parent
        node = NodeResult(
            name=f"{fn.name} [backward]", kind="module", module=fn.module, class_name=fn.class_name,
            golden_name=f"{fn.golden_name} [backward]", order=n_fwd + 1 + k, depth=fn.depth,
            parent=(1 + index[parent]) if parent is not None else None, source=fn.source, defined_at=fn.defined_at,
            compute_dtype=fn.compute_dtype, phase="backward",
        )
        cdt = fn.compute_dtype or "torch.float32"
        red = reduction(tc.module)
        tokens = max((t.numel() // max(t.shape[-1], 1) for t in _tensors(tc.out) if t.dim() >= 1), default=1)
        spread = max(1.0, (leaves[ti] / 4.0) ** 0.5)
        lim = thresholds.limit(cdt, max(red or 1, tokens), scale=tolerance * spread * BACKWARD_FACTOR).rel_l2
        node.limit = lim
        trim = thresholds.canonical(cdt) != thresholds.canonical(golden_dtype)
        screen = lim  # re-run (device and code checks) where the real gradients are over the plain limit
        if trim:
            lim *= LOW_PRECISION_FACTOR
            node.limit = lim
        pairs = _pair_params(tc.module, gc.module)
        # the gradient it received
        ins = [_fast_metric(tc.gout[p], gc.gout[p], cdt) for p in gc.gout if p in tc.gout]
        node.inputs = max(ins, key=lambda m: m.get("rel_l2", 0.0)) if ins else None
        # the gradients it gave, in the real runs
        tg = _Grads(inputs={p: tc.gin.get(p) for p in set(tc.tapped) | set(gc.tapped)},
                    params={n: tside.grads.get(id(tp)) for n, tp, _ in pairs})
        gg = _Grads(inputs={p: gc.gin.get(p) for p in set(tc.tapped) | set(gc.tapped)},
                    params={n: (gside.grads.get(id(gp)) if gp is not None else None) for n, _, gp in pairs})
        tot, tot_reasons, per_total = _compare(tg, gg, cdt, "real runs", fast=True)
        node.total = _strip(tot)
        for n, tp, gp in pairs:
            if id(tp) in seen_params:
                continue
            seen_params.add(id(tp))
            a, b = tside.grads.get(id(tp)), gside.grads.get(id(gp)) if gp is not None else None
            if (a is None) != (b is None):
                full = f"{tc.path}.{n}" if tc.path else n
                side = "target" if a is None else "golden"
                why = "requires_grad=False" if (id(tp) in tside.frozen if a is None else
                                                id(gp) in gside.frozen) else "no gradient reached it"
                missing.append({"name": full, "owner": tc.path, "side": side, "why": why})
        over = tot is not None and not (_judged(tot) <= screen)
        if not gc.gout:
            node.note = "the golden gave this call's output no gradient: nothing to compare"
            node.grads = {n: {"total": v} for n, v in per_total.items()}
            nodes.append(node)
            continue
        if not (over or tot_reasons):
            node.local = dict(node.total)
            node.note = "the real gradients agree within the limit (not re-run; local error at most this)"
            node.grads = {n: {"total": v} for n, v in per_total.items()}
            nodes.append(node)
            continue
        # local: the call on the golden inputs, backpropagated from the golden incoming gradient
        try:
            a = convert(golden_in(tc.args, gc.args), tc.args)
            kw = convert(golden_in(tc.kwargs, gc.kwargs), tc.kwargs)
            want = sorted(gc.tapped)
            tl = _rerun_backward(tc, tc.module, a, kw, gc.gout, want, t_ctx())
            once = grec.counts.get(gc.path, 1) == 1 and all(uses.get(id(gp), 0) <= 1 for _, _, gp in pairs
                                                             if gp is not None)
            if once:
                gl = _Grads(inputs={p: gc.gin.get(p) for p in want},
                            params={n: (gside.grads.get(id(gp)) if gp is not None else None) for n, _, gp in pairs})
            else:
                gr = _rerun_backward(gc, gc.module, golden_in(gc.args, gc.args), golden_in(gc.kwargs, gc.kwargs),
                                     gc.gout, want, contextlib.nullcontext())
                gl = _Grads(inputs=gr.inputs, params={n: gr.params.get(gn) for (n, _, gp), gn in
                                                      zip(pairs, _golden_names(gc.module, pairs), strict=True)})
            loc, loc_reasons, per_local = _compare(tl, gl, cdt, "re-run on golden inputs and gradient", trim)
            code = None
            rmod = _submodule(ref, tc.path) if (ref is not None and trim) else None
            if rmod is not None:
                rl = _rerun_backward(tc, rmod, golden_in(tc.args, gc.args), golden_in(tc.kwargs, gc.kwargs), gc.gout,
                                     want, contextlib.nullcontext())
                code, code_reasons, _ = _compare(rl, gl, golden_dtype, "target code in the golden setting")
                node.code = _strip(code)
                node.code_limit = thresholds.limit(golden_dtype, max(red or 1, tokens),
                                                   scale=tolerance * spread * BACKWARD_FACTOR).rel_l2
                loc_reasons += [r for r in code_reasons if r not in loc_reasons]
        except Exception as e:  # noqa: BLE001 (the call refuses the golden inputs: report, do not guess)
            node.reasons.append(f"could not re-run the backward on golden inputs: {type(e).__name__}: {e}")
            node.flagged = True
            nodes.append(node)
            continue
        node.local = _strip(loc)
        node.grads = {n: {"total": per_total.get(n), "local": per_local.get(n)} for n in per_total | per_local}
        if loc is not None and not (_judged(loc) <= lim):
            hint = _scale_hint(loc, *loc["_pair"])
            what = "trimmed local error" if "trimmed_rel_l2" in loc else "local error"
            node.reasons.append(f"gradient of {loc.get('of')}: {what} {_judged(loc):.2e} > limit {lim:.1e} for {cdt} "
                                f"(cosine {loc.get('cosine', 1):.6f}){hint}")
        if code is not None and node.code_limit is not None and not (_judged(code) <= node.code_limit):
            hint = _scale_hint(code, *code["_pair"])
            node.reasons.append(f"gradient of {code.get('of')}: the target's code differs from the golden in "
                                f"{golden_dtype}: {_judged(code):.2e} > {node.code_limit:.1e} "
                                f"(cosine {code.get('cosine', 1):.6f}){hint}")
        node.reasons += loc_reasons
        node.flagged = bool(node.reasons)
        nodes.append(node)
    return nodes, missing


def _submodule(model, path: str):
    try:
        return model.get_submodule(path) if path else model
    except AttributeError:
        return None


def _golden_names(gmod, pairs) -> list[str | None]:
    names = {id(p): n for n, p in _own_params(gmod)}
    return [names.get(id(gp)) if gp is not None else None for _, _, gp in pairs]


def loss_node(g_out, t_out_like, g_loss_fn, t_loss_fn, *, n_fwd: int, target_device, convert,
              tolerance: float, root_t, root_g) -> NodeResult:
    """The loss as a node: both loss functions' gradients with respect to the *golden* outputs (the target's on
    the target device, in the target outputs' dtypes), and the gradients the two models' outputs really got."""
    # the target's loss sees outputs in the dtype the target produced them (bf16 under autocast): its limit
    cdt = thresholds.compute_dtype([str(t.dtype) for t in _tensors(t_out_like) if t.is_floating_point()])
    node = NodeResult(name="(loss)", kind="loss", module=None, class_name=None, golden_name="(loss)",
                      order=n_fwd, phase="backward", compute_dtype=cdt)
    node.limit = thresholds.limit(cdt, scale=tolerance * BACKWARD_FACTOR).rel_l2

    def grads(fn, out):
        flat, spec = tree_flatten(out)
        leaves = []
        for i, x in enumerate(flat):
            if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
                flat[i] = x.detach().requires_grad_(True)
                leaves.append(flat[i])
        with torch.enable_grad():
            loss = check_loss(fn(tree_unflatten(flat, spec)), "golden outputs")
            return torch.autograd.grad(loss, leaves, allow_unused=True)

    try:
        gg = grads(g_loss_fn, g_out)
        tg = grads(t_loss_fn, convert(g_out, t_out_like))
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001
        node.reasons.append(f"could not evaluate the loss on the golden outputs: {type(e).__name__}: {e}")
        node.flagged = True
        return node
    t = _Grads(inputs=dict(enumerate(tg)))
    g = _Grads(inputs=dict(enumerate(gg)))
    loc, reasons, _ = _compare(t, g, cdt, "loss", fast=True)
    if reasons or (loc is not None and not (loc.get("rel_l2", 0.0) <= node.limit)):
        loc, reasons, _ = _compare(t, g, cdt, "loss")  # the full metrics (cosine, scale) where it matters
    node.local = _strip(loc)
    if root_t is not None and root_g is not None:
        tot, _, _ = _compare(_Grads(inputs=dict(root_t.gout)), _Grads(inputs=dict(root_g.gout)), cdt, "loss",
                             fast=True)
        node.total = _strip(tot)
    le = (loc or {}).get("rel_l2")
    if le is not None and not (le <= node.limit):  # untrimmed: a loss function has no edges to excuse
        hint = _scale_hint(loc, *loc["_pair"])
        node.reasons.append(f"gradient of the loss w.r.t. output {loc.get('of', '')[6:]}: {le:.2e} > limit "
                            f"{node.limit:.1e} for {cdt}{hint or ' (the loss functions differ)'}"
                            + (": a loss scale not undone?" if hint else ""))
    node.reasons += reasons
    node.flagged = bool(node.reasons)
    return node


def summary(result) -> dict[str, Any]:
    """The backward part of a lockstep result in a few keys (``verdict``, ``compared`` backward calls, ``differ``:
    the flagged backward calls with their local error and limit, ``missing``: parameters with a gradient on one side
    only, ``first``: the first backward divergence's module), or ``{"skipped": why}`` without a backward."""
    back = [n for n in result.nodes if n.phase == "backward"]
    if not back:
        return {"skipped": "no backward was run"}
    from ascendify.precision.divergence import culprits

    # parents index the whole node list (forward nodes first): culprits over it, then the backward ones
    cul = {id(result.nodes[i]) for i in culprits(result.nodes) if result.nodes[i].phase == "backward"}
    differ = [{"name": n.module if n.kind != "loss" else "(loss)", "call": n.name, "rel_l2": n.local_error,
               "limit": n.limit, "culprit": id(n) in cul, "why": "; ".join(n.reasons)}
              for n in back if n.flagged]
    firsts = [n for n in back if id(n) in cul]
    fd = min(firsts, key=lambda n: n.order) if firsts else None
    meta = result.meta.get("backward") or {}
    return {"verdict": "divergence" if differ or result.missing_grads else "match", "compared": len(back),
            "loss": meta.get("loss"), "golden_loss": meta.get("golden_loss"), "target_loss": meta.get("target_loss"),
            "compute_dtype": next((n.compute_dtype for n in back if n.kind == "loss"), None),
            "limit": next((n.limit for n in back if n.kind == "loss"), None),
            "differ": differ, "missing": list(result.missing_grads),
            "first": (fd.module if fd.kind != "loss" else "(loss)") if fd is not None else None}
