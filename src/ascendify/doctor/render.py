"""The doctor's outputs: the terminal table (fits 80 columns), the Markdown report, the bug-report block, and the
``--explain`` text. JSON is the report dict itself (:func:`ascendify.report.dumps_json`)."""

from __future__ import annotations

from typing import Any

from ascendify import report

COLUMNS = [
    report.Column("status", kind="status"),
    report.Column("id", header="check"),
    report.Column("found", ratio=1),
]


def print_report(rep: dict[str, Any], console=None) -> None:
    con = console or report.console()
    report.print_table(COLUMNS, rep["checks"], console=con)
    todo = [r for r in rep["checks"] if r["status"] in ("fail", "warn") and r.get("fix")]
    if todo:
        con.print()
        con.print("[bold]To fix:[/bold]")
        for r in todo:
            style = report.status_style(r["status"])
            con.print(f"  [{style}]{r['id']}[/{style}]: ", end="")
            con.print(r["fix"], markup=False, highlight=False)
    s = rep["summary"]
    con.print()
    con.print(
        f"{report.plural(s['ok'], 'check')} ok, {s['warn']} warn, {s['fail']} fail, {s['skip']} skipped; "
        f"NPU: {s['npu']}",
        markup=False,
    )


def _line(label: str, value: Any) -> str:
    return f"- `{label}`: {value if value not in (None, '') else 'none'}"


def bug_report(rep: dict[str, Any]) -> str:
    """A Markdown block to paste into an issue (the style of ``accelerate env``): versions, devices, problems."""
    f = rep.get("facts") or {}
    o, pk, c, d = f.get("os") or {}, f.get("packages") or {}, f.get("cann") or {}, f.get("driver") or {}
    smi = d.get("npu_smi") or {}
    devs = smi.get("devices") or []
    names = sorted({x["name"] for x in devs})
    probe = f.get("torch_npu_probe") or {}
    lines = [
        "### Environment (`ascendify doctor --bug-report`)",
        "",
        _line("ascendify", rep.get("ascendify_version")),
        _line("OS", f"{o.get('distro') or o.get('system')}, kernel {o.get('kernel')}, {o.get('machine')}"),
        _line("Python", (f.get("python") or {}).get("version")),
        _line("torch", pk.get("torch") and (pk["torch"] + (f" (CUDA {pk['torch_cuda']})" if pk.get("torch_cuda") else ""))),
        _line("torch-npu", pk.get("torch-npu")),
        _line("CANN", c.get("version") and f"{c['version']} ({c.get('home')})"),
        _line("NPU driver", d.get("version")),
        _line("npu-smi", smi.get("version") if smi else None),
        _line("NPUs", f"{len(devs)} x {'/'.join(names)}" if devs else None),
        _line("torch.npu.is_available()", probe.get("is_available") if probe.get("ran") else "not run"),
    ]
    gpus = (f.get("cuda") or {}).get("gpus") or []
    if gpus:
        lines.append(_line("NVIDIA GPUs", f"{len(gpus)}"))
    env = f.get("env") or {}
    for k in ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "TORCH_DEVICE_BACKEND_AUTOLOAD"):
        if env.get(k):
            lines.append(_line(k, env[k]))
    for r in rep["checks"]:
        if r.get("section") == "device":
            lines.append(_line(r["title"], f"{r['status']}: {r['found']}"))
    s = rep["summary"]
    lines.append(_line("doctor", f"{s['ok']} ok, {s['warn']} warn, {s['fail']} fail, {s['skip']} skipped"))
    bad = [r for r in rep["checks"] if r["status"] in ("fail", "warn")]
    if bad:
        lines += ["", "| check | status | found |", "|---|---|---|"]
        lines += [f"| {r['id']} | {r['status']} | {_md(r['found'])} |" for r in bad]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def markdown(rep: dict[str, Any]) -> str:
    """The whole report as Markdown (``doctor.md``): every check with its fix, the device figures, the bug block."""
    s = rep["summary"]
    out = [
        "# ascendify doctor",
        "",
        f"{rep['generated']} · ascendify {rep['ascendify_version']} · verdict **{s['verdict']}** "
        f"({s['ok']} ok, {s['warn']} warn, {s['fail']} fail, {s['skip']} skipped) · NPU: {s['npu']}",
        "",
        "| status | check | found | fix |",
        "|---|---|---|---|",
    ]
    out += [f"| {r['status']} | {r['id']} | {_md(r['found'])} | {_md(r.get('fix', ''))} |" for r in rep["checks"]]
    for dv in rep.get("devices") or []:
        if not dv.get("smoke"):
            continue
        out += ["", f"## Device: {dv.get('label')} ({dv.get('name')})", "", "| op | dtype | rel. error | tolerance | status |",
                "|---|---|---|---|---|"]
        for sm in dv["smoke"]:
            err = f"{sm['rel_err']:.2e}" if "rel_err" in sm else sm.get("error", "")
            out.append(f"| {sm['op']} | {sm['dtype']} | {_md(err)} | {sm['tol']:.0e} ({sm['mode']}) | {sm['status']} |")
        perf = dv.get("perf") or {}
        if perf.get("matmul"):
            out += ["", "| matmul | n | TFLOP/s | peak | % of peak |", "|---|---|---|---|---|"]
            for m in perf["matmul"]:
                pk = f"{m['peak_tflops']:g}" if m.get("peak_tflops") else "-"
                pct = f"{m['pct_of_peak']:.1f}" if m.get("pct_of_peak") is not None else "-"
                out.append(f"| {m['dtype']} | {m['n']} | {m['tflops']:.4g} | {pk} | {pct} |")
        cp = perf.get("copy")
        if cp:
            link = f"{cp['link']} {cp['link_gbps']:g} GB/s" if cp.get("link_gbps") else "no published link peak"
            out += ["", f"Host to device {cp['h2d_gbps']:.2f} GB/s, device to host {cp['d2h_gbps']:.2f} GB/s "
                        f"({cp['mb']} MB, pinned: {cp['pinned']}; {link})."]
    out += ["", "## Bug report block", "", bug_report(rep)]
    return "\n".join(out)


def explain_text(groups: list[dict[str, Any]], source: str, width: int | None = None) -> str:
    """Plain text for ``--explain``: each matched entry with its lines, cause, fix and sources, wrapped to
    ``width`` (default: the terminal's; continuation lines indented, words and addresses never split)."""
    import textwrap

    from ascendify.report.tables import terminal_width

    width = width or terminal_width()

    def wrap(text: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False) or [text]

    if not groups:
        return f"no known error found in {source}\n"
    out = [f"{report.plural(len(groups), 'known error')} in {source}:", ""]
    for g in groups:
        out.append(f"[{g['id']}] {g['title']}  ({g['family']})")
        for m in g["matches"][:5]:
            out += wrap(f"line {m['line_no']}: {m['line'].strip()[:200]}")
        total = g.get("count", len(g["matches"]))
        if total > 5:
            out.append(f"  ... and {total - 5} more line(s)")
        out.append(f"  pattern: {g['matches'][0]['pattern']}")
        out += wrap(f"cause: {g['cause']}")
        out += wrap(f"fix: {g['fix']}")
        out += wrap(f"source: {'; '.join(g['sources'])}")
        out.append("")
    return "\n".join(out)
