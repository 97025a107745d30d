"""Terminal tables that fit the terminal.

A table is a list of :class:`Column` and rows given as dicts keyed by column name. Widths follow the console:
the terminal's width, else ``$COLUMNS``, else 100 when output is not a terminal (never a fixed wide width, so a
pipe or a log file reads like the screen). Path columns never lose the file name: they fold onto a second line
rather than truncate, after the folder part has been shortened from the middle.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any

DEFAULT_WIDTH = 100

STATUS_STYLES: dict[str, str] = {
    "ok": "green",
    "pass": "green",
    "match": "green",
    "yes": "green",
    "✓": "green",
    "warn": "yellow",
    "warning": "yellow",
    "fail": "bold red",
    "error": "bold red",
    "diverged": "bold red",
    "no": "red",
    "✗": "bold red",
    "skip": "dim",
    "n/a": "dim",
    "unmatched": "magenta",
}


def status_style(status: str) -> str:
    """The rich style for a status word (``ok``, ``warn``, ``fail``, ``skip``...); '' when unknown."""
    return STATUS_STYLES.get(str(status).strip().lower(), "")


def plural(n: int, word: str, many: str | None = None) -> str:
    """``plural(1, "file") == "1 file"``, ``plural(2, "file") == "2 files"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


@dataclass(frozen=True)
class Column:
    """One column: ``name`` keys the row dicts; ``kind`` is text, path, number or status."""

    name: str
    header: str | None = None
    kind: str = "text"
    align: str | None = None
    ratio: int | None = None

    @property
    def title(self) -> str:
        return self.header if self.header is not None else self.name.replace("_", " ")

    @property
    def justify(self) -> str:
        return self.align or ("right" if self.kind == "number" else "left")


def terminal_width() -> int:
    """Width for terminal output: the terminal's, else ``$COLUMNS``, else :data:`DEFAULT_WIDTH`."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty() or sys.stderr.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


def console(stderr: bool = False, file=None, width: int | None = None):
    """A rich Console sized by :func:`terminal_width` (imports rich on first use)."""
    from rich.console import Console

    return Console(
        file=file, stderr=stderr and file is None, width=width or terminal_width(), highlight=False, soft_wrap=False
    )


def format_value(value: Any, kind: str = "text") -> str:
    """A cell's text: None → '', ints with thousands separators, floats with 4 significant digits."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        if value == 0:
            return "0"
        a = abs(value)
        if 1e-3 <= a < 1e6:
            return f"{value:,.4g}" if a >= 1e4 else f"{value:.4g}"
        return f"{value:.3e}"
    return str(value)


def shorten_path(path: str, width: int) -> str:
    """Shorten ``path`` to ``width`` by dropping leading folders (``…/project/train.py``); the name stays whole."""
    if len(path) <= width:
        return path
    parts = path.split("/")
    for i in range(1, len(parts)):
        short = "…/" + "/".join(parts[i:])
        if len(short) <= width:
            return short
    return parts[-1]  # only the file name left: kept whole (the column folds it)


def table(columns: list[Column], rows: list[dict[str, Any]], title: str | None = None, *, width: int | None = None):
    """A rich Table for ``rows``; ``width`` (default: the terminal's) shortens path columns to fit."""
    from rich.table import Table
    from rich.text import Text

    width = width or terminal_width()
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, expand=False, header_style="bold")
    path_budget = _path_budget(columns, rows, width)
    for c in columns:
        t.add_column(
            c.title,
            justify=c.justify,
            ratio=c.ratio,
            overflow="fold",
            no_wrap=c.kind in ("number", "status"),
            min_width=_path_min_width(c, rows, path_budget) if c.kind == "path" else None,
        )
    for row in rows:
        cells = []
        for c in columns:
            text = format_value(row.get(c.name), c.kind)
            if c.kind == "path":
                text = shorten_path(text, path_budget)
            cells.append(Text(text, style=status_style(text) if c.kind == "status" else ""))
        t.add_row(*cells)
    return t


def _path_min_width(col: Column, rows: list[dict[str, Any]], budget: int) -> int:
    """Wide enough for every shortened path, so rich squeezes other columns before folding a file name."""
    cells = [len(shorten_path(format_value(r.get(col.name)), budget)) for r in rows]
    return min(budget, max(cells + [len(col.title), 4]))


def _path_budget(columns: list[Column], rows: list[dict[str, Any]], width: int) -> int:
    """Characters left for path columns after the other columns take their natural width."""
    other = 0
    n_path = 0
    for c in columns:
        if c.kind == "path":
            n_path += 1
            continue
        cells = [len(format_value(r.get(c.name), c.kind)) for r in rows] or [0]
        natural = max(max(cells), len(c.title))
        other += (natural if c.kind in ("number", "status") else min(natural, 24)) + 3
    return max(16, (width - other - 1) // max(n_path, 1))


def print_table(columns: list[Column], rows: list[dict[str, Any]], title: str | None = None, console_=None, **kw):
    """Print :func:`table` on ``console_`` (default: a stdout console); accepts ``console=`` too."""
    con = kw.pop("console", None) or console_ or console()
    con.print(table(columns, rows, title, width=con.width))


def table_text(columns: list[Column], rows: list[dict[str, Any]], title: str | None = None, width: int = 100) -> str:
    """The table as plain text of at most ``width`` columns (for logs, Markdown code blocks and tests)."""
    import io

    buf = io.StringIO()
    con = console(file=buf, width=width)
    con.no_color = True
    con.print(table(columns, rows, title, width=width))
    return buf.getvalue()
