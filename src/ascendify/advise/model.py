"""What an analysis produces: :class:`Finding` (one slow pattern at one line of the user's code) and
:class:`Findings` (all of them, with the step estimate). Plain dataclasses, JSON-ready (``to_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "ascendify.advise/1"

FAMILIES = {
    "sync": "Host-device synchronisation in the step",
    "shapes": "Shapes that change from step to step",
    "placement": "Operators and dtypes the NPU runs poorly",
    "fusion": "Hand-written patterns one fused operator does",
    "throughput": "Throughput settings",
    "host": "Where the step's time goes",
}


@dataclass
class Finding:
    rule: str  # ADV101
    name: str  # item-in-step
    family: str  # a key of FAMILIES
    title: str  # one line: what is slow
    file: str | None  # the user's file (relative to the run's root when under it)
    line: int | None
    function: str | None
    code: str  # the line's text
    message: str  # what was seen, with the counts
    evidence: dict[str, Any]  # per_step (count), steps_seen, shapes, ops, sites...
    why: str  # why it is slow on an Ascend NPU
    sources: list[dict[str, str]]  # {"what", "url"}
    fix: str  # the fix, as code
    weight_ms: float | None = None  # estimated time per step it costs on the target chip
    share: float | None = None  # of the estimated step
    weight_basis: str = ""
    applicable: bool = False  # advise --apply rewrites it
    apply: dict[str, Any] | None = None  # what --apply needs (kind, sites, shapes)
    path: str | None = None  # the file's absolute path (``file`` is for reading)

    @property
    def where(self) -> str:
        if self.file:
            return f"{self.file}:{self.line}"
        op = (self.evidence or {}).get("op")
        return f"(operator {op})" if op else "(the whole step)"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["where"] = self.where
        return d


@dataclass
class Findings:
    findings: list[Finding] = field(default_factory=list)
    minor: list[Finding] = field(default_factory=list)  # real but each under 1% of the estimated step
    estimate: dict[str, Any] | None = None  # estimate.StepEstimate.to_dict(trace)
    steps: list[dict[str, Any]] = field(default_factory=list)  # per analysed step: ops, syncs...
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # program, device, steps, trace facts
    source: str = "emulated"  # "emulated" (from the op trace) | "profile" (a real NPU's profiler output)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "source": self.source, "meta": self.meta, "estimate": self.estimate,
                "steps": self.steps, "findings": [f.to_dict() for f in self.findings],
                "minor_findings": [f.to_dict() for f in self.minor], "notes": self.notes,
                "families": FAMILIES}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Findings:
        """The findings :meth:`to_dict` wrote (``advise.json``; ``ascendify port`` reads its target run's)."""
        names = {f for f in Finding.__dataclass_fields__}

        def finding(x: dict[str, Any]) -> Finding:
            return Finding(**{k: v for k, v in x.items() if k in names})

        return cls(findings=[finding(x) for x in d.get("findings") or []],
                   minor=[finding(x) for x in d.get("minor_findings") or []], estimate=d.get("estimate"),
                   steps=d.get("steps") or [], notes=d.get("notes") or [], meta=d.get("meta") or {},
                   source=d.get("source") or "emulated")

    def by_family(self) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.family, []).append(f)
        return out
