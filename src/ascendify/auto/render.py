"""The run report: a rich summary on stderr at exit, and the same data as JSON (``--log FILE``)."""

from __future__ import annotations

from typing import Any

from ascendify import program
from ascendify.core.fileio import write_json
from ascendify.report import plural

MAX_ROWS = 25


def counts(rep: dict[str, Any]) -> dict[str, int]:
    return {k: len(rep[k]) for k in ("redirected", "no_effect", "unsupported", "unmapped", "findings")}


def headline(rep: dict[str, Any]) -> str:
    c = counts(rep)
    calls = sum(r["count"] for r in rep["redirected"])
    return (f"ascendify run → {rep['target']['name']}: {plural(c['redirected'], 'CUDA API')} redirected "
            f"({plural(calls, 'call')}), {c['no_effect']} with no effect, {c['unsupported']} unsupported, "
            f"{c['unmapped']} unmapped, {plural(c['findings'], 'finding')}")


def render(rep: dict[str, Any], file=None) -> None:
    """Print the report with rich (plain text when the stream is not a terminal); call sites keep their file:line."""
    from ascendify import report

    console = report.console(stderr=file is None, file=file)
    console.print(f"[bold]{headline(rep)}[/bold]")
    for note in rep["target"].get("notes", []):
        console.print(f"  note: {note}", markup=False)
    sections = (
        ("redirected", "Redirected", "to"),
        ("no_effect", "Accepted with no effect on the target", "reason"),
        ("unsupported", "Unsupported on the target", "reason"),
        ("unmapped", "CUDA-looking values in device positions that are not devices", "reason"),
    )
    for key, title, third in sections:
        rows = rep[key]
        if not rows:
            continue
        cols = [report.Column("api", "API"), report.Column("count", "calls", kind="number"),
                report.Column("first_site", "first call site", kind="path"), report.Column(third)]
        shown = [{**r, third: str(r[third])} for r in rows[:MAX_ROWS]]
        if len(rows) > MAX_ROWS:
            shown.append({"api": f"... {len(rows) - MAX_ROWS} more (see --log)"})
        report.print_table(cols, shown, title=title, console=console)
    _render_indirect(rep.get("indirect") or [], console)
    if rep["findings"]:
        cols = [report.Column("site", kind="path"), report.Column("code"), report.Column("why")]
        shown = [{"site": f"{f['file']}:{f['line']}", "code": f["code"], "why": f["message"]}
                 for f in rep["findings"][:MAX_ROWS]]
        report.print_table(cols, shown, title="Findings in your code (CUDA checks)", console=console)


def indirect_lines(rows: list[dict[str, Any]], names: int = 6) -> list[str]:
    """One line per library for the calls torch (or another library) made itself, not the user's code: how
    many APIs and calls, the busiest names, and the lines they were reached from (the user's, where there is one)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["by"], []).append(r)
    out = []
    for lib, rs in by.items():
        rs = sorted(rs, key=lambda r: (-r["count"], r["api"]))
        shown = ", ".join(r["api"] for r in rs[:names]) + (f", … {len(rs) - names} more" if len(rs) > names else "")
        sites = list(dict.fromkeys(r["first_site"] for r in rs))
        where = ", ".join(sites[:3]) + (", …" if len(sites) > 3 else "")
        out.append(f"  by {lib}: {plural(len({r['api'] for r in rs}), 'CUDA API')} "
                   f"({plural(sum(r['count'] for r in rs), 'call')}) reached from "
                   f"{where}: {shown}")
    return out


def _render_indirect(rows: list[dict[str, Any]], console) -> None:
    if not rows:
        return
    from ascendify import report

    report.print_wrapped(console, 'Called by libraries, not by your code (see "indirect" in --log):')
    for line in indirect_lines(rows):
        report.print_wrapped(console, line)


def is_rank_zero() -> bool:
    return program.is_rank_zero()


def write_log(rep: dict[str, Any], path: str) -> str:
    out = program.rank_result_path(path)
    write_json(out, rep)
    return out
