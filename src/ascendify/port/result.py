"""What one run of ``ascendify port`` found, and its verdict: :class:`PortResult` holds every stage's result and
the checklist; its verdict is earned (:mod:`ascendify.port.proof`): interrupted, an error, a finding, not proven,
or proven, each with its exit status."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascendify.port import proof
from ascendify.port.options import (
    EXIT_FINDING,
    EXIT_NOT_PROVEN,
    EXIT_OK,
    STAGE_IDS,
    TARGET_LABEL,
    Context,
)
from ascendify.port.stages.base import StageResult


@dataclass
class PortResult:
    context: Context
    stages: dict[str, StageResult]  # every stage by id, in the report's order (the checklist and report last)
    checklist: list[dict[str, Any]]
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    interrupted: bool = False  # Ctrl-C: the report holds what was proven up to there

    # what the report names, from the run's context
    @property
    def out(self) -> Path:
        return self.context.out

    @property
    def target(self) -> str:
        return self.context.target

    @property
    def target_reason(self) -> str:
        return self.context.target_reason

    @property
    def lanes(self) -> int:
        return self.context.lanes

    @property
    def project(self) -> Path:
        return self.context.project

    @property
    def migrated(self) -> Path:
        return self.context.migrated

    @property
    def command(self) -> list[str]:
        return list(self.context.options.command)

    @property
    def entry(self) -> str | None:
        return self.context.entry

    @property
    def name(self) -> str:
        return self.context.options.name

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if any(s.status == "error" for s in self.stages.values()):
            return self.context.options.crash_exit
        if self._findings():
            return EXIT_FINDING
        if self.gaps:
            return EXIT_NOT_PROVEN
        return EXIT_OK

    @property
    def gaps(self) -> list[str]:
        """What this run did not prove (:mod:`ascendify.port.proof`); empty: proven."""
        return proof.gaps(self.stages)

    def _findings(self) -> list[str]:
        """The findings, as sentences: failed stages' headlines, the migrated copy's loss going NaN where the
        original's stays finite, failed checklist items."""
        out = [s.headline for s in self.stages.values() if s.status == "fail" and s.id in STAGE_IDS]
        nan = proof.nan_on_target_only(self.stages)
        if nan:
            out.append(nan)
        if not out:
            out = [i["id"] for i in self.checklist if i["mark"] == "✗"]
        return out

    @property
    def verdict(self) -> tuple[str, str]:
        """``(status, sentence)`` for the whole run."""
        crashed = [s.id for s in self.stages.values() if s.status == "error"]
        if self.interrupted:
            done = [s.id for s in self.stages.values() if s.status in ("ok", "warn", "fail") and s.id in STAGE_IDS
                    and not any((j.skipped or "").startswith("interrupted") for j in s.jobs)]
            return "error", ("interrupted (Ctrl-C): the children were stopped; this report holds what was proven "
                             f"up to there ({', '.join(done) or 'no step'} finished)")
        train = self.stages.get("train")
        if train is not None and "golden" in (train.facts.get("failed") or []):
            return "error", ("the original program failed under ascendify run --to cpu, so nothing could be "
                             "compared: not the port's fault (see the train step; the migrated copy is kept)")
        if crashed:
            return "error", f"{', '.join(crashed)} failed to run: see the report (the other steps ran)"
        where = TARGET_LABEL[self.target]
        findings = self._findings()
        if findings:
            return "fail", f"findings on the {where}: {'; '.join(findings)}"
        gaps = self.gaps
        if gaps:
            return "not proven", "not proven: " + "; ".join(gaps)
        skipped = [s.id for s in self.stages.values() if s.status == "skip" and s.id in STAGE_IDS]
        tail = f" ({', '.join(skipped)} skipped)" if skipped else ""
        cv = (self.stages["compare"].facts.get("curves") or {}) if "compare" in self.stages else {}
        if cv.get("constant"):
            tail += f"; the loss is {cv['constant']} at every step, so its curves say nothing: the lockstep decides"
        return "ok", (f"proven: the migrated project runs on the {where} and computes what the original computes "
                      f"({proof.evidence(self.stages)}){tail}")

    def to_dict(self) -> dict[str, Any]:
        from ascendify import __version__

        status, sentence = self.verdict
        marks = [i["mark"] for i in self.checklist]
        out = {
            "schema": f"ascendify.{self.name}/1",
            "tool": f"ascendify {__version__}",
            "out": str(self.out),
            "project": str(self.project),
            "migrated": str(self.migrated),
            "command": self.command,
            "target": self.target,
            "target_label": TARGET_LABEL[self.target],
            "target_reason": self.target_reason,
            **(self.context.options.about or {}),
            "lanes": self.lanes,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "verdict": {"status": status, "text": sentence, "exit_code": self.exit_code},
            "interrupted": self.interrupted,
            "steps": [s.to_dict() for s in self.stages.values()],  # the schema's name for the stages
            "checklist": {"pass": marks.count("✓"), "fail": marks.count("✗"), "n/a": marks.count("n/a"),
                          "items": self.checklist},
        }
        train = self.stages["train"].facts if "train" in self.stages else {}
        if train.get("overflow"):  # --overflow only: the migrated run's overflow check (also in the train's facts)
            out["overflow"] = train["overflow"]
        if train.get("advise"):  # "Make it fast on the NPU": advise's analysis of the migrated run
            out["advise"] = train["advise"]
        return out
