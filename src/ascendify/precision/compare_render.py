"""What ``ascendify compare`` shows and writes: a terminal summary (verdict and first divergence in the first lines),
CSV (msprobe's column names where the metric is the same), JSON, and one self-contained HTML page, all through
``ascendify.report``. Outputs are built in memory first and then written atomically, so a failure leaves no
half-written set.
"""

from __future__ import annotations

import linecache
import math
import os
from pathlib import Path
from typing import Any

from ascendify import report
from ascendify.precision import autocast_policy, randomness
from ascendify.precision.curves import CurvesResult
from ascendify.precision.divergence import ComparisonResult, NodeResult, culprits

# msprobe compare's column names first (same meaning), ours after
CSV_COLUMNS = [
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "NormRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "Result",
    "Err_message",
    "NPU_Stack_Info",
    "Module",
    "API",
    "Class",
    "Order",
    "Compute Dtype",
    "Local RelL2",
    "Limit",
    "Code RelL2",
    "Input RelL2",
    "Output RelL2",
    "ULP Max",
    "Fingerprint RelErr",
    "Culprit",
]


def _f(v: Any) -> Any:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return float(f"{v:.6g}")
    return v


def _rel(m: dict | None) -> float | None:
    if not m:
        return None
    v = m.get("rel_l2", m.get("worst"))
    return None if v is None else float(v)


def node_status(n: NodeResult, culprit: bool) -> str:
    if not n.matched and not n.flagged:  # a call the golden never made is flagged when NaN/Inf appears in it
        return "skip"
    if n.not_comparable:
        return "not comparable"
    if n.flagged:
        return "error" if culprit else "warning"
    return "pass"


def csv_rows(result: ComparisonResult) -> list[dict[str, Any]]:
    """One row per target node, msprobe's columns first (see ``CSV_COLUMNS``)."""
    cul = set(culprits(result.nodes))
    rows = []
    for i, n in enumerate(result.nodes):
        m = n.local or n.total or {}
        dt = m.get("dtype") or [None, None]
        sh = m.get("shape") or [None, None]
        rows.append(
            {
                "NPU Name": n.name,
                "Bench Name": n.golden_name or "N/A",
                "NPU Dtype": dt[0],
                "Bench Dtype": dt[1],
                "NPU Tensor Shape": sh[0],
                "Bench Tensor Shape": sh[1],
                "Cosine": _f(m.get("cosine")),
                "EucDist": None,
                "MaxAbsErr": _f(m.get("max_abs")),
                "MaxRelativeErr": _f(m.get("max_rel")),
                "NormRelativeErr": _f(m.get("norm")),
                "One Thousandth Err Ratio": _f(m.get("thousandth")),
                "Five Thousandths Err Ratio": _f(m.get("five_thousandth")),
                "Result": node_status(n, i in cul),
                "Err_message": "; ".join(n.reasons) or (n.note or ""),
                "NPU_Stack_Info": n.source,
                "Module": n.module,
                "API": n.api,
                "Class": n.class_name,
                "Order": n.order,
                "Compute Dtype": n.compute_dtype,
                "Local RelL2": _f(_rel(n.local)),
                "Limit": _f(n.limit),
                "Code RelL2": _f(_rel(n.code)),
                "Input RelL2": _f(_rel(n.inputs)),
                "Output RelL2": _f(_rel(n.total)),
                "ULP Max": _f(m.get("ulp_max")),
                "Fingerprint RelErr": _f(m.get("fingerprint")),
                "Culprit": "yes" if i in cul else "",
            }
        )
    return rows


def _where(fd) -> str:
    if getattr(fd, "name", None) == "(loss)":
        return "the loss (its gradient with respect to the outputs)"
    where = fd.module if fd.module is not None else "(outside any module)"
    return f"{where or '(root)'}" + (f" [{fd.api}]" if fd.api else "") + (f" ({fd.class_name})" if fd.class_name else "")


def _weights_note(result: ComparisonResult) -> str:
    w = result.weights or {}
    if w.get("copied"):
        return f" (weights copied from the golden: {w.get('copy_reason')})"
    return ""


