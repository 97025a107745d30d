"""The doctor's small data model: a check is an id, a title, a doc and a function of the gathered facts.

A check never probes the machine itself: :mod:`ascendify.doctor.probe` gathers every fact once (with timeouts,
in subprocesses where a probe could crash), and each check only reads those facts. That keeps checks pure
functions a test can feed any fixture, and the facts go into the JSON report as they are.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "warn", "fail", "skip")


@dataclass
class CheckResult:
    """What one check concluded.

    ``status`` is ok / warn / fail / skip; ``found`` says what was found (one line); ``fix`` is the exact command or
    setting that repairs a warn or fail (empty for ok); ``details`` holds structured facts for the JSON report.
    """

    status: str
    found: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check status must be one of {STATUSES}, not {self.status!r}")


@dataclass(frozen=True)
class Check:
    """One registered check: ``id`` (``cann``), ``title`` (one line), ``doc`` (what, why, fix) and its function."""

    id: str
    title: str
    doc: str
    section: str
    func: Callable[[dict[str, Any]], CheckResult]

    def run(self, facts: dict[str, Any]) -> CheckResult:
        try:
            return self.func(facts)
        except Exception as e:  # a check with a bug must not hide the other checks
            return CheckResult(
                "warn",
                f"the check itself failed: {type(e).__name__}: {e}",
                "report this to the ascendify maintainers with `ascendify doctor --bug-report`",
            )


REGISTRY: dict[str, Check] = {}


def check(id: str, title: str, section: str = "environment"):
    """Register a check function under ``id``; its docstring is the check's documentation."""

    def deco(func: Callable[[dict[str, Any]], CheckResult]):
        if id in REGISTRY:
            raise ValueError(f"duplicate doctor check id {id!r}")
        REGISTRY[id] = Check(id, title, inspect.cleandoc(func.__doc__ or title), section, func)
        return func

    return deco


def result_row(chk: Check, res: CheckResult) -> dict[str, Any]:
    """The JSON form of one check's result."""
    return {"id": chk.id, "title": chk.title, "section": chk.section, **asdict(res)}
