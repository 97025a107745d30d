"""``ascendify advise``: why a program will be slow on an Ascend NPU, and what to change, before you have one.

The program runs on the emulated NPU (a CUDA program through ``ascendify run``'s redirection) for a few steps while
:class:`~ascendify.advise.trace.Tracer` records every ATen call with its shapes, dtypes and the user's line. The
analysis (:func:`analyze`) then looks for the patterns that make NPU training slow (``rules``: host-device syncs,
shapes that change, operators with no NPU kernel, float64, hand-written RMSNorm/rotary/SwiGLU/attention and
per-parameter optimizers, fp32 matmuls, unaligned matmul dimensions, starved data loaders, a host-bound step), and
weighs each with a roofline estimate of the step on the target chip (``estimate``). On a real NPU the torch_npu
profiler's output is read instead (``profile``). ``apply`` rewrites the fused-operator findings in a copy of the
project and proves the rewrite with a lockstep comparison.

API (for ``ascendify port`` and scripts)::

    from ascendify import advise
    tracer = advise.Tracer(steps=None).start()     # in a run already being watched: nothing stops the program
    ...                                            # the program's steps
    trace = tracer.stop()
    result = advise.analyze(trace, device="Ascend910B3")   # -> Findings (findings, estimate, notes)
    advise.render_terminal(result)                 # 80 columns
    advise.render_section(html_report.section("Make it fast on the NPU"), result)
    result.to_dict()                               # JSON (schema ascendify.advise/1)

    advise.capture_from_env()                      # in a child: ASCENDIFY_ADVISE=DIR writes DIR/trace.json at exit
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ascendify.advise.model import FAMILIES, Finding, Findings
from ascendify.advise.trace import StopTrace, Trace, Tracer

if TYPE_CHECKING:
    from ascendify.report import Section

DEFAULT_DEVICE = "Ascend910B3"

__all__ = ["DEFAULT_DEVICE", "FAMILIES", "Finding", "Findings", "StopTrace", "Trace", "Tracer", "analyze",
           "capture_from_env", "render_section", "render_terminal"]


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


def render_terminal(result: Findings, file: Any = None, width: int = 80) -> None:
    """Print the findings and the estimate (fits ``width`` columns)."""
    from ascendify.advise.render import print_terminal

    print_terminal(result, file=file, width=width)


def render_section(section: Section, result: Findings, *, plots: bool = True) -> Section:
    """Fill ``section`` (a :class:`ascendify.report.Section`) with the findings and the estimate, in the shared
    report layer's style; returns it. ``port`` calls it with a "Make it fast on the NPU" section."""
    from ascendify.advise.render import fill_section

    return fill_section(section, result, plots=plots)


def capture_from_env() -> Tracer | None:
    """In a program started with ``ASCENDIFY_ADVISE=DIR`` (and optionally ``ASCENDIFY_ADVISE_STEPS=N``): start a
    tracer now and write ``DIR/trace.json`` when the program ends (``ascendify.program.scriptrun``'s exit hook).
    Nothing happens (and nothing heavy is imported) without the variable. Returns the tracer."""
    from ascendify.advise.runner import capture_from_env as _capture

    return _capture()