def headline(result: ComparisonResult) -> tuple[str, str]:
    """``(status, text)`` for the first line: differing weights first, then the first divergence (forward before
    backward), with the weights' copy said when it happened."""
    fd = result.first_divergence
    wf = result.weight_findings
    if wf:
        w0 = wf[0]
        rel = f", rel L2 {w0['rel_l2']:.3g}" if w0.get("rel_l2") is not None else f", {w0.get('why')}"
        text = (f"DIVERGENCE: {len(wf)} weight(s) differ before any call, first {w0['name']}{rel}; "
                + (f"first {fd.phase} call over its limit: {_where(fd)}" if fd is not None else
                   "no call over its limit"))
        return "diverged", text
    if fd is None and result.golden_nonfinite and not result.not_comparable:
        return "not comparable", "NOT COMPARABLE: the golden itself holds NaN/Inf (above); nothing after it is proof"
    if fd is None and result.not_comparable:
        n = result.not_comparable[0]
        where = n.module if n.module is not None else "(outside any module)"
        what = f"{where or '(root)'}" + (f" [{n.api}]" if n.api else "") + (f" ({n.class_name})" if n.class_name else "")
        return "not comparable", f"NOT COMPARABLE after {what}: random draws differ"
    if fd is None and result.missing_grads:
        m = result.missing_grads[0]
        return "diverged", (f"DIVERGENCE (backward): {len(result.missing_grads)} parameter(s) with a gradient on one "
                            f"side only, first {m['name']} (none on the {m['side']})")
    if fd is None:
        return "match", (
            f"MATCH: {result.matched_count} matched calls, none with local error over its limit"
            + (f" (end-to-end cosine {result.end_to_end.get('cosine', 1):.6f})" if result.end_to_end else "")
            + _weights_note(result)
        )
    phase = " (backward)" if fd.phase == "backward" else ""
    return "diverged", f"DIVERGENCE{phase}: first at {_where(fd)}" + _weights_note(result)


def weight_lines(result: ComparisonResult, limit: int = 5) -> list[str]:
    """The weights check: the differing tensors (at most ``limit``), the name mapping used, names on one side."""
    w = result.weights or {}
    if not w:
        return []
    lines = []
    wf = result.weight_findings
    for d in wf[:limit]:
        golden = f" (golden {d['golden_name']})" if d.get("golden_name") else ""
        nums = (f"max abs {d['max_abs']:.3g}, rel L2 {d['rel_l2']:.3g}" if d.get("rel_l2") is not None else "")
        lines.append(f"  weight {d['name']}{golden} of {d['owner'] or '(root)'}: {nums}{'; ' if nums else ''}"
                     f"{d.get('why')}")
    if len(wf) > limit:
        lines.append(f"  ... and {len(wf) - limit} more weight(s) (see the report)")
    if w.get("mapping"):
        shown = ", ".join(f"{m['golden']} -> {m['target']}" for m in w["mapping"][:limit])
        more = f" and {len(w['mapping']) - limit} more" if len(w["mapping"]) > limit else ""
        lines.append(f"  weights paired {w.get('how')}: {shown}{more}")
    if w.get("missing"):
        lines.append("  weights on one side only: " + ", ".join(f"{m['name']} ({m['side']})" for m in w["missing"][:limit])
                     + (f" and {len(w['missing']) - limit} more" if len(w["missing"]) > limit else ""))
    if w.get("golden_nonfinite"):
        g0 = w["golden_nonfinite"][0]
        lines.append(f"  the golden's weights hold NaN/Inf: {g0['name']} ({g0['nonfinite']} of {g0['numel']})")
    return lines


def golden_line(result: ComparisonResult) -> str | None:
    """The line said before anything else when the golden itself produced NaN/Inf."""
    g = result.golden_nonfinite
    if not g:
        return None
    return (f"GOLDEN NOT FINITE: the golden's own output holds NaN/Inf, first at {g['call']} ({g['nan']} NaN, "
            f"{g['inf']} Inf)" + (f" called at {g['source']}" if g.get("source") else "")
            + ": fix the reference first, comparisons after it prove nothing")


