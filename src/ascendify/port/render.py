"""The report of ``ascendify port`` for people: ``report.html`` (one self-contained page: the summary and the
verdict, the checklist, then each stage's section, linking every stage's own outputs) and the terminal summary
(80 columns: a line per stage, the checklist's failures, the verdict)."""

from __future__ import annotations

from pathlib import Path

from ascendify import report
from ascendify.port.options import EXIT_FINDING, EXIT_NOT_PROVEN, EXIT_OK, STAGE_IDS, TARGET_LABEL
from ascendify.port.result import PortResult
from ascendify.port.stages import BY_ID, bench, fast, overflow, train
from ascendify.port.stages.base import ANCHOR, StageResult, e, figs_html, secs


def html_report(result: PortResult) -> report.HtmlReport:
    status, sentence = result.verdict
    opts = result.context.options
    what = opts.shown_as or " ".join(result.command)
    sites = ((result.stages.get("migrate").facts if result.stages.get("migrate") else {}).get("totals") or {}).get(
        "cuda_sites")
    kind = " (CUDA)" if sites else (" (no CUDA code)" if sites == 0 else "")  # what migrate found, not assumed
    page = report.HtmlReport(
        f"ascendify {result.name}: {result.project.name}{kind} → Ascend NPU",
        subtitle=f"target: {TARGET_LABEL[result.target]} · {what} · exit {result.exit_code}",
    )
    _summary(page.section("Summary", anchor="summary"), result, status, sentence)
    _checklist(page.section("Migration checklist", anchor="checklist"), result)
    for n, sid in enumerate(STAGE_IDS, 1):
        res = result.stages[sid]
        sec = page.section(f"{n}. {res.title}", anchor=ANCHOR[sid])
        _stage_verdict(sec, res)
        if res.status not in ("skip", "error") or res.facts:
            try:
                BY_ID[sid].section(sec, res, result)
            except Exception as ex:  # noqa: BLE001 (a partial section beats no report)
                sec.verdict("error", f"this section could not be drawn: {type(ex).__name__}: {ex}")
        _commands(sec, res)
        _links(sec, res)
    advice = (result.stages["train"].facts or {}).get("advise") if "train" in result.stages else None
    if advice:  # the migrated run under advise's tracer: what will make the port slow on an NPU
        sec = page.section("Make it fast on the NPU (before you have one)", anchor="advise")
        try:
            fast.section(sec, advice)
        except Exception as ex:  # noqa: BLE001 (a partial section beats no report)
            sec.verdict("error", f"this section could not be drawn: {type(ex).__name__}: {ex}")
    return page


def exit_text(result: PortResult) -> str:
    """What the run's exit status means, for the page."""
    meaning = {EXIT_OK: "proven: both runs made their steps and the lockstep matched",
               EXIT_FINDING: "findings (see below)", EXIT_NOT_PROVEN: "not proven (see the verdict)",
               result.context.options.crash_exit: "a step crashed, or the original program failed"}
    return f"{result.exit_code}: " + meaning.get(result.exit_code, "see the docs")


def _summary(sec, result: PortResult, status: str, sentence: str) -> None:
    sec.verdict(status, sentence, result.target_reason)
    about = result.context.options.about
    sec.kv({
        "target": TARGET_LABEL[result.target],
        **(about if about else {"project": result.project.name, "command": " ".join(result.command),
                                "migrated copy": _shown_path(result.migrated)}),
        "wall time": f"{result.seconds:.1f} s ({result.lanes} processes at a time)",
        "CPU time": f"{result.cpu_seconds:.1f} s (all processes)",
        "exit status": exit_text(result),
    })
    rows = []
    for i, (sid, res) in enumerate(result.stages.items(), 1):
        rows.append({"n": i, "stage": sid, "status": res.status, "time": secs(res.seconds),
                     "CPU": secs(res.cpu_seconds) if res.jobs else "", "headline": res.headline})
    cols = [report.Column("n", "#", kind="number"), report.Column("stage"), report.Column("status", kind="status"),
            report.Column("time", align="right"), report.Column("CPU", align="right"), report.Column("headline")]
    sec.table(cols, rows)
    figs = [(p, c) for p, c in ((train.loss_png(result), train.loss_caption(result)),
                                (bench.bench_png(result), bench.bench_caption(result))) if p]
    if figs:
        sec.html(figs_html(figs))
    nav = " · ".join(f'<a href="#{ANCHOR[s]}">{e(s)}</a>' for s in result.stages if s != "report")
    sec.html(f"<p>Jump to: {nav}</p>")


