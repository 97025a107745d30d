"""Jupyter notebooks (``.ipynb``): the code cells are converted like a Python file, the rest stays byte for byte.

The code cells are joined into one module (a cell's imports serve the cells after it, as in the kernel), with
a comment line between cells; the module is converted by :func:`~.engine.migrate_source` and cut back into
cells at those lines. Only the ``source`` of a changed cell is replaced in the notebook's JSON text, written in
the notebook's own layout (its indentation, one string per line as Jupyter writes them; an unchanged line keeps
its exact text): outputs, metadata, key order and escapes stay as they were.

IPython syntax is kept out of the module: a line magic or shell line (``%matplotlib inline``, ``!pip install``)
becomes a comment while the cell is converted and is put back after; a cell that still does not parse (a cell
magic such as ``%%bash``, ``x = !ls``) is left as it is, and listed when it mentions CUDA. A notebook whose
kernel is not Python is left as it is.

Report rows name the cell (``nb.ipynb:cell_3``, every cell counted, markdown too, as nbQA does) and its line.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from bisect import bisect_right
from dataclasses import dataclass, field
from json.decoder import scanstring

from .engine import Options, migrate_source
from .model import MANUAL, REPORT, FileResult, Finding

BOUNDARY = "# -- ascendify: cell boundary --"
_MAGIC_MARK = "#ascendify-magic:"
_MAGIC = re.compile(r"^([ \t]*)([%!])")
_MARKED = re.compile(r"^[ \t]*" + re.escape(_MAGIC_MARK) + r"(\d+):")


class NotebookError(ValueError):
    """Not a notebook this can convert (not JSON, not nbformat 4)."""


@dataclass
class _Cell:
    index: int  # in the notebook's cells (0-based)
    span: tuple[int, int]  # the source value's place in the JSON text
    value: str | list[str]
    items: list[tuple[int, int]] = field(default_factory=list)  # each string's place, when a list

    @property
    def text(self) -> str:
        return "".join(self.value) if isinstance(self.value, list) else self.value


# -- reading the JSON text with positions -----------------------------------------------------------------
_SPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity")


class _Reader:
    """A JSON reader that also notes where each cell's ``source`` value (and each string in it) is."""

    def __init__(self, text: str):
        self.text = text
        self.sources: dict[int, tuple[int, int]] = {}
        self.items: dict[int, list[tuple[int, int]]] = {}

    def read(self):
        value, end = self._value(0, ())
        if _SPACE.match(self.text, end).end() != len(self.text):
            raise NotebookError(f"extra text after the JSON document (offset {end})")
        return value

    def _value(self, i: int, path: tuple):
        s = self.text
        i = _SPACE.match(s, i).end()
        if i >= len(s):
            raise NotebookError("the JSON text ends early")
        c = s[i]
        start = i
        if c == "{":
            obj: dict = {}
            i = _SPACE.match(s, i + 1).end()
            if s.startswith("}", i):
                return obj, i + 1
            while True:
                if not s.startswith('"', i):
                    raise NotebookError(f"a key expected at offset {i}")
                key, i = scanstring(s, i + 1)
                i = _SPACE.match(s, i).end()
                if not s.startswith(":", i):
                    raise NotebookError(f"':' expected at offset {i}")
                obj[key], i = self._value(i + 1, path + (key,) if len(path) < 4 else path)
                i = _SPACE.match(s, i).end()
                if s.startswith(",", i):
                    i = _SPACE.match(s, i + 1).end()
                    continue
                if s.startswith("}", i):
                    end = i + 1
                    break
                raise NotebookError(f"',' or '}}' expected at offset {i}")
        elif c == "[":
            arr: list = []
            i = _SPACE.match(s, i + 1).end()
            if s.startswith("]", i):
                end = i + 1
            else:
                while True:
                    at = _SPACE.match(s, i).end()
                    v, i = self._value(at, path + (len(arr),) if len(path) < 4 else path)
                    if len(path) == 3 and path[0] == "cells" and path[2] == "source":
                        self.items.setdefault(path[1], []).append((at, i))
                    arr.append(v)
                    i = _SPACE.match(s, i).end()
                    if s.startswith(",", i):
                        i += 1
                        continue
                    if s.startswith("]", i):
                        end = i + 1
                        break
                    raise NotebookError(f"',' or ']' expected at offset {i}")
            obj = arr
        elif c == '"':
            obj, end = scanstring(s, i + 1)
        else:
            m = _SCALAR.match(s, i)
            if not m:
                raise NotebookError(f"unexpected {c!r} at offset {i}")
            obj, end = json.loads(m.group()), m.end()
        if len(path) == 3 and path[0] == "cells" and path[2] == "source":
            self.sources[path[1]] = (start, end)
        return obj, end


