"""``ascendify advise``'s work: run the program on the emulated NPU under the tracer, analyse, write the outputs.

The program runs in this process as ``ascendify run --to npu`` runs it (CUDA calls redirected to the NPU, the
emulated one where no real NPU is present; torch_npu code runs as it is), with a :class:`Tracer` watching it and
stopping it after ``--steps`` steps. Outputs: the terminal summary (stdout), ``--json FILE``, ``--html DIR``
(``advise.html`` and ``advise.json``), ``--trace FILE`` (the raw trace, for ``--from-trace``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ascendify.advise.trace import Trace, Tracer

ENV_DIR = "ASCENDIFY_ADVISE"
ENV_STEPS = "ASCENDIFY_ADVISE_STEPS"
ENV_DEVICE = "ASCENDIFY_ADVISE_DEVICE"


def trace_program(prog, *, steps: int | None, to: str = "npu", capture_model: bool = False,
                  root: str | None = None) -> tuple[int, Trace, Any]:
    """Run ``prog`` (an :class:`ascendify.program.Program`) redirected to ``to`` under a tracer; returns
    ``(exit status, trace, captured)`` where ``captured`` is ``(model, first args)`` with ``capture_model`` (else
    None). Raises ``RuntimeError`` when the redirection cannot be had."""
    from ascendify.auto import runner as auto_runner

    try:
        auto_runner.enable_for_process(to, strict=False, log=None, entry=prog.path, quiet=True, at_exit=False,
                                       rewrite_checks=True)
    except Exception as e:  # the emulator refused to start, an unknown target: one line, no traceback
        raise RuntimeError(f"cannot run on {to}: {type(e).__name__}: {e}") from None
    # the first step (the warm-up) is not analysed when there are others: its ops are not recorded
    tracer = Tracer(steps=steps, root=root or os.getcwd(), capture_model=capture_model,
                    record_from=1 if steps and steps >= 2 else 0)
    code = 1
    try:
        tracer.start()
        code = auto_runner.run_program(prog)
    finally:
        trace = tracer.stop()
        try:
            auto_runner.finish(log=None, quiet=True)
        except Exception:  # noqa: BLE001 (the report of the redirection is not ours to print)
            pass
    trace.meta["program"] = prog.display()
    trace.meta["exit_code"] = code
    return code, trace, tracer.captured


def write_outputs(result, trace: Trace, *, json_path: str | None, html_dir: str | None,
                  trace_path: str | None) -> list[str]:
    """Write what was asked; returns the paths written."""
    from ascendify import report

    written = []
    doc = result.to_dict()
    if json_path:
        report.write_json(json_path, doc)
        written.append(json_path)
    if trace_path:
        report.write_json(trace_path, trace.to_dict())
        written.append(trace_path)
    if html_dir:
        os.makedirs(html_dir, exist_ok=True)
        page = report.HtmlReport("ascendify advise", subtitle=result.meta.get("program") or "")
        from ascendify.advise.render import fill_section

        fill_section(page.section("Make it fast on the NPU", anchor="advise"), result)
        path = os.path.join(html_dir, "advise.html")
        page.write(path)
        report.write_json(os.path.join(html_dir, "advise.json"), doc)
        written += [path, os.path.join(html_dir, "advise.json")]
    return written


def load_trace(path: str) -> Trace:
    from ascendify.core.fileio import read_json

    return Trace.from_dict(read_json(path))


# -- capture inside a run someone else drives (ascendify port) -------------------------------------------------

_ACTIVE: Tracer | None = None


def capture_from_env(environ: dict[str, str] | None = None) -> Tracer | None:
    """``ASCENDIFY_ADVISE=DIR``: trace this program (the main process only) and write ``DIR/trace.json`` and
    ``DIR/advise.json`` (the analysis for ``ASCENDIFY_ADVISE_DEVICE``, default the 910B3) when it ends.
    ``ASCENDIFY_ADVISE_STEPS=N`` stops it after N steps; without it the program is never stopped by the tracer
    (the observer of ``ascendify port`` stops it)."""
    global _ACTIVE
    env = os.environ if environ is None else environ
    out = env.get(ENV_DIR)
    if not out or _ACTIVE is not None:
        return _ACTIVE
    owner = env.get("ASCENDIFY_ADVISE_PID")
    if owner and owner != str(os.getpid()):
        return None
    os.environ["ASCENDIFY_ADVISE_PID"] = str(os.getpid())
    try:
        steps = int(env.get(ENV_STEPS) or 0) or None
    except ValueError:
        steps = None
    tracer = Tracer(steps=steps, root=os.getcwd()).start()
    _ACTIVE = tracer
    from ascendify.program import scriptrun

    def finish(exit_code: int, error: BaseException | None) -> None:
        global _ACTIVE
        t, _ACTIVE = _ACTIVE, None
        if t is None:
            return
        trace = t.stop()
        trace.meta["exit_code"] = exit_code
        try:
            from ascendify import report
            from ascendify.advise.analysis import analyze

            report.write_json(os.path.join(out, "trace.json"), trace.to_dict())
            result = analyze(trace, env.get(ENV_DEVICE) or None)
            report.write_json(os.path.join(out, "advise.json"), result.to_dict())
        except Exception as e:  # noqa: BLE001 (the user's run must never fail because of us)
            print(f"ascendify: could not write the advise trace to {out}: {e}", file=sys.stderr)

    scriptrun.at_program_exit(finish, hide=__file__)
    return tracer


def summary_line(result: Any, written: list[str]) -> str:
    from ascendify.advise.render import headline

    tail = f"; written {', '.join(written)}" if written else ""
    return f"ascendify advise: {headline(result)}{tail}"