def _checklist(sec, result) -> None:
    marks = [i["mark"] for i in result.checklist]
    status = "fail" if "✗" in marks else "ok"
    sec.verdict(status, f"{marks.count('✓')} ✓ · {marks.count('✗')} ✗ · {marks.count('n/a')} not applicable",
                "Each item is evaluated from the steps below; 'see' links to the evidence.")
    from ascendify.port import checklist as cl

    for s in cl.sections():
        rows = [i for i in result.checklist if i["section"] == s["id"]]
        if not rows:
            continue
        body = []
        for i in rows:
            cls = {"✓": "st-ok", "✗": "st-fail"}.get(i["mark"], "st-skip")
            anchor = ANCHOR.get(i.get("anchor") or i.get("step", ""), "summary")
            body.append(
                f'<tr data-item="{e(i["id"])}" data-mark="{e(i["mark"])}"><td class="{cls} mark">{e(i["mark"])}'
                f'</td><td>{e(i["question"])}<div class="how">{e(i["id"])}: {e(i["how"])}</div></td>'
                f'<td>{e(i["evidence"])}</td><td><a href="#{e(anchor)}">{e(anchor)}</a></td></tr>')
        sec.html(
            f'<h3>{e(s["title"])}</h3><div><table class="checklist"><thead><tr><th></th>'
            f"<th>question</th><th>evidence</th><th>see</th></tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    sec.html("<style>table.checklist td.mark{font-size:16px;text-align:center;width:3em}"
             "table.checklist{width:100%;table-layout:fixed}table.checklist th:nth-child(2){width:46%}"
             "table.checklist th:nth-child(4){width:6em}table.checklist th:first-child{width:3em}"
             "table.checklist .how{color:var(--muted);font-size:12px}"
             "div.figs{display:flex;gap:12px;flex-wrap:wrap}div.figs figure{flex:1 1 440px;margin:0}"
             "div.outputs ul{margin:4px 0;columns:2}div.outputs{font-size:13px}</style>")


def _links(sec: report.Section, res: StageResult) -> None:
    files = [f for f in res.files if f]
    if not files:
        return
    items = "".join(f'<li><a href="{e(_rel(f))}">{e(_rel(f))}</a></li>' for f in files)
    sec.html(f'<div class="outputs"><b>Outputs</b><ul>{items}</ul></div>')


def _rel(f: str) -> str:
    p = Path(f)
    if p.is_absolute():
        # logs are recorded with their absolute path; the page links them relative to OUT
        parts = p.parts
        if "logs" in parts:
            return "/".join(parts[parts.index("logs"):])
    return f


def _stage_verdict(sec: report.Section, res: StageResult) -> None:
    status = {"error": "error", "fail": "fail", "warn": "warn", "ok": "ok"}.get(res.status, "skip")
    sec.verdict(status, res.headline or res.status,
                f"{secs(res.seconds)} wall, {secs(res.cpu_seconds)} CPU" if res.jobs else None)
    if res.error:
        sec.code(res.error, title="what went wrong")


def _commands(sec: report.Section, res: StageResult) -> None:
    lines = [wrap_command(j.shown) for j in res.jobs if j.shown]
    if lines:
        sec.code("\n".join(lines), title="commands (paths relative to the report folder)")


