"""The analysis of a trace: the rules' findings, weighed by the step estimate for a chip (see the package doc)."""

from __future__ import annotations

from ascendify.advise.model import Findings
from ascendify.advise.trace import Trace

DEFAULT_DEVICE = "Ascend910B3"


def analyze(trace: Trace, device: str | None = None, *, dispatch_us: float | None = None) -> Findings:
    """The findings of ``trace`` for chip ``device`` (a name ``data/device_peaks.json`` knows: ``Ascend910B3``,
    ``910B4``, ``NVIDIA H100 80GB HBM3``...; default: the traced device when it is an Ascend chip, else the
    910B3). ``dispatch_us`` overrides the assumed host cost of one operator."""
    from ascendify.advise import estimate as est
    from ascendify.advise import rules

    name = device or trace.meta.get("device_name") or DEFAULT_DEVICE
    c = est.chip(name, dispatch_us=dispatch_us)
    ctx = rules.context(trace, c)
    found = rules.run_all(ctx)
    minor = [f for f in found if rules.is_minor(f)]
    found = [f for f in found if not rules.is_minor(f)]
    notes = []
    if not trace.steps:
        notes.append("no whole step was seen (no optimizer step, no backward, no model call): the analysis covers "
                     "everything the program ran")
    elif len(trace.steps) == 1:
        notes.append("one whole step was seen: the step includes the program's warm-up; run more steps "
                     "(--steps) for steady-state numbers and the shape check")
    if trace.meta.get("truncated"):
        notes.append(trace.meta["truncated"])
    for odd in trace.meta.get("steps_left_out") or []:
        notes.append(f"step {odd['step']} ran {odd['ops']:,} ops, {odd['ops'] / max(1, odd['least_ops']):.0f}x the "
                     "lightest step: an evaluation, a checkpoint or generation ran in it; it is left out of the "
                     "per-step analysis")
    steps = []
    for s in trace.steps:
        e = est.estimate_step(trace, c, s["step"], fallback_names=ctx.fallback)
        steps.append({"step": s["step"], "ops": s.get("ops"), "host_seconds": s.get("seconds"),
                      "data_wait_s": s.get("data_wait_s"), "est_ms": round(e.total_s * 1e3, 4),
                      "syncs": e.syncs})
    return Findings(findings=found, minor=minor, estimate=ctx.estimate.to_dict(trace), steps=steps, notes=notes,
                    meta={"device": c.name, "device_id": c.entry_id, "steps_analysed": ctx.steps,
                          "step_estimated": ctx.step, "step_unit": trace.step_unit,
                          "ops_recorded": len(trace.ops), **{k: v for k, v in trace.meta.items()
                                                              if k in ("program", "torch", "emulated", "stopped", "root",
                                                                       "steps_asked", "device_name")}})