def summary_lines(result: ComparisonResult) -> list[str]:
    """The verdict and the first divergence as plain lines (the first lines of the terminal summary); a golden
    that is not finite is said first, differing weights before the calls."""
    status, text = headline(result)
    gl = golden_line(result)
    lines = ([gl] if gl else []) + [text] + weight_lines(result)
    fd = result.first_divergence
    if status == "not comparable" and result.not_comparable:
        n = result.not_comparable[0]
        lines.append(f"  random call: {n.name}" + (f" at {n.source}" if n.source else ""))
        lines.append(
            f"  nothing flagged: {result.matched_count} of {len(result.nodes)} target calls matched, those after "
            "it inherit its difference"
        )
        lines.append(f"  fix: {randomness.ADVICE}")
    if fd is not None:
        gname = result.nodes[fd.index].golden_name
        if gname and gname != fd.name:
            lines.append(f"  compared with golden {gname}")
        lines.append(f"  why: {'; '.join(fd.reasons)}")
        if fd.source:
            lines.append(f"  called at: {fd.source}" + (f"   code at: {fd.defined_at}" if fd.defined_at else ""))
        n_cul = len(culprits(result.nodes))
        lines.append(
            f"  {len(result.flagged)} flagged calls, {n_cul} with no flagged call inside "
            f"({result.matched_count} of {len(result.nodes)} target calls matched)"
        )
    renamed = [n for n in result.nodes if n.golden_name and n.golden_name != n.name and n.phase == "forward"]
    if renamed:
        shown = ", ".join(f"{n.golden_name} -> {n.name}" for n in renamed[:3])
        lines.append(f"  mapping: {len(renamed)} target call(s) compared with a golden call of another name or class: "
                     f"{shown}" + (" ..." if len(renamed) > 3 else ""))
    if result.missing_grads:
        shown = ", ".join(f"{m['name']} (none on the {m['side']}: {m['why']})" for m in result.missing_grads[:5])
        more = f" and {len(result.missing_grads) - 5} more" if len(result.missing_grads) > 5 else ""
        lines.append(f"  gradient on one side only: {shown}{more}")
    lines += autocast_policy.summary_lines(result)
    if result.unmatched_golden or result.unmatched_target:
        names = [f"golden {u['name']}" for u in result.unmatched_golden[:3]] + [
            f"target {u['name']}" for u in result.unmatched_target[:3]]
        lines.append(
            f"  unmatched: {len(result.unmatched_golden)} golden, {len(result.unmatched_target)} target calls: "
            + ", ".join(names) + (" ..." if len(result.unmatched_golden) + len(result.unmatched_target) > 6 else "")
        )
    return lines


_NODE_COLUMNS = [
    report.Column("order", "#", kind="number"),
    report.Column("result", "result", kind="status"),
    report.Column("name", "target call", kind="path"),
    report.Column("dtype", "computed in"),
    report.Column("local", "local err", kind="number"),
    report.Column("limit", "limit", kind="number"),
    report.Column("code", "code err", kind="number"),
    report.Column("output", "output err", kind="number"),
    report.Column("why", "why"),
]


def _node_rows(result: ComparisonResult, only_flagged: bool = False, not_comparable: bool = False) -> list[dict[str, Any]]:
    cul = set(culprits(result.nodes))
    rows = []
    for i, n in enumerate(result.nodes):
        if only_flagged and not n.flagged and not (not_comparable and n.not_comparable):
            continue
        rows.append(
            {
                "order": n.order,
                "result": node_status(n, i in cul),
                "name": n.name,
                "golden": n.golden_name or "(unmatched)",
                "dtype": (n.compute_dtype or "").replace("torch.", ""),
                "local": _f(_rel(n.local)),
                "limit": _f(n.limit),
                "code": _f(_rel(n.code)),
                "output": _f(_rel(n.total)),
                "why": "; ".join(n.reasons) or (n.note or ""),
                "source": n.source,
            }
        )
    return rows


def print_summary(result: ComparisonResult, console=None, written: list[str] | None = None, limit: int = 12) -> None:
    """Verdict and first divergence first, then the flagged calls (at most ``limit``) and the files written."""
    con = console or report.console()
    status, _ = headline(result)
    style = {"diverged": "bold red", "not comparable": "bold yellow"}.get(status, "bold green")
    lines = summary_lines(result)
    if golden_line(result):
        report.print_wrapped(con, lines.pop(0), style="bold yellow")
    report.print_wrapped(con, lines[0], style=style)
    for line in lines[1:]:
        report.print_wrapped(con, line)
    rows = _node_rows(result, only_flagged=True, not_comparable=True)
    if rows:
        # every column with a value: the reporting layer folds the texts and splits a table that cannot fit; a
        # column empty in every shown row (code err of a dump comparison: dumps have no code check) is left out
        shown = sorted(rows, key=lambda r: (r["result"] != "error", r["order"]))[:limit]
        cols = [c for c in _NODE_COLUMNS
                if c.name in ("order", "result", "name") or any(r.get(c.name) not in (None, "") for r in shown)]
        title = f"flagged calls ({len(result.flagged)})"
        if result.not_comparable:
            title += f" and not comparable ({len(result.not_comparable)})"
        report.print_table(cols, shown, title=title, console=con)
    for path in written or []:
        con.print(f"  wrote {path}", highlight=False, markup=False)


