"""Terminal tables that fit the terminal.

A table is a list of :class:`Column` and rows given as dicts keyed by column name. Widths follow the console:
the terminal's width, else ``$COLUMNS``, else 100 when output is not a terminal (never a fixed wide width, so a
pipe or a log file reads like the screen). Path columns never lose the file name: they fold onto a second line
rather than truncate, after the folder part has been shortened from the middle. Numbers and statuses are never
cut; a table whose numbers cannot all fit is split into parts one under the other, each repeating the row names.
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
    "not comparable": "yellow",
    "not proven": "yellow",
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
    """One column: ``name`` keys the row dicts; ``kind`` is text, path, number or status. ``key`` marks the columns
    that name a row (repeated in every part of a table split to fit; default: up to the first text/path column)."""

    name: str
    header: str | None = None
    kind: str = "text"
    align: str | None = None
    ratio: int | None = None
    key: bool = False

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
            return f"{value:,.0f}" if a >= 1e4 else f"{value:.4g}"
        return f"{value:.3e}"
    return str(value)


def fold(text: str, width: int | None = None, indent: str = "  ") -> str:
    """``text`` folded to ``width`` columns (default: the terminal's, at most 100): each of its lines wrapped at
    spaces, continuation lines indented by ``indent`` more than the line they continue (messages on stderr, which
    a terminal would otherwise break mid-word).

    >>> print(fold("ascendify port: the command runs missing.py, which is not in src", width=30))
    ascendify port: the command
      runs missing.py, which is
      not in src
    """
    import textwrap

    width = width or min(100, terminal_width())
    out = []
    for line in text.splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(line.strip(), width, initial_indent=lead, subsequent_indent=lead + indent,
                             break_long_words=False, break_on_hyphens=False) or [""]
    return "\n".join(out)


def print_wrapped(con, text: str, *, style: str | None = None) -> None:
    """Print ``text`` on ``con`` wrapped to its width, continuation lines indented two more spaces than the first
    line (a long verdict line does not restart at column 0). Plain text: no rich markup."""
    import textwrap

    lead = text[: len(text) - len(text.lstrip(" "))]
    lines = textwrap.wrap(text.strip(), con.width, initial_indent=lead, subsequent_indent=lead + "  ",
                          break_long_words=False, break_on_hyphens=False) or [""]
    for line in lines:
        con.print(line, style=style, highlight=False, markup=False)


def format_bytes(n: int | float | None) -> str:
    """A byte count in the unit that reads best: ``512 B``, ``1.5 KiB``, ``140.8 MiB``, ``2.00 GiB``."""
    if n is None:
        return ""
    n = float(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def shorten_path(path: str, width: int) -> str:
    """Shorten ``path`` to ``width`` by dropping leading folders (``…/project/train.py``); the name stays whole.
    Where no folder would be left (or the name alone is wider than ``width``), the folders (shortened from the
    left) go on a first line and the name on a second, so the reader still sees where the file is."""
    if len(path) <= width:
        return path
    parts = path.split("/")
    for i in range(1, len(parts) - 1):
        short = "…/" + "/".join(parts[i:])
        if len(short) <= width:
            return short
    if len(parts) == 1:
        return path  # a bare name: kept whole (the column folds it)
    dirs = parts[:-1]
    folder = next((("…/" if j else "") + "/".join(dirs[j:]) + "/" for j in range(len(dirs))
                   if len(("…/" if j else "") + "/".join(dirs[j:]) + "/") <= width), None)
    if folder is None:  # even the last folder is too long: its end
        folder = "…" + (dirs[-1] + "/")[-(width - 1):]
    return folder + "\n" + parts[-1]


def table(columns: list[Column], rows: list[dict[str, Any]], title: str | None = None, *, width: int | None = None,
          total_row: bool = False):
    """A rich renderable for ``rows``; ``width`` (default: the terminal's) shortens path columns to fit.

    A table too wide for ``width`` (many number columns at 80 columns) is split into several tables one under the
    other, each repeating the row's name columns, so no value is cut and no column disappears. ``total_row``
    draws a rule above the last row (a total)."""
    width = width or terminal_width()
    keys, groups = _split(columns, rows, width)
    from rich.console import Group
    from rich.text import Text

    if len(groups) <= 1:
        if title is None:
            return _table(columns, rows, None, width, total_row)
        # the title on its own line, wrapped to the line, not to the table (a narrow table broke a title such as
        # "[emulated: host speed, not NPU speed]" in two)
        return Group(Text(title), _table(columns, rows, None, width, total_row))

    parts = []
    for i, group in enumerate(groups):
        if i == 0 and title is not None:
            parts.append(Text(title))
        parts.append(Text(f"part {i + 1} of {len(groups)} (split to fit {width} columns)", style="dim"))
        parts.append(_table(keys + group, rows, None, width, total_row))
    return Group(*parts)


def _table(columns: list[Column], rows: list[dict[str, Any]], title: str | None, width: int, total_row: bool):
    from rich.table import Table
    from rich.text import Text

    # a title is plain text: "[emulated: ...]" in it is not rich markup
    t = Table(title=Text(title) if title is not None else None, title_justify="left", show_edge=False, pad_edge=False, expand=False, header_style="bold")
    path_budget = _path_budget(columns, rows, width)
    mins = {c.name: _path_min_width(c, rows, path_budget) for c in columns if c.kind == "path"}
    text_max = _text_widths(columns, rows, width, mins)
    for c in columns:
        t.add_column(
            c.title,
            justify=c.justify,
            ratio=c.ratio,
            overflow="fold",
            no_wrap=c.kind in ("number", "status"),
            min_width=(mins[c.name] if c.kind == "path"
                       else min(_natural(c, rows), _TEXT_MIN) if c.kind == "text" else None),
            max_width=text_max.get(c.name) if c.kind == "text" else None,
        )
    for row in rows:
        cells = []
        for c in columns:
            text = format_value(row.get(c.name), c.kind)
            if c.kind == "path":
                text = shorten_path(text, path_budget)
            cells.append(Text(text, style=status_style(text) if c.kind == "status" else ""))
        t.add_row(*cells)
    if total_row and len(rows) > 1:
        t.rows[-2].end_section = True
    return t


_TEXT_MIN = 12  # a text column folds, but never below this (or its own width): rich would squeeze it to nothing
_PATH_MIN = 16


def _natural(col: Column, rows: list[dict[str, Any]]) -> int:
    return max([len(format_value(r.get(col.name), col.kind)) for r in rows] + [len(col.title)])


def _needed(col: Column, rows: list[dict[str, Any]]) -> int:
    """The least width a column can have without losing a character (numbers and statuses never fold)."""
    natural = _natural(col, rows)
    if col.kind == "text":
        return min(natural, _TEXT_MIN)
    if col.kind == "path":
        return min(natural, _PATH_MIN)
    return natural


def _split(columns: list[Column], rows: list[dict[str, Any]], width: int) -> tuple[list[Column], list[list[Column]]]:
    """The name columns (up to the first text or path column) and the groups of the others that fit beside them
    in ``width``; one group when the whole table fits. Columns are 3 characters apart, with no outer edge."""
    gap = 3
    if sum(_needed(c, rows) for c in columns) + gap * (len(columns) - 1) <= width:
        return [], [columns]
    if any(c.key for c in columns):
        keys, rest = [c for c in columns if c.key], [c for c in columns if not c.key]
    else:
        first = next((i for i, c in enumerate(columns) if c.kind in ("text", "path")), 0)
        keys, rest = columns[: first + 1], columns[first + 1:]
    # the row names keep their width up to half the line (beyond that they fold)
    used_by_keys = sum(min(_natural(c, rows), max(_needed(c, rows), width // 2)) + gap for c in keys)
    room = width - used_by_keys
    groups: list[list[Column]] = []
    used = room + 1
    for c in rest:
        w = _needed(c, rows) + (gap if groups and groups[-1] else 0)
        if not groups or used + w > room:
            groups.append([])
            used = 0
            w = _needed(c, rows)
        groups[-1].append(c)
        used += w
    return keys, groups


def _longest_word(col: Column, rows: list[dict[str, Any]]) -> int:
    """The widest word of a column (its cells and its title): the width below which a cell must break mid-word.
    For a column of identifiers (``torch.cuda.manual_seed_all``, a layer name) it is the column's natural width."""
    cells = [format_value(r.get(col.name), col.kind) for r in rows] + [col.title]
    return max((len(w) for cell in cells for w in cell.split()), default=0)


def _text_widths(columns: list[Column], rows: list[dict[str, Any]], width: int,
                 path_mins: dict[str, int]) -> dict[str, int]:
    """The width each text column may take so that the table fits ``width`` without rich collapsing it; empty
    when the text fits as it is. rich shrinks the widest folding column first (a path column) and then restores
    its ``min_width``: the row ends past the console's edge and the last characters of a line are cut off.

    No column is cut mid-word while another could wrap at its spaces instead: each text column gets at least
    its widest word (a column of API names keeps its names whole) and the room left goes to the columns of
    prose, which wrap at spaces. Only when even the words cannot fit side by side does every column get an
    equal share (and long words fold)."""
    texts = [c for c in columns if c.kind == "text"]
    if not texts:
        return {}
    fixed = sum(path_mins[c.name] if c.kind == "path" else _natural(c, rows) for c in columns if c.kind != "text")
    room = width - fixed - 3 * (len(columns) - 1)
    natural = {c.name: _natural(c, rows) for c in texts}
    if sum(natural.values()) <= room:
        return {}
    floor = {c.name: min(natural[c.name], max(_longest_word(c, rows), _TEXT_MIN)) for c in texts}
    if sum(floor.values()) > room:
        share = max(_TEXT_MIN, room // len(texts))
        return {c.name: share for c in texts}
    # water-filling: raise a common level over the floors until the room is used
    level = 0
    while True:
        widths = {n: min(natural[n], max(floor[n], level + 1)) for n in natural}
        if sum(widths.values()) > room or level + 1 > max(natural.values()):
            break
        level += 1
    return {n: min(natural[n], max(floor[n], level)) for n in natural}


def _path_min_width(col: Column, rows: list[dict[str, Any]], budget: int) -> int:
    """Wide enough for every shortened path, so rich squeezes other columns before folding a file name."""
    cells = [max(map(len, shorten_path(format_value(r.get(col.name)), budget).split("\n"))) for r in rows]
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