def _cells(text: str) -> tuple[dict, list[_Cell]]:
    r = _Reader(text)
    try:
        nb = r.read()
    except (ValueError, IndexError) as e:
        raise NotebookError(str(e) if isinstance(e, NotebookError) else f"not valid JSON: {e}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError("no list of cells (nbformat 4 is read)")
    cells = []
    for n, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or n not in r.sources:
            continue
        value = cell.get("source")
        if isinstance(value, list) and all(isinstance(x, str) for x in value) or isinstance(value, str):
            cells.append(_Cell(n, r.sources[n], value, r.items.get(n, [])))
    return nb, cells


def _language(nb: dict) -> str:
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    for key, sub in (("kernelspec", "language"), ("language_info", "name")):
        d = meta.get(key)
        if isinstance(d, dict) and isinstance(d.get(sub), str):
            return d[sub].lower()
    return "python"


# -- the cells as one module ---------------------------------------------------------------------------------
def _mask(text: str, magics: list[str]) -> str:
    """``text`` with each IPython line (``%...``, ``!...``) as a numbered comment (its text kept in ``magics``)."""
    out = []
    for line in text.splitlines(keepends=True):
        m = _MAGIC.match(line)
        if m:
            body = line.rstrip("\r\n")
            out.append(f"{m.group(1)}{_MAGIC_MARK}{len(magics)}:{body[m.end(1):]}{line[len(body):]}")
            magics.append(body)
        else:
            out.append(line)
    return "".join(out)


def _unmask(text: str, magics: list[str]) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        m = _MARKED.match(line)
        if m:
            body = line.rstrip("\r\n")
            line = magics[int(m.group(1))] + line[len(body):]
        out.append(line)
    return "".join(out)


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(text)
        return True
    except (SyntaxError, ValueError):
        return False


def migrate_notebook(data: bytes, options: Options, path: str = "<notebook>") -> tuple[bytes, FileResult]:
    """Convert a notebook's code cells. Returns (the new notebook's bytes, result). Raises :class:`NotebookError`."""
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotebookError(f"not UTF-8: {e}") from None
    nb, cells = _cells(raw)
    result = FileResult(path=path, status="unchanged", parsed=True)
    result.lines = sum(c.text.count("\n") + (1 if c.text and not c.text.endswith("\n") else 0) for c in cells)
    if _language(nb) != "python" or not cells:
        return data, result
    magics: list[str] = []
    parts, starts, kept_whole = [], [], []
    line = 1
    for c in cells:
        text = _mask(c.text, magics)
        if not _parses(text):  # IPython syntax beyond line magics: the cell stays as it is
            kept_whole.append(c)
            text = "\n" * c.text.count("\n")
        if text and not text.endswith("\n"):
            text += "\n"
        starts.append(line)
        parts.append(text + BOUNDARY + "\n")
        line += text.count("\n") + 1
    module = "".join(parts)
    new_module, res = migrate_source(module, options, path=path)
    pieces = _split(new_module)
    if len(pieces) != len(cells):
        raise NotebookError("a conversion crossed a cell boundary")
    for f in res.findings:
        k = bisect_right(starts, f.line) - 1
        f.cell = cells[k].index + 1
        f.line, f.end_line = f.line - starts[k] + 1, max(f.end_line - starts[k] + 1, 1)
    for c in kept_whole:
        if "cuda" in c.text.lower():
            res.findings.append(Finding("ASC000", REPORT, 1, max(1, c.text.count("\n")), severity=MANUAL,
                                        api="cell", cell=c.index + 1,
                                        message="a cell this cannot read as Python (IPython syntax such as a cell "
                                                "magic) mentions CUDA: left as it is",
                                        tip="convert its CUDA code by hand", before=c.text.splitlines()[0][:80]))
    res.findings.sort(key=lambda f: (f.cell, f.line, f.rule, f.kind))
    edits = []
    for c, piece in zip(cells, pieces, strict=True):
        if c in kept_whole:
            continue
        new = _unmask(piece, magics)
        if not c.text.endswith("\n") and new.endswith("\n"):
            new = new[:-1]
        if new != c.text:
            edits.append((c.span, _encode(raw, c, new)))
    result.findings = res.findings
    if not edits:
        return data, result
    out = raw
    for (a, b), text in sorted(edits, reverse=True):
        out = out[:a] + text + out[b:]
    result.status = "changed"
    return out.encode("utf-8"), result


def _split(module: str) -> list[str]:
    """The module cut at the boundary lines (each piece ends with its line break, as it was given)."""
    pieces, cur = [], []
    for line in module.splitlines(keepends=True):
        if line.rstrip("\r\n") == BOUNDARY:
            pieces.append("".join(cur))
            cur = []
        else:
            cur.append(line)
    if "".join(cur).strip():
        pieces.append("".join(cur))  # text after the last boundary: the caller sees a wrong count
    return pieces


def _encode(raw: str, cell: _Cell, new: str) -> str:
    """The JSON text of ``new`` as the cell's source, in the layout the notebook has."""
    old_text = raw[cell.span[0] : cell.span[1]]
    ascii_only = old_text.isascii() and not cell.text.isascii()  # the notebook escapes non-ASCII

    def enc(s: str) -> str:
        return json.dumps(s, ensure_ascii=ascii_only)

    if isinstance(cell.value, str):
        return enc(new)
    known = {v: raw[a:b] for v, (a, b) in zip(cell.value, cell.items, strict=False)}
    lines = new.splitlines(keepends=True)
    items = [known.get(x) or enc(x) for x in lines]
    if not cell.items:
        return "[" + ", ".join(items) + "]"
    first_a = cell.items[0][0]
    last_b = cell.items[-1][1]
    head = raw[cell.span[0] + 1 : first_a]  # between "[" and the first string
    tail = raw[last_b : cell.span[1] - 1]  # between the last string and "]"
    if len(cell.items) > 1:
        sep = raw[cell.items[0][1] : cell.items[1][0]]
    else:
        sep = "," + head if "\n" in head else ", "
    return "[" + head + sep.join(items) + tail + "]"
