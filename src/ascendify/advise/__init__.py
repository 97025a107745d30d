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

from ascendify.advise.analysis import DEFAULT_DEVICE, analyze
from ascendify.advise.model import FAMILIES, Finding, Findings
from ascendify.advise.trace import StopTrace, Trace, Tracer

if TYPE_CHECKING:
    from ascendify.report import Section

__all__ = ["DEFAULT_DEVICE", "FAMILIES", "Finding", "Findings", "StopTrace", "Trace", "Tracer", "analyze",
           "capture_from_env", "render_section", "render_terminal"]


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
