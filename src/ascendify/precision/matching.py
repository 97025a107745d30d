"""Structural matching of golden calls to target calls: module path, call order, class, shape.

Two runs of "the same" model rarely have identical call lists: the migrated copy renames a class, wraps a module
(an extra ``Wrapper.inner`` level), renames an attribute, adds or drops a call (a Dropout, a cast), or calls a
module a different number of times. Matching works on plain :class:`CallKey` records (built from lockstep hooks or
from dump nodes) in execution order, in two passes:

1. **anchors**: identical keys (same path or API, same call number, same input and output shapes) aligned in order
   (``difflib``'s longest matching blocks): the common case, linear time;
2. **gaps** between anchors: an order-preserving alignment that maximises a similarity score
   (:func:`similarity`): output shapes must agree (a node cannot stand for another whose result has another
   shape), then class name, attribute name, own-parameter shapes, input shapes and the path with wrapper levels
   removed each add to the score.

What stays unmatched is reported, each with a guess of why (:func:`explain_unmatched`): a wrapper (same inputs and
outputs as its only child), an extra or missing call.

>>> g = [CallKey("a", "module", "Linear", ((2, 4),), ((2, 3),), ((3, 4), (3,)))]
>>> t = [CallKey("w", "module", "Wrapper", ((2, 4),), ((2, 3),), ()),
...      CallKey("w.inner", "module", "MyLinear", ((2, 4),), ((2, 3),), ((3, 4), (3,)))]
>>> match_calls(g, t).pairs   # the inner layer holds the weights: it stands for the golden Linear
[(0, 1)]
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

Shape = tuple[int, ...]


@dataclass(frozen=True)
class CallKey:
    """What matching looks at for one call. ``path`` is the module path (module calls) or the API name (API calls,
    e.g. ``torch.nn.functional.gelu``); ``owner`` the enclosing module path of an API call; ``call_index`` counts
    calls of the same path; ``own_params`` the shapes of the module's own (not its children's) parameters."""

    path: str
    kind: str
    class_name: str | None
    in_shapes: tuple[Shape, ...]
    out_shapes: tuple[Shape, ...]
    own_params: tuple[Shape, ...] = ()
    call_index: int = 0
    owner: str | None = None
    depth: int = 0

    def strong(self) -> tuple:
        return (self.kind, self.path, self.call_index, self.in_shapes, self.out_shapes)


@dataclass
class Matching:
    """``pairs`` of (golden index, target index) in execution order; the indices left over on each side."""

    pairs: list[tuple[int, int]] = field(default_factory=list)
    unmatched_golden: list[int] = field(default_factory=list)
    unmatched_target: list[int] = field(default_factory=list)

    def target_to_golden(self) -> dict[int, int]:
        return {t: g for g, t in self.pairs}


def _leaf(path: str | None) -> str:
    return (path or "").rsplit(".", 1)[-1]


def _segments(path: str | None) -> list[str]:
    return [s for s in (path or "").split(".") if s]


def _common_suffix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def similarity(g: CallKey, t: CallKey) -> float:
    """How well target call ``t`` stands for golden call ``g``: 0 when it cannot (different kind, API or output
    shapes), otherwise a positive score; higher is better."""
    if g.kind != t.kind or g.out_shapes != t.out_shapes:
        return 0.0
    if g.kind == "api" and g.path != t.path:
        return 0.0
    score = 1.0
    if g.in_shapes == t.in_shapes:
        score += 1.0
    if g.class_name and g.class_name == t.class_name:
        score += 2.0
    if g.own_params and g.own_params == t.own_params:
        score += 3.0
    elif g.own_params != t.own_params:
        score -= 1.0
    if g.kind == "module":
        gs, ts = _segments(g.path), _segments(t.path)
        if _leaf(g.path) == _leaf(t.path):
            score += 2.0
        score += 0.5 * _common_suffix(gs, ts)
        # the same path once wrapper levels are dropped: every golden segment appears in order in the target path
        it = iter(ts)
        if all(s in it for s in gs):
            score += 1.0
    else:
        if g.owner == t.owner:
            score += 1.0
        elif _leaf(g.owner) == _leaf(t.owner):
            score += 0.5
    if g.call_index == t.call_index:
        score += 0.25
    return max(score, 0.01)


def _align(golden: list[CallKey], target: list[CallKey], gi: list[int], ti: list[int]) -> list[tuple[int, int]]:
    """Order-preserving alignment of the sub-lists ``gi``/``ti`` that maximises the summed similarity (DP)."""
    n, m = len(gi), len(ti)
    if not n or not m:
        return []
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        gk = golden[gi[i]]
        row, nxt = score[i], score[i + 1]
        for j in range(m - 1, -1, -1):
            best = max(nxt[j], row[j + 1])
            s = similarity(gk, target[ti[j]])
            if s > 0 and nxt[j + 1] + s > best:
                best = nxt[j + 1] + s
            row[j] = best
    pairs = []
    i = j = 0
    while i < n and j < m:
        s = similarity(golden[gi[i]], target[ti[j]])
        if s > 0 and abs(score[i][j] - (score[i + 1][j + 1] + s)) < 1e-9:
            pairs.append((gi[i], ti[j]))
            i += 1
            j += 1
        elif score[i][j] == score[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs


# gaps larger than this (calls on each side multiplied) are aligned greedily by key instead of by DP
_DP_CELLS = 4_000_000


def match_calls(golden: list[CallKey], target: list[CallKey]) -> Matching:
    """Match golden calls to target calls (see the module docstring). Indices refer to the input lists."""
    sm = difflib.SequenceMatcher(None, [k.strong() for k in golden], [k.strong() for k in target], autojunk=False)
    anchors: list[tuple[int, int]] = []
    for blk in sm.get_matching_blocks():
        anchors.extend((blk.a + k, blk.b + k) for k in range(blk.size))
    pairs: list[tuple[int, int]] = []
    pg = pt = 0
    for ga, ta in [*anchors, (len(golden), len(target))]:
        gi, ti = list(range(pg, ga)), list(range(pt, ta))
        if gi and ti:
            if len(gi) * len(ti) <= _DP_CELLS:
                pairs.extend(_align(golden, target, gi, ti))
            else:  # huge gap: fall back to order-preserving greedy by similarity
                j0 = 0
                for i in gi:
                    for j in range(j0, len(ti)):
                        if similarity(golden[i], target[ti[j]]) >= 3.0:
                            pairs.append((i, ti[j]))
                            j0 = j + 1
                            break
        if ga < len(golden):
            pairs.append((ga, ta))
        pg, pt = ga + 1, ta + 1
    pairs.sort()
    mg = {g for g, _ in pairs}
    mt = {t for _, t in pairs}
    return Matching(
        pairs=pairs,
        unmatched_golden=[i for i in range(len(golden)) if i not in mg],
        unmatched_target=[j for j in range(len(target)) if j not in mt],
    )


def explain_unmatched(keys: list[CallKey], index: int, side: str) -> str:
    """A short reason for an unmatched call: a wrapper (its only direct child has its inputs and outputs), or an
    extra (target) / missing (golden) call."""
    k = keys[index]
    children = [
        c for c in keys[index + 1 :] if c.kind == k.kind and c.path.startswith(k.path + ".") and c.depth == k.depth + 1
    ]
    if k.kind == "module" and not k.own_params and len(children) == 1:
        c = children[0]
        if c.in_shapes == k.in_shapes and c.out_shapes == k.out_shapes:
            return f"wrapper around {c.path} (same inputs and outputs)"
    if side == "target":
        return "extra call in the target (no golden counterpart)"
    return "missing in the target (no target counterpart)"


def alias_wrappers(keys: list[CallKey], parents: list[int | None], t2g: dict[int, int]) -> set[int]:
    """Give unmatched target wrapper levels the golden counterpart of the call they wrap (or that wraps them): a
    module whose only child module call has its inputs and outputs stands for the same golden call (an extra
    ``Wrapper.inner`` level, a ``Scaled(inner)`` around a layer). ``parents`` are the target calls' enclosing call
    indices. Updates ``t2g`` (target index -> golden index); returns the aliased target indices."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        if p is not None and keys[i].kind == "module":
            children.setdefault(p, []).append(i)

    def same(a: int, b: int) -> bool:
        return keys[a].in_shapes == keys[b].in_shapes and keys[a].out_shapes == keys[b].out_shapes

    aliased: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, k in enumerate(keys):
            if i in t2g or k.kind != "module":
                continue
            kids = children.get(i, [])
            p = parents[i]
            if len(kids) == 1 and kids[0] in t2g and same(i, kids[0]):
                t2g[i] = t2g[kids[0]]
            elif p is not None and p in t2g and children.get(p) == [i] and same(i, p):
                t2g[i] = t2g[p]
            else:
                continue
            aliased.add(i)
            changed = True
    return aliased
