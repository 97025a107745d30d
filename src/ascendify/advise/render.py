"""The findings as terminal text (80 columns) and as a section of the shared HTML report."""

from __future__ import annotations

import linecache
import os
import sys
import textwrap
from typing import Any

from ascendify.advise.model import FAMILIES, Findings


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f} ms"
    if v >= 1:
        return f"{v:.2f} ms"
    if v >= 0.001:
        return f"{v * 1e3:.0f} us"
    return f"{v * 1e3:.2f} us" if v > 0 else "0 ms"


def _weight(f) -> str:
    if f.weight_ms is None:
        return "per epoch" if f.rule == "ADV202" else ""
    share = f" ({f.share:.0%})" if f.share is not None and f.share >= 0.005 else ""
    return f"~{_ms(f.weight_ms)}{share}"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def headline(result: Findings) -> str:
    e = result.estimate or {}
    n = len(result.findings)
    where = "a real NPU's profile" if result.source == "profile" else "the emulated NPU"
    if e:
        step = f"estimated step on {result.meta.get('device')}: {_ms(e.get('step_ms'))}"
    else:
        step = "no estimate"
    return f"{n} finding{'s' if n != 1 else ''} from {where}; {step}"


def print_terminal(result: Findings, file: Any = None, width: int = 80) -> None:
    out = file or sys.stdout
    w = lambda s="": print(_fit(s, width), file=out)  # noqa: E731
    meta = result.meta
    prog = meta.get("program")
    src = "profile of a real NPU" if result.source == "profile" else "the emulated NPU"
    steps = meta.get("steps_analysed") or []
    w(f"ascendify advise: {prog or 'the program'}")
    unit = meta.get("step_unit") or "step"
    w(f"  {len(steps)} {unit}{'s' if len(steps) != 1 else ''} analysed on {src}, "
      f"{meta.get('ops_recorded', 0):,} ops recorded")
    e = result.estimate
    if e:
        w()
        measured = bool(e.get("measured"))
        if measured:
            w(f"Measured step on {e['chip']['name']}: {_ms(e['step_ms'])}   (torch_npu profiler)")
            parts = (("computing", "compute_bound_ms"), ("communication", "communication_ms"),
                     ("free (idle)", "host_bound_ms"))
        else:
            w(f"Estimated step on {e['chip']['name']}: {_ms(e['step_ms'])}   (an estimate: see the assumptions)")
            parts = (("compute-bound", "compute_bound_ms"), ("memory-bound", "memory_bound_ms"),
                     ("host-bound", "host_bound_ms"))
        total = max(e["step_ms"], 1e-12)
        for label, key in parts:
            v = e.get(key) or 0.0
            bar = "#" * int(round(30 * min(1.0, v / total)))
            w(f"  {label:<14}{_ms(v):>10}  {v / total:>4.0%}  {bar}")
        syncs = f"{e['syncs']} host-device sync{'s' if e['syncs'] != 1 else ''}"
        w(f"  {e['ops']:,} ops per step ({e['kernels']:,} kernels), {syncs}; "
          f"delivering them: {_ms(e['host_dispatch_ms'])}")
    w()
    if not result.findings:
        w("No findings: nothing in these steps is known to be slow on an Ascend NPU.")
    else:
        w(f"Findings ({len(result.findings)}), heaviest first:")
        for n, f in enumerate(result.findings, 1):
            w()
            head = f"{n:>2}  {f.rule}  {f.title}"
            wt = _weight(f)
            if len(head) + len(wt) + 2 > width:
                head = _fit(head, width - len(wt) - 2)
            w(f"{head}{' ' * max(2, width - len(head) - len(wt))}{wt}" if wt else head)
            loc = f"    {f.where}"
            w(f"{loc}   {f.code}" if f.code else loc)
            for line in textwrap.wrap(f.message, width - 4):
                w(f"    {line}")
            fix = [ln for ln in f.fix.splitlines() if ln.strip()][:3]
            for i, line in enumerate(fix):
                w(("    fix: " if i == 0 else "         ") + line)
            tail = f"ascendify advise --explain {f.rule}"
            if f.applicable:
                tail = "--apply rewrites it; " + tail
            w(f"    ({tail})")
    if result.minor:
        w()
        names = ", ".join(f"{f.rule} {f.where}" for f in result.minor[:4]) + (" ..." if len(result.minor) > 4 else "")
        for line in textwrap.wrap(f"{len(result.minor)} minor finding{'s' if len(result.minor) > 1 else ''} (each "
                                  f"under 1% of the estimated step; in the JSON): {names}", width):
            w(line)
    for note in result.notes:
        w()
        for line in textwrap.wrap(f"note: {note}", width):
            w(line)
    if e:
        w()
        w("Assumptions of the estimate:" if not e.get("measured") else "Where the numbers come from:")
        for a in e["assumptions"]:
            for i, line in enumerate(textwrap.wrap(a, width - 4)):
                w(("  - " if i == 0 else "    ") + line)


