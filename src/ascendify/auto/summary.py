"""The run report: a rich summary on stderr at exit, and the same data as JSON (``--log FILE``)."""

from __future__ import annotations

from typing import Any

from ascendify import program
from ascendify.fileio import write_json
from ascendify.report import plural
from ascendify.report.tables import terminal_width

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
    """Print the report with rich (plain text when the stream is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, stderr=file is None, highlight=False, soft_wrap=False, width=terminal_width())
    console.print(f"[bold]{headline(rep)}[/bold]")
    for note in rep["target"].get("notes", []):
        console.print(f"  note: {note}")
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
        table = Table(title=title, title_justify="left", show_lines=False, expand=False)
        table.add_column("API")
        table.add_column("calls", justify="right")
        table.add_column("first call site")
        table.add_column(third, overflow="fold")
        for r in rows[:MAX_ROWS]:
            table.add_row(r["api"], str(r["count"]), r["first_site"], str(r[third]))
        if len(rows) > MAX_ROWS:
            table.add_row(f"... {len(rows) - MAX_ROWS} more (see --log)", "", "", "")
        console.print(table)
    if rep["findings"]:
        table = Table(title="Findings in your code (CUDA checks)", title_justify="left")
        table.add_column("site")
        table.add_column("code")
        table.add_column("why", overflow="fold")
        for f in rep["findings"][:MAX_ROWS]:
            table.add_row(f"{f['file']}:{f['line']}", f["code"], f["message"])
        console.print(table)


def is_rank_zero() -> bool:
    return program.is_rank_zero()


def write_log(rep: dict[str, Any], path: str) -> str:
    out = program.rank_result_path(path)
    write_json(out, rep)
    return out
