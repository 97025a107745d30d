""""Make it fast on the NPU": ``ascendify advise``'s analysis of the migrated run (its tracer ran in that run, see
:func:`advised`), read into the train stage's facts (``facts["advise"]``, also
report.json's ``advise``) and drawn as a section of its own after the stages.

The findings name lines of the migrated copy (the run's tree is OUT's copy), and their weights are estimates of
the time per step on the Ascend chip named (a roofline from published peaks: within -6% to -42% of measured
steps on a GPU, unvalidated on an NPU):
what will make the port slow before there is an NPU to measure it on.
"""

from __future__ import annotations

from typing import Any

from ascendify import report
from ascendify.port.options import Context
from ascendify.port.stages.base import emulated_devices, load_json


def advised(ctx: Context) -> bool:
    """Whether the migrated run is traced by ``ascendify advise`` ("Make it fast on the NPU"): on an NPU, real or
    emulated, one process (advise traces one rank), not under ``--overflow`` (two dispatch modes would stack and
    each would time the other), and not a program that compiles (Dynamo does not compile under a tracer's mode:
    the run would not be the program's)."""
    return ctx.target in ("emulated", "npu") and not ctx.overflow and emulated_devices(list(ctx.command)) == 1 \
        and not any(w in ("torchrun", "torch.distributed.run", "launch") for w in ctx.command) and not ctx.compiles


def read(ctx: Context, target_run: dict[str, Any] | None) -> dict[str, Any]:
    """The analysis (advise.json's fields), or ``{"skipped": why}``."""
    if not advised(ctx):
        why = ("the target is a CUDA GPU" if ctx.target == "cuda" else
               "not with --overflow (the two watches would time each other)" if ctx.overflow else
               "the program compiles with torch.compile, which does not compile under the tracer: run "
               "`ascendify advise` for the eager analysis" if ctx.compiles else
               "a multi-process command: run `ascendify advise` on one rank")
        return {"skipped": why}
    if not target_run or target_run.get("skipped") and not target_run.get("history"):
        return {"skipped": "the migrated run did not run"}
    data = load_json(ctx.runs / "target" / "advise" / "advise.json")
    if data is None:
        return {"skipped": "the migrated run left no advise.json (it ended before the program started: see its log)"}
    return data


def headline(facts: dict[str, Any]) -> str:
    """One line: how many findings, and the estimated step on the chip.

    >>> headline({"findings": [{"title": "x"}], "estimate": {"step_ms": 2.5}, "meta": {"device": "Ascend910B3"}})
    '1 finding; estimated step on Ascend910B3: 2.5 ms (an estimate, unvalidated on an NPU)'
    >>> headline({"skipped": "the target is a CUDA GPU"})
    'not analysed: the target is a CUDA GPU'
    """
    if facts.get("skipped"):
        return f"not analysed: {facts['skipped']}"
    n = len(facts.get("findings") or [])
    text = f"{n} finding{'s' if n != 1 else ''}" if n else "no finding"
    total = (facts.get("estimate") or {}).get("step_ms")
    if isinstance(total, (int, float)):
        device = (facts.get("meta") or {}).get("device") or "the NPU"
        text += f"; estimated step on {device}: {total:.3g} ms (an estimate, unvalidated on an NPU)"
    return text


def section(sec: report.Section, facts: dict[str, Any]) -> None:
    if facts.get("skipped"):
        sec.verdict("skip", headline(facts))
        return
    from ascendify import advise
    from ascendify.advise.model import Findings

    advise.render_section(sec, Findings.from_dict(facts))
    sec.text("The lines named are the migrated copy's (the run's scratch copy of OUT). Rerun on one file with "
             "`ascendify advise -- python ...` for the whole analysis, `--apply` to rewrite the fused-operator "
             "findings and prove the rewrite.")