def _source_snippet(source: str | None, radius: int = 4) -> tuple[str, int, int] | None:
    if not source or ":" not in source:
        return None
    path, _, line = source.rpartition(":")
    if not line.isdigit():
        return None
    ln = int(line)
    lines = [linecache.getline(path, i) for i in range(max(1, ln - radius), ln + radius + 1)]
    if not any(lines):
        return None
    return "".join(lines).rstrip("\n"), max(1, ln - radius), ln


def html_report(result: ComparisonResult) -> report.HtmlReport:
    """The self-contained page: verdict, first divergence with its source, error along execution order (plot with
    the limit line), flagged calls, a drill-down table of every call, unmatched calls, settings."""
    status, text = headline(result)
    page = report.HtmlReport("ascendify compare", subtitle=f"golden: {result.golden} | target: {result.target}")
    s = page.section("Verdict", anchor="verdict")
    detail = " | ".join(x.strip() for x in summary_lines(result)[1:]) or None
    s.verdict({"diverged": "fail", "not comparable": "warn"}.get(status, "ok"), text, detail)
    _html_weights(page, result)
    fd = result.first_divergence
    if fd is not None:
        d = page.section("First divergence", anchor="first-divergence")
        d.kv(
            {
                "phase": fd.phase,
                "call": fd.name,
                "module": fd.module if fd.module is not None else "(none)",
                "api": fd.api or "",
                "class": fd.class_name or "",
                "why": "; ".join(fd.reasons),
                "called at": fd.source or "",
                "code at": fd.defined_at or "",
                "cosine": fd.metrics.get("cosine"),
                "relative L2": fd.metrics.get("rel_l2", fd.metrics.get("worst")),
                "max abs": fd.metrics.get("max_abs"),
            }
        )
        for label, src in (("called at", fd.source), ("code at", fd.defined_at)):
            snip = _source_snippet(src)
            if snip:
                d.code(snip[0], first_line=snip[1], highlight=snip[2], title=f"{label} {src}")
    p = page.section("Error along execution order", anchor="error-plot")
    xs, local, out = [], [], []
    for n in result.nodes:
        if not n.matched or not n.limit:
            continue
        xs.append(n.order)
        le = _rel(n.local) if n.local else _rel(n.code)
        ce = _rel(n.code)
        r = max((le or 0.0) / n.limit, (ce or 0.0) / (n.code_limit or n.limit))
        local.append(max(r, 1e-6))
        oe = _rel(n.total)
        out.append(max((oe or 0.0) / n.limit, 1e-6) if oe is not None and math.isfinite(oe) else 1e-6)
    if xs:
        png = report.plots.line_plot(
            {"output error / limit": (xs, [min(v, 1e6) for v in out]),
             "local error / limit": (xs, [min(v, 1e6) for v in local])},
            title="error per call, in execution order",
            xlabel="call (execution order)",
            ylabel="error / limit",
            logy=True,
            hline=1.0,
            hline_label="limit",
            mark_x=result.nodes[fd.index].order if fd is not None else None,
            mark_label="first divergence" if fd is not None else None,
        )
        p.image(png, caption="Local error (the call's own, on golden inputs) and output error (with what it "
                "inherited) over the limit for the dtype it computed in; above 1 is over the limit.")
    else:
        p.text("No matched call carries a measured error.")
    rows = _node_rows(result)
    f = page.section("Flagged calls", anchor="flagged")
    flagged = [r for r in rows if r["result"] in ("error", "warning")]
    if flagged:
        f.text("error: a culprit (over its limit with no flagged call inside); warning: contains a culprit.")
        f.table(_NODE_COLUMNS, flagged, highlight=lambda r: r["result"] == "error")
    else:
        f.text("None.")
    t = page.section("All calls", anchor="drill-down")
    cols = [*_NODE_COLUMNS[:3], report.Column("golden", "golden call", kind="path"), *_NODE_COLUMNS[3:],
            report.Column("source", "called at", kind="path")]
    t.table(cols, rows, highlight=lambda r: r["result"] == "error", filter=True)
    if result.missing_grads:
        m = page.section("Gradients on one side only", anchor="missing-grads")
        m.text("Parameters with a gradient in one run and none in the other (a cut: .detach(), torch.no_grad(), a "
               "frozen parameter). The culprit is the first backward call flagged above; these are its consequences.")
        m.table([report.Column("name", "parameter", kind="path"), report.Column("owner", kind="path"),
                 report.Column("side", "no gradient on"), report.Column("why")], result.missing_grads)
    u = page.section("Unmatched calls", anchor="unmatched")
    ucols = [report.Column("side"), report.Column("name", kind="path"), report.Column("reason")]
    urows = [{"side": "golden", **x} for x in result.unmatched_golden] + [
        {"side": "target", **x} for x in result.unmatched_target
    ]
    if urows:
        u.table(ucols, urows)
    else:
        u.text("Every call found its counterpart.")
    autocast_policy.html_section(page, result)
    page.section("Settings", anchor="settings").kv(
        {k: v for k, v in result.meta.items() if not isinstance(v, dict)} | {"mode": result.mode}
    )
    return page


