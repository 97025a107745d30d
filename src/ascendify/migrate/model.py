"""The data the migration produces: edits, findings, per-file results. Plain dataclasses, JSON-ready."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

# Finding kinds
CHANGE = "change"  # a CUDA site that was converted
REPORT = "report"  # a CUDA site listed, not converted (severity says why)
API = "api"  # a torch API with limits on the NPU (unsupported, limited, no kernel, float64)
ADVICE = "advice"  # performance advice, and flags to rename (ASC805)

# Severities of REPORT rows
UNSUPPORTED = "unsupported"  # no equivalent on the target
MANUAL = "manual"  # needs a person (report-only rule, or a rewrite that could not be made safely)
UNSAFE = "unsafe-fix"  # a fix exists but is only applied with --unsafe
REVIEW = "review"  # a CUDA token no rule claimed: listed so nothing is left behind silently
CUDA_KINDS = (CHANGE, REPORT)


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    text: str


_HOLE = re.compile("\x00(\\d+):(\\d+)\x00")


def hole(a: int, b: int) -> str:
    """A placeholder, inside an edit's text, for the original text ``[a, b)`` with the edits made inside it.

    Lets an outer rewrite (``torch.cuda.get_device_properties(...)`` guarded) carry inner ones
    (``torch.cuda.current_device()`` in its arguments) whichever rule ran first. NUL never occurs in a parsed
    source file, so the marker cannot clash with real text.
    """
    return f"\x00{a}:{b}\x00"


def holes(e: Edit) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2))) for m in _HOLE.finditer(e.text)] if "\x00" in e.text else []


@dataclass
class Finding:
    rule: str
    kind: str
    line: int
    end_line: int
    api: str = ""
    message: str = ""
    tip: str = ""
    severity: str = ""
    before: str = ""
    after: str = ""
    gloss: str = ""
    edits: list[Edit] = field(default_factory=list, repr=False)
    cell: int = 0  # in a notebook: the cell (1 = the first, markdown cells counted); line is the cell's line

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in _FINDING_FIELDS}
        if self.cell:
            d["cell"] = self.cell
        return d

    def where(self, path: str) -> str:
        """The file as a report row names it: ``nb.ipynb:cell_3`` for a notebook's cell (as nbQA writes it)."""
        return f"{path}:cell_{self.cell}" if self.cell else path


_FINDING_FIELDS = tuple(f.name for f in fields(Finding) if f.name not in ("edits", "cell"))


@dataclass
class FileResult:
    path: str  # relative to its input root, with "/" separators
    status: str  # "changed" | "unchanged" | "skipped" | "copied" (not Python) | "kept" (hand-edited output) | "error"
    lines: int = 0
    reason: str = ""  # why skipped
    findings: list[Finding] = field(default_factory=list)
    native_ops: list[dict[str, Any]] = field(default_factory=list)  # from .cu/.cpp scanning
    parsed: bool = False
    seconds: float = 0.0
    # how the run handled the file (not in the report): copied to the output as it is; the SHA-256 of the input
    # and of what was written (the output's marker); --inplace: the converted copy waiting to be swapped in
    copied: bool = False
    program: bool | None = None  # a program to run (see scripts.runs_as_program); None: not looked at
    src_sha: str = ""
    out_sha: str = ""
    pending: str = ""

    def count(self, kind: str, severity: str | None = None) -> int:
        return sum(1 for f in self.findings if f.kind == kind and (severity is None or f.severity == severity))

    def summary(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        severities: dict[str, int] = {}
        for f in self.findings:  # one pass (a large tree's report asks for every file's summary several times)
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
            if f.kind == REPORT:
                severities[f.severity] = severities.get(f.severity, 0) + 1
        converted = kinds.get(CHANGE, 0)
        unsupported = severities.get(UNSUPPORTED, 0)
        review = severities.get(REVIEW, 0)
        listed = kinds.get(REPORT, 0) - unsupported
        return {
            "cuda_sites": converted + kinds.get(REPORT, 0),
            "converted": converted,
            "report_only": listed - review,
            "unsupported": unsupported,
            "unclaimed": review,
            "api_notes": kinds.get(API, 0),
            "advice": kinds.get(ADVICE, 0),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "lines": self.lines,
            "reason": self.reason,
            "parsed": self.parsed,
            "summary": self.summary(),
            "findings": [f.to_dict() for f in self.findings],
            "native_ops": self.native_ops,
        }
