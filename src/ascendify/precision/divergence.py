"""Comparison results and the first-divergence rule, shared by lockstep mode and dump comparison.

A comparison yields one :class:`NodeResult` per target call in execution order (matched to a golden call or
not). A node is *flagged* when its **local** error (its own, not inherited: lockstep feeds it the golden inputs;
dump comparison asks that its inputs agree) exceeds the limit for the dtype it computed in, or when metadata
disagree (shape, dtype under the same autocast policy, scalar arguments, NaN/Inf placement).

The **first divergence** (:func:`first_divergence`) is the first flagged node in execution order that is not
explained by a flagged descendant: a module containing a defective child is not the culprit, the child is (the
deepest-culprit rule). Its module path, API, metrics and source line are what the user needs to look at.

>>> a = NodeResult(name="blk", kind="module", module="blk", order=0, flagged=True, reasons=["local"])
>>> b = NodeResult(name="blk.fc", kind="module", module="blk.fc", order=1, parent=0, flagged=True, reasons=["x"])
>>> first_divergence([a, b]).module
'blk.fc'
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any


def _clean(v: Any) -> Any:
    """JSON-safe copy: non-finite floats become strings ("inf", "nan"), tuples become lists."""
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


@dataclass
class NodeResult:
    """One target call and its verdict.

    ``module`` is the target's dotted module path (as in ``named_modules()``; for API calls the enclosing module),
    ``api`` the API name for API calls; ``golden_name`` the golden call it was matched to (None: unmatched).
    ``local``, ``total`` and ``code`` are metric dicts (``metrics.tensor_metrics`` or
    ``metrics.stat_rel_errors``): ``local`` is the node's own error, ``total`` what its output shows (local plus
    inherited), ``code`` (lockstep) the target's code run in the golden setting. ``limit`` is the relative L2
    limit for ``compute_dtype``. ``parent`` indexes the enclosing module's node in the result list.
    """

    name: str
    kind: str
    module: str | None = None
    api: str | None = None
    class_name: str | None = None
    golden_name: str | None = None
    order: int = 0
    depth: int = 0
    parent: int | None = None
    source: str | None = None
    defined_at: str | None = None
    compute_dtype: str | None = None
    limit: float | None = None
    code_limit: float | None = None
    local: dict[str, Any] = field(default_factory=dict)
    total: dict[str, Any] = field(default_factory=dict)
    code: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    flagged: bool = False
    reasons: list[str] = field(default_factory=list)
    note: str | None = None
    not_comparable: bool = False  # a random call (dropout, randperm...) whose draws differ between the runs
    phase: str = "forward"  # "forward" | "backward" (lockstep with backward=True: gradients, see gradients.py)
    grads: dict[str, Any] | None = None  # backward nodes: own parameters' gradient relative L2 {"total", "local"}

    @property
    def matched(self) -> bool:
        return self.golden_name is not None

    @property
    def local_error(self) -> float | None:
        """The relative L2 local error (lockstep) or its statistics estimate (dumps); None when not measured."""
        for src in (self.local, self.code or {}):
            v = src.get("rel_l2", src.get("worst"))
            if v is not None:
                return float(v)
        return None

    @property
    def ratio(self) -> float | None:
        """Local error over its limit (> 1: over the limit); the larger of the device and code checks."""
        vals = []
        loc = self.local or {}
        le = loc.get("trimmed_rel_l2", loc.get("rel_l2", loc.get("worst")))
        if le is not None and self.limit:
            vals.append(float(le) / self.limit)
        ce = (self.code or {}).get("rel_l2")
        if ce is not None and self.code_limit:
            vals.append(float(ce) / self.code_limit)
        return max(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        return _clean(
            {
                "name": self.name,
                "kind": self.kind,
                "module": self.module,
                "api": self.api,
                "class_name": self.class_name,
                "golden_name": self.golden_name,
                "order": self.order,
                "depth": self.depth,
                "parent": self.parent,
                "source": self.source,
                "defined_at": self.defined_at,
                "compute_dtype": self.compute_dtype,
                "limit": self.limit,
                "code_limit": self.code_limit,
                "local": self.local,
                "total": self.total,
                "code": self.code,
                "inputs": self.inputs,
                "flagged": self.flagged,
                "reasons": self.reasons,
                "note": self.note,
                "not_comparable": self.not_comparable,
                "phase": self.phase,
                "grads": self.grads,
            }
        )


@dataclass
class Divergence:
    """The first divergence: ``module`` (dotted path, as in ``named_modules()``), ``api`` (or None), ``metrics``
    (its local error), ``source`` (``file:line`` of the call), ``defined_at`` (where its code is), ``reasons``."""

    name: str
    module: str | None
    api: str | None
    class_name: str | None
    metrics: dict[str, Any]
    source: str | None
    defined_at: str | None
    reasons: list[str]
    index: int
    phase: str = "forward"

    def to_dict(self) -> dict[str, Any]:
        return _clean(
            {
                "name": self.name,
                "module": self.module,
                "api": self.api,
                "class_name": self.class_name,
                "metrics": self.metrics,
                "source": self.source,
                "defined_at": self.defined_at,
                "reasons": self.reasons,
                "index": self.index,
                "phase": self.phase,
            }
        )


def _random_advice() -> str:
    from ascendify.precision.randomness import ADVICE

    return ADVICE


def culprits(nodes: list[NodeResult]) -> list[int]:
    """Indices of flagged nodes with no flagged descendant, in execution order."""
    explained: set[int] = set()
    for _i, n in enumerate(nodes):
        if not n.flagged:
            continue
        p = n.parent
        seen = 0
        while p is not None and seen < len(nodes):
            explained.add(p)
            p = nodes[p].parent
            seen += 1
    return [i for i, n in enumerate(nodes) if n.flagged and i not in explained]


def first_divergence(nodes: list[NodeResult]) -> NodeResult | None:
    """The first culprit in execution order (see the module docstring), or None when nothing is flagged."""
    c = culprits(nodes)
    if not c:
        return None
    return nodes[min(c, key=lambda i: (nodes[i].order, i))]


@dataclass
class ComparisonResult:
    """Everything a comparison found. ``nodes`` in target execution order; ``first_divergence`` None when the
    target matches; ``unmatched_golden``/``unmatched_target`` list ``{"name", "reason"}``; ``end_to_end`` the
    metrics of the final outputs (lockstep); ``meta`` settings (devices, dtypes, autocast, level, thresholds).

    Lockstep also fills ``weights`` (``weights.WeightCheck.to_dict()``: the parameters and buffers compared before
    anything ran; a differing one is a finding unless the golden weights were copied), ``missing_grads`` (with
    ``backward=True``: parameters with a gradient on one side only) and ``golden_nonfinite`` (the first golden
    call whose output holds NaN/Inf: the reference itself is broken, said first)."""

    mode: str
    golden: str
    target: str
    nodes: list[NodeResult] = field(default_factory=list)
    unmatched_golden: list[dict[str, Any]] = field(default_factory=list)
    unmatched_target: list[dict[str, Any]] = field(default_factory=list)
    end_to_end: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, Any] | None = None
    missing_grads: list[dict[str, Any]] = field(default_factory=list)
    golden_nonfinite: dict[str, Any] | None = None

    @property
    def weight_findings(self) -> list[dict[str, Any]]:
        """Parameters and buffers that differ and were not copied over (each one a finding)."""
        w = self.weights or {}
        return [] if w.get("copied") else list(w.get("differ") or [])

    @property
    def flagged(self) -> list[NodeResult]:
        """Flagged nodes in execution order (culprits and the ancestors they explain)."""
        return [n for n in self.nodes if n.flagged]

    @property
    def first_divergence(self) -> Divergence | None:
        n = first_divergence(self.nodes)
        if n is None:
            return None
        return Divergence(
            name=n.name,
            module=n.module,
            api=n.api,
            class_name=n.class_name,
            metrics=n.local or n.code or {},
            source=n.source,
            defined_at=n.defined_at,
            reasons=list(n.reasons),
            index=self.nodes.index(n),
            phase=n.phase,
        )

    @property
    def not_comparable(self) -> list[NodeResult]:
        """Random calls whose draws differ between the runs (everything after them is inherited), innermost
        first: a ``Dropout`` module holding a ``dropout`` call whose draws differ lists the call first."""
        idx = [i for i, n in enumerate(self.nodes) if n.not_comparable]
        holders = set()
        for i in idx:
            p, hops = self.nodes[i].parent, 0
            while p is not None and hops < len(self.nodes):
                holders.add(p)
                p, hops = self.nodes[p].parent, hops + 1
        return [self.nodes[i] for i in sorted(idx, key=lambda i: (i in holders, i))]

    @property
    def verdict(self) -> str:
        """``"divergence"`` (a flagged call, a differing weight, a gradient missing on one side), ``"not
        comparable"`` (nothing flagged, but a random call drew differently, or the golden itself holds NaN/Inf, so
        what follows proves nothing) or ``"match"``."""
        if any(n.flagged for n in self.nodes) or self.weight_findings or self.missing_grads:
            return "divergence"
        # a golden that is itself NaN/Inf proves nothing: never a match
        return "not comparable" if self.not_comparable or self.golden_nonfinite else "match"

    @property
    def matched_count(self) -> int:
        return sum(1 for n in self.nodes if n.matched)

    def to_dict(self) -> dict[str, Any]:
        fd = self.first_divergence
        return _clean(
            {
                "mode": self.mode,
                "golden": self.golden,
                "target": self.target,
                "verdict": self.verdict,
                "golden_nonfinite": self.golden_nonfinite,
                "weights": self.weights,
                "first_divergence": fd.to_dict() if fd else None,
                "missing_grads": self.missing_grads,
                "flagged": [n.name for n in self.flagged],
                "not_comparable": [n.name for n in self.not_comparable],
                "not_comparable_fix": _random_advice() if self.not_comparable else None,
                "culprits": [self.nodes[i].name for i in culprits(self.nodes)],
                "end_to_end": self.end_to_end,
                "matched": self.matched_count,
                "unmatched_golden": self.unmatched_golden,
                "unmatched_target": self.unmatched_target,
                "meta": self.meta,
                "nodes": [n.to_dict() for n in self.nodes],
            }
        )

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)
