"""Hand-written computations that one torch_npu fused operator does, recognised from a step's op sequence.

Nothing is read from names in the code: each finder follows the dataflow of one step's forward ops (which op made
each tensor, by the tensors' identities in the trace) and matches the computation's shape:

* **RMSNorm**: ``x² → mean(last dim, keepdim) → + eps → rsqrt → x · r [→ · weight]`` (or ``x / sqrt(...)``); the
  same ops make ``nn.RMSNorm`` and ``F.rms_norm``, which torch_npu 2.13 runs as those small ops too (``rms_norm``
  has no NPU kernel of its own: it is composite in torch);
* **rotary embedding**: ``x·cos + rotate(x)·sin`` where ``rotate`` is ``cat(-x₂, x₁)`` of the two halves of ``x``
  (``half`` mode) or the interleaved ``stack(-x[..., 1::2], x[..., ::2])`` (``interleave``), or the complex form
  ``view_as_real(view_as_complex(x) · freqs)``;
* **SwiGLU**: ``silu(a) · b`` with ``a`` and ``b`` of one shape;
* **attention as softmax(QKᵀ)V**: a ``bmm`` whose result (scaled, masked) feeds a last-dim ``softmax`` whose
  result (after dropout) is the left operand of another ``bmm``.

Each match gives the indices of the ops it covers (in ``trace.ops``), the user's lines they ran at, the shapes, and
the replacement (``data/npu_fused_ops.json``). :func:`find_all` runs every finder on one step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascendify.advise.trace import FWD, Op, Trace

# ops a value passes through unchanged in meaning (layout, dtype, views)
TRANSPARENT = frozenset({"view", "_unsafe_view", "expand", "t", "transpose", "permute", "clone", "_to_copy",
                         "alias", "unsqueeze", "squeeze", "reshape", "contiguous", "_reshape_alias", "detach",
                         "lift_fresh", "expand_as", "type_as"})
SCALE = frozenset({"mul", "div", "add", "sub", "masked_fill", "masked_fill_", "where", "mul_", "div_", "add_",
                   "_masked_softmax"})
DROPOUT = frozenset({"native_dropout", "dropout", "bernoulli_", "mul", "_fused_dropout", "feature_dropout"})


@dataclass
class Match:
    kind: str  # "rms_norm" | "rotary" | "swiglu" | "attention"
    ops: list[int]  # indices in trace.ops
    sites: list[int]  # distinct user sites of those ops, in order
    anchor: int  # the site the finding names (the line doing the core computation)
    shape: tuple
    dtype: str
    detail: dict[str, Any] = field(default_factory=dict)


class StepGraph:
    """The dataflow of one step: for each op, which op produced each of its tensor inputs, and who consumes it."""

    def __init__(self, trace: Trace, step: int, phase: str | None = FWD):
        self.trace = trace
        self.idx = [i for i, o in enumerate(trace.ops) if o.step == step and (phase is None or o.phase == phase)]
        self.ops = [trace.ops[i] for i in self.idx]
        self.producer: list[tuple[int | None, ...]] = []
        self.consumers: dict[int, list[int]] = {}
        last: dict[int, int] = {}
        for k, o in enumerate(self.ops):
            prod = tuple(last.get(t) for t in o.in_ids)
            self.producer.append(prod)
            for p in prod:
                if p is not None:
                    self.consumers.setdefault(p, []).append(k)
            for t in o.out_ids:
                last[t] = k

    def src(self, k: int, arg: int = 0, through: frozenset[str] = TRANSPARENT, hops: int = 8) -> int | None:
        """The op that made input ``arg`` of op ``k``, looking through ``through`` ops."""
        if arg >= len(self.producer[k]):
            return None
        p = self.producer[k][arg]
        for _ in range(hops):
            if p is None or self.ops[p].base not in through:
                return p
            p = self.producer[p][0] if self.producer[p] else None
        return p

    def root_id(self, k: int, arg: int = 0) -> tuple | None:
        """The tensor behind input ``arg`` of ``k``, looking through transparent ops, as ``(producer op, id)``:
        Python ids are reused once a tensor is freed, so a tensor is told apart by the op that made it too."""
        if arg >= len(self.ops[k].in_ids):
            return None
        tid = self.ops[k].in_ids[arg]
        p = self.producer[k][arg]
        for _ in range(8):
            if p is None or self.ops[p].base not in TRANSPARENT or not self.ops[p].in_ids:
                return (p, tid)
            tid = self.ops[p].in_ids[0]
            p = self.producer[p][0]
        return (p, tid)

    def input_key(self, k: int, arg: int = 0) -> tuple | None:
        """Input ``arg`` of ``k`` as ``(producer op, id)``, not looking through anything."""
        if arg >= len(self.ops[k].in_ids):
            return None
        return (self.producer[k][arg], self.ops[k].in_ids[arg])

    def users(self, k: int, through: frozenset[str] = TRANSPARENT, hops: int = 6) -> list[int]:
        """The ops that consume op ``k``'s outputs, looking through ``through`` ops."""
        out, frontier, seen = [], [k], set()
        for _ in range(hops):
            nxt = []
            for f in frontier:
                for c in self.consumers.get(f, ()):
                    if c in seen:
                        continue
                    seen.add(c)
                    if self.ops[c].base in through:
                        nxt.append(c)
                    else:
                        out.append(c)
            if not nxt:
                break
            frontier = nxt
        return out

    def g(self, k: int) -> int:
        """Index in trace.ops of local op ``k``."""
        return self.idx[k]