def fill_section(section, result: Findings, *, plots: bool = True):
    """Fill a :class:`ascendify.report.Section`: verdict, the estimate (with a plot of where the time goes), the
    findings table, and one sub-section per finding (the line in context, what was seen, why, the fix, sources)."""
    from ascendify import report

    n = len(result.findings)
    status = "ok" if n == 0 else "warn"
    section.verdict(status, headline(result),
                    "Each finding names a line of your code, what was seen there, why it is slow on an Ascend NPU "
                    "(with sources) and the fix. Weights are estimates of the time per step on the chip named.")
    e = result.estimate
    if e:
        est = section.section("Where the step's time would go (estimate)")
        est.kv({"chip": e["chip"]["name"], "estimated step": _ms(e["step_ms"]),
                "compute-bound": _ms(e["compute_bound_ms"]), "memory-bound": _ms(e["memory_bound_ms"]),
                "host-bound (not hidden)": _ms(e["host_bound_ms"]), "device busy": _ms(e["device_busy_ms"]),
                "host delivery": _ms(e["host_dispatch_ms"]), "ops per step": e["ops"], "kernels": e["kernels"],
                "host-device syncs": e["syncs"]})
        if plots:
            try:
                png = report.plots.bar_plot(["compute-bound", "memory-bound", "host-bound"],
                                            [e["compute_bound_ms"], e["memory_bound_ms"], e["host_bound_ms"]],
                                            title=f"Estimated step on {e['chip']['name']} (ms)", ylabel="ms",
                                            colors=["#1f77b4", "#2ca02c", "#d62728"], size=(6.0, 3.0))
                est.image(png, "The estimated step split by what bounds each part (an estimate).")
            except Exception:  # noqa: BLE001 (no matplotlib: the numbers are above)
                pass
        if e.get("top_ops"):
            cols = [report.Column("op"), report.Column("site", kind="path"), report.Column("shapes"),
                    report.Column("dtype"), report.Column("phase"), report.Column("calls", kind="number"),
                    report.Column("device_us", "device µs", kind="number"), report.Column("bound")]
            rows = [dict(r, shapes=" ".join(str(tuple(s)) for s in r["shapes"][:2])) for r in e["top_ops"]]
            est.table(cols, rows, caption="The costliest ops of the step (estimated device time)")
        est.text("Assumptions: " + " ".join(f"({i + 1}) {a}." for i, a in enumerate(e["assumptions"])))
    if result.findings:
        cols = [report.Column("n", kind="number"), report.Column("rule"), report.Column("title"),
                report.Column("where", kind="path"), report.Column("weight")]
        rows = [{"n": i, "rule": f.rule, "title": f.title, "where": f.where, "weight": _weight(f)}
                for i, f in enumerate(result.findings, 1)]
        section.table(cols, rows, caption="Findings, heaviest first")
        for i, f in enumerate(result.findings, 1):
            sub = section.section(f"{i}. {f.rule} {f.title}")
            sub.verdict("warn", f"{f.where}: {f.message}", f"{FAMILIES.get(f.family, f.family)}. "
                        f"Weight: {_weight(f) or 'n/a'} ({f.weight_basis}).")
            ctx = _context_lines(result, f)
            if ctx:
                sub.code(ctx[0], first_line=ctx[1], highlight=f.line, title=f.file)
            sub.text(f"Why it is slow on an Ascend NPU: {f.why}")
            sub.code(f.fix, title="fix")
            ev = {k: v for k, v in f.evidence.items() if not isinstance(v, (list, dict)) or len(str(v)) < 200}
            if ev:
                sub.kv(ev)
            for s in f.sources:
                sub.link(s["url"], s["what"])
    for note in result.notes:
        section.text(f"Note: {note}")
    return section


def _context_lines(result: Findings, f) -> tuple[str, int] | None:
    root = result.meta.get("root") or os.getcwd()
    if not f.file or not f.line:
        return None
    path = f.file if os.path.isabs(f.file) else os.path.join(root, f.file)
    if not os.path.exists(path):
        return None
    lo = max(1, f.line - 3)
    lines = [linecache.getline(path, i).rstrip("\n") for i in range(lo, f.line + 4)]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines), lo