def wrap_command(cmd: str, width: int = 100) -> str:
    """A long shell command broken into ``\\``-continued lines at argument boundaries (``--flag value`` together).

    >>> print(wrap_command("ascendify run --to cpu train.py --steps 4 --batch-size 2", width=30))
    ascendify run --to cpu \\
        train.py --steps 4 \\
        --batch-size 2
    >>> wrap_command("cd runs/golden/tree/p && X='a b' ascendify run -- python t.py")  # the shell's own words
    "cd runs/golden/tree/p && X='a b' ascendify run -- python t.py"
    """
    import shlex
    import textwrap

    def quote(w: str) -> str:  # a word of the shell's own (&&, ;) stays what it is, NAME=VALUE an assignment
        if w in ("&&", "||", ";", "|"):
            return w
        name, eq, value = w.partition("=")
        return f"{name}={shlex.quote(value)}" if eq and name.isidentifier() else shlex.quote(w)

    try:
        words = shlex.split(cmd)
    except ValueError:  # a description, not a shell line
        return "\n".join(textwrap.wrap(cmd, width=width, subsequent_indent="    "))
    groups: list[str] = []
    for w in words:
        if groups and not w.startswith("-") and groups[-1].startswith("-") and " " not in groups[-1]:
            groups[-1] += " " + quote(w)
        else:
            groups.append(quote(w))
    lines, cur = [], ""
    for g in groups:
        if cur and len(cur) + 1 + len(g) > width - 2:
            lines.append(cur)
            cur = "    " + g
        else:
            cur = f"{cur} {g}" if cur else g
    lines.append(cur)
    return " \\\n".join(lines)


# -- terminal -------------------------------------------------------------------------------------------------

def summary_text(result: PortResult, width: int | None = None) -> str:
    """The terminal summary, at most ``width`` columns (default: the terminal's, at most 80)."""
    from ascendify.report.tables import terminal_width

    width = width or min(80, terminal_width())
    status, sentence = result.verdict
    what = result.context.options.shown_as or result.project.name
    lines = [_wrap(f"ascendify {result.name}: {TARGET_LABEL[result.target]}, {what}, {result.seconds:.0f} s "
                   f"wall, {result.cpu_seconds:.0f} s CPU", width)]
    rows = [{"stage": sid, "status": r.status, "time": secs(r.seconds), "headline": r.headline}
            for sid, r in result.stages.items()]
    cols = [report.Column("stage"), report.Column("status", kind="status"), report.Column("time", align="right"),
            report.Column("headline")]
    lines.append(report.table_text(cols, rows, width=width).rstrip("\n"))
    for sid, r in result.stages.items():
        if r.status == "error" and r.error:
            logs = [_rel(f) for f in r.files if "logs/" in _rel(f)]
            lines.append(_wrap(f"{sid} failed: {r.error.splitlines()[0]}"
                               + (f" (log: {', '.join(logs)})" if logs else ""), width))
    ov = result.stages["train"].facts.get("overflow") if "train" in result.stages else None
    if ov:
        lines.append(_wrap("overflow (migrated run): " + overflow.overflow_text(ov), width))
        first = ov.get("first")
        if first and first.get("code"):
            lines.append(_wrap(f"  {first.get('file')}:{first.get('line')}: {first['code']}", width))
    for item in result.checklist:
        if item["mark"] == "✗":
            lines.append(_wrap(f"✗ {item['id']}: {item['evidence']}", width))
    lines.append(_wrap(f"{status.upper()}: {sentence.removeprefix(status + ': ')}", width))
    lines.append(_wrap(f"report: {_shown_path(result.out / 'report.html')}", width))
    return "\n".join(lines)


def _shown_path(path: Path) -> str:
    """``path`` relative to the working folder when it is inside it (what the user typed), else absolute."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False,
                                   break_long_words=True))