def _last_dim(o: Op, dims: tuple) -> bool:
    nd = len(o.ins[0][0]) if o.ins else 0
    return bool(dims) and all(isinstance(d, int) and (d == -1 or d == nd - 1) for d in dims)


def _scalar(o: Op) -> float | None:
    for s in o.scalars:
        if isinstance(s, float) or (isinstance(s, int) and not isinstance(s, bool)):
            return float(s)
    return None


def _sites(graph: StepGraph, ks: list[int]) -> list[int]:
    out: list[int] = []
    for k in ks:
        s = graph.ops[k].site
        if s >= 0 and s not in out:
            out.append(s)
    return out


# -- RMSNorm ---------------------------------------------------------------------------------------------------


def find_rms_norm(graph: StepGraph) -> list[Match]:
    ops = graph.ops
    found = []
    for k, o in enumerate(ops):
        if o.base not in ("rsqrt", "sqrt"):
            continue
        a = graph.src(k)
        if a is None or ops[a].base not in ("add", "add_"):
            continue
        eps = _scalar(ops[a])
        m = graph.src(a)
        if m is None or ops[m].base != "mean":
            continue
        if not _last_dim(ops[m], tuple(x for x in ops[m].scalars if not isinstance(x, bool))):
            continue
        p = graph.src(m)
        if p is None:
            continue
        po = ops[p]
        if po.base == "pow" and _scalar(po) == 2.0:
            x_id = graph.root_id(p)
        elif po.base == "mul" and len(po.in_ids) == 2 and graph.input_key(p, 0) == graph.input_key(p, 1):
            x_id = graph.root_id(p)
        elif po.base == "square":
            x_id = graph.root_id(p)
        else:
            continue
        # x * rsqrt(...) (or x / sqrt(...))
        want = "mul" if o.base == "rsqrt" else "div"
        norm = None
        for u in graph.users(k):
            if ops[u].base == want and len(ops[u].in_ids) == 2:
                others = [graph.root_id(u, i) for i in range(2)]
                if x_id in others:
                    norm = u
                    break
        if norm is None:
            continue
        covered = [p, m, a, k, norm]
        weight = None
        for u in graph.users(norm):
            uo = ops[u]
            if uo.base == "mul" and len(uo.ins) == 2 and any(len(s) == 1 for s, _, _ in uo.ins):
                weight = u
                break
        if weight is not None:
            covered.append(weight)
        # the casts in between (x.float() ... .type_as(x)) go too
        covered += [c for c in range(min(covered), max(covered) + 1)
                    if ops[c].base in ("_to_copy",) and c not in covered and ops[c].site in {ops[x].site for x in covered}]
        xo = ops[p].ins[0] if ops[p].ins else ((), "float32", "npu")
        found.append(Match("rms_norm", sorted(graph.g(c) for c in set(covered)), _sites(graph, sorted(set(covered))),
                           anchor=ops[k].site, shape=tuple(xo[0]), dtype=xo[1],
                           detail={"eps": eps, "weight": weight is not None, "form": f"{o.base}"}))
    return found


# -- rotary embedding ----------------------------------------------------------------------------------------


def find_rotary(graph: StepGraph) -> list[Match]:
    ops = graph.ops
    found = []
    for k, o in enumerate(ops):
        if o.base in ("cat", "stack") and len(o.in_ids) == 2:
            m = _rotary_from_rotate(graph, k)
            if m is not None:
                found.append(m)
        elif o.base == "mul" and o.ins and o.ins[0][1].startswith("complex"):
            m = _rotary_complex(graph, k)
            if m is not None:
                found.append(m)
    return found


def _half_of(graph: StepGraph, k: int) -> tuple[int, int] | None:
    """``(op, source tensor id)`` when op ``k`` takes a half (a slice or a split piece) of a tensor."""
    o = graph.ops[k]
    if o.base in ("slice", "split", "split_with_sizes", "chunk", "narrow", "select", "unbind"):
        return k, graph.input_key(k, 0)
    return None