def _html_weights(page, result: ComparisonResult) -> None:
    """The golden's own NaN/Inf (first), then the weights check: every differing tensor, the mapping, one-sided
    names."""
    gl = golden_line(result)
    if gl:
        page.section("Golden not finite", anchor="golden-nonfinite").verdict("warn", gl, None)
    w = result.weights
    if not w:
        return
    sec = page.section("Weights", anchor="weights")
    summary = (f"{w.get('compared')} parameters and buffers compared {w.get('how')}: {len(w.get('differ') or [])} "
               "differ" + (f"; the golden's were copied into the target ({w.get('copy_reason')})" if w.get("copied")
                           else ("; each is a finding (the target kept its own weights)" if w.get("differ") else "")))
    sec.text(summary)
    if w.get("differ"):
        sec.table([report.Column("name", "tensor", kind="path"), report.Column("golden_name", "golden name", kind="path"),
                   report.Column("owner", "module", kind="path"), report.Column("max_abs", "max abs", kind="number"),
                   report.Column("rel_l2", "rel L2", kind="number"), report.Column("why")],
                  [{**d, "owner": d.get("owner") or "(root)", "max_abs": _f(d.get("max_abs")),
                    "rel_l2": _f(d.get("rel_l2"))} for d in w["differ"]],
                  highlight=lambda r: not w.get("copied"))
    if w.get("mapping"):
        sec.table([report.Column("golden", kind="path"), report.Column("target", kind="path")], w["mapping"],
                  caption="tensors paired although their names differ (the mapping used)")
    if w.get("missing"):
        sec.table([report.Column("name", kind="path"), report.Column("side")], w["missing"],
                  caption="names on one side only (not compared)")