def _rotary_from_rotate(graph: StepGraph, c: int) -> Match | None:
    ops = graph.ops
    a, b = graph.producer[c][0], graph.producer[c][1]
    if a is None or b is None:
        return None
    neg = a if ops[a].base == "neg" else None
    if neg is None:
        return None
    h1 = graph.producer[neg][0] if graph.producer[neg] else None
    h2 = b
    # interleave: stack(...) then a flatten view; the halves come from strided slices
    s1 = _half_of(graph, h1) if h1 is not None else None
    s2 = _half_of(graph, h2) if h2 is not None else None
    if s1 is None or s2 is None or s1[1] != s2[1]:
        return None
    x_id = s1[1]
    mode = "half" if ops[c].base == "cat" else "interleave"
    # rotate(x) * sin
    m2 = next((u for u in graph.users(c) if ops[u].base == "mul"), None)
    if m2 is None:
        return None
    add = next((u for u in graph.users(m2) if ops[u].base in ("add", "add_")), None)
    if add is None:
        return None
    other = [p for p in graph.producer[add] if p is not None and p != m2]
    m1 = None
    for p in other:
        q = p
        while q is not None and ops[q].base in TRANSPARENT:
            q = graph.producer[q][0]
        if q is not None and ops[q].base == "mul":
            keys = [graph.input_key(q, i) for i in range(len(ops[q].in_ids))]
            keys += [graph.root_id(q, i) for i in range(len(ops[q].in_ids))]
            if x_id in keys:
                m1 = q
    if m1 is None:
        return None
    covered = sorted({s1[0], s2[0], neg, c, m2, m1, add})
    xo = ops[s1[0]].ins[0]
    return Match("rotary", [graph.g(i) for i in covered], _sites(graph, covered), anchor=ops[add].site,
                 shape=tuple(xo[0]), dtype=xo[1], detail={"mode": mode,
                                                          "cos_shape": list(ops[m1].ins[1][0]) if len(ops[m1].ins) > 1 else None})


def _rotary_complex(graph: StepGraph, k: int) -> Match | None:
    ops = graph.ops
    prod = [p for p in graph.producer[k] if p is not None]
    vc = next((p for p in prod if ops[p].base == "view_as_complex"), None)
    if vc is None:
        return None
    vr = next((u for u in graph.users(k, through=frozenset()) if ops[u].base == "view_as_real"), None)
    if vr is None:
        return None
    covered = sorted({vc, k, vr})
    xo = ops[vc].ins[0]
    return Match("rotary", [graph.g(i) for i in covered], _sites(graph, covered), anchor=ops[k].site,
                 shape=tuple(xo[0]), dtype=xo[1], detail={"mode": "interleave", "form": "complex"})


# -- SwiGLU --------------------------------------------------------------------------------------------------


def find_swiglu(graph: StepGraph) -> list[Match]:
    ops = graph.ops
    found = []
    for k, o in enumerate(ops):
        if o.base != "silu" or not o.outs:
            continue
        shape = o.outs[0][0]
        for u in graph.users(k, through=frozenset({"_to_copy"})):
            uo = ops[u]
            if uo.base == "mul" and len(uo.ins) == 2 and all(tuple(s) == tuple(shape) for s, _, _ in uo.ins):
                if graph.input_key(u, 0) == graph.input_key(u, 1) or graph.root_id(k) in (
                        graph.root_id(u, 0), graph.root_id(u, 1)):
                    continue  # x * silu(x): not a gated unit
                covered = [k, u]
                found.append(Match("swiglu", [graph.g(i) for i in covered], _sites(graph, covered),
                                   anchor=uo.site, shape=tuple(shape), dtype=o.outs[0][1]))
                break
    return found


# -- attention -------------------------------------------------------------------------------------------------


def find_attention(graph: StepGraph) -> list[Match]:
    ops = graph.ops
    found = []
    for k, o in enumerate(ops):
        if o.base not in ("_softmax", "softmax", "_safe_softmax"):
            continue
        dims = tuple(x for x in o.scalars if isinstance(x, int) and not isinstance(x, bool))[:1]
        if not _last_dim(o, dims):
            continue
        chain = []
        p = graph.src(k, through=TRANSPARENT | SCALE, hops=10)
        q = graph.producer[k][0]
        while q is not None and q != p and len(chain) < 12:
            chain.append(q)
            q = graph.producer[q][0] if graph.producer[q] else None
        if p is None or ops[p].base not in ("bmm", "baddbmm", "mm", "matmul"):
            continue
        after = [u for u in graph.users(k, through=TRANSPARENT | DROPOUT, hops=6)]
        pv = next((u for u in after if ops[u].base in ("bmm", "mm", "matmul")
                   and graph.src(u, 0, through=TRANSPARENT | DROPOUT) == k), None)
        if pv is None:
            continue
        covered = sorted({p, *chain, k, pv})
        qk = ops[p]
        shape = tuple(qk.outs[0][0]) if qk.outs else ()
        masked = any(ops[c].base in ("masked_fill", "masked_fill_", "where", "add", "add_") for c in chain)
        found.append(Match("attention", [graph.g(i) for i in covered], _sites(graph, covered), anchor=o.site,
                           shape=shape, dtype=qk.ins[0][1] if qk.ins else "float32",
                           detail={"masked": masked, "scores_shape": list(shape)}))
    return found


FINDERS = {"rms_norm": find_rms_norm, "rotary": find_rotary, "swiglu": find_swiglu, "attention": find_attention}


def find_all(trace: Trace, step: int) -> list[Match]:
    graph = StepGraph(trace, step, FWD)
    out: list[Match] = []
    for fn in FINDERS.values():
        out.extend(fn(graph))
    return out