def write_outputs(result: ComparisonResult, out_dir: str | os.PathLike[str], stem: str = "compare") -> list[str]:
    """Write ``compare.json``, ``compare.csv`` and ``compare.html`` into ``out_dir`` (built first, then written
    atomically). Returns the paths."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out}: exists and is not a folder")
    payload = result.to_dict()
    rows = csv_rows(result)
    page = html_report(result).to_html()
    json_text = report.dumps_json(payload)
    out.mkdir(parents=True, exist_ok=True)
    from ascendify.core.fileio import write_atomic

    paths = [out / f"{stem}.json", out / f"{stem}.csv", out / f"{stem}.html"]
    write_atomic(paths[0], json_text, mode=0o644)
    report.write_csv(paths[1], rows, CSV_COLUMNS)
    write_atomic(paths[2], page, mode=0o644)
    return [str(p) for p in paths]


# ---------------------------------------------------------------------------------------------------------------
# curves


def curves_summary_lines(res: CurvesResult) -> list[str]:
    first = res.first
    if res.verdict == "nothing to compare":
        lines = ["NOTHING TO COMPARE: no series in both histories (timings are reported, not checked)"]
    elif first is None:
        lines = [f"MATCH: every checked series stays within {res.tolerance:g} (relative) of the other run"]
    else:
        apart = (f"{first['rel_diff']:.2%} apart" if math.isfinite(first["rel_diff"])
                 else "one is NaN")  # not "inf% apart"
        lines = [
            f"DIVERGENCE: {first['series']} leaves the band at step {first['step']:g} "
            f"({first['a']:.6g} vs {first['b']:.6g}, {apart}; band {res.tolerance:.2%})"
        ]
    # a run that stopped early (crashed, cut short) is compared on the steps both have: say so next to the verdict
    short = [(k, v["steps_a"], v["steps_b"]) for k, v in res.series.items()
             if v.get("checked") and v["steps_a"] != v["steps_b"]]
    if short:
        lines.append("  compared on the steps both runs have: " + ", ".join(
            f"{k} {min(na, nb)} of {max(na, nb)} ({'A' if na < nb else 'B'} stops early)" for k, na, nb in short))
    if res.only_in_a or res.only_in_b:
        lines.append(f"  only in A: {', '.join(res.only_in_a) or '-'}; only in B: {', '.join(res.only_in_b) or '-'}")
    return lines


_CURVE_COLUMNS = [
    report.Column("series"),
    report.Column("result", kind="status"),
    report.Column("steps", kind="number"),
    report.Column("first", "first outside", kind="number"),
    report.Column("max_rel", "max rel diff", kind="number"),
    report.Column("note"),
]


def _curve_rows(res: CurvesResult) -> list[dict[str, Any]]:
    rows = []
    for name, v in res.series.items():
        fo = v.get("first_outside")
        rows.append(
            {
                "series": name,
                "result": ("fail" if fo else "pass") if v.get("checked") else "skip",
                "steps": v["steps"],
                "first": fo["step"] if fo else None,
                "max_rel": _f(v["max_rel_diff"]),
                "note": v.get("note", ""),
            }
        )
    return rows


def print_curves(res: CurvesResult, console=None, written: list[str] | None = None) -> None:
    con = console or report.console()
    lines = curves_summary_lines(res)
    report.print_wrapped(con, lines[0], style="bold red" if res.first else "bold green")
    for line in lines[1:]:
        report.print_wrapped(con, line)
    report.print_table(_CURVE_COLUMNS, _curve_rows(res), title="training curves", console=con)
    for path in written or []:
        con.print(f"  wrote {path}", highlight=False, markup=False)


def write_curves_outputs(res: CurvesResult, out_dir: str | os.PathLike[str], stem: str = "curves") -> list[str]:
    """``curves.json``, ``curves.csv`` (one row per series and step) and ``curves.html`` (a plot per series)."""
    page = report.HtmlReport("ascendify compare --curves", subtitle=f"A: {res.a} | B: {res.b}")
    lines = curves_summary_lines(res)
    page.section("Verdict", anchor="verdict").verdict(
        "fail" if res.first else "ok", lines[0], "\n".join(lines[1:]) or None
    )
    s = page.section("Series", anchor="series")
    s.table(_CURVE_COLUMNS, _curve_rows(res))
    csv_rows_: list[dict[str, Any]] = []
    for name, v in res.series.items():
        fo = v.get("first_outside")
        png = report.plots.line_plot(
            {"A": (v["x"], v["a"]), "B": (v["x"], v["b"])},
            title=name,
            xlabel="step",
            ylabel=name,
            mark_x=fo["step"] if fo else None,
            mark_label="first step outside the band" if fo else None,
            markers=len(v["x"]) <= 60,
        )
        s.image(png, caption=f"{name}: A vs B" + (f"; leaves the band at step {fo['step']:g}" if fo else ""))
        for x, a, b in zip(v["x"], v["a"], v["b"], strict=True):
            csv_rows_.append({"series": name, "step": x, "a": a, "b": b, "abs_diff": _f(abs(a - b))})
    page_html = page.to_html()
    json_text = report.dumps_json(res.to_dict())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from ascendify.core.fileio import write_atomic

    paths = [out / f"{stem}.json", out / f"{stem}.csv", out / f"{stem}.html"]
    write_atomic(paths[0], json_text, mode=0o644)
    report.write_csv(paths[1], csv_rows_, ["series", "step", "a", "b", "abs_diff"])
    write_atomic(paths[2], page_html, mode=0o644)
    return [str(p) for p in paths]
