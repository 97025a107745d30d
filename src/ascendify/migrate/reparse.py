"""Is the converted file still Python? Parse only the statements the edits are in.

The engine parses its result again (an edit that would break the file is dropped and listed). Parsing the
whole top-level statement an edit is in re-parsed a 2,000-line class for a one-word change: a fifth of a
conversion's time on CUDA-heavy code. Here an edit inside a nested statement (in a function, a loop, a
``with``...) is checked by parsing that statement alone, under ``if 1:``::

    if 1:
            torch.npu.synchronize()      # the statement's lines exactly as they are in the file

This is exact in one direction, which is the one that matters: when the statement's new text parses there as
one ``if`` with no ``else`` (no line of it went left of where it starts, nothing joined an outer block), the
file parses too, because the statement's first line keeps its indentation and the statement owns its lines
(nothing else on its first or last line, no backslash joining it to the line before). Where this cannot vouch
for an edit (a top-level statement, a statement sharing a line, a parse that fails here), the caller parses the
top-level statements as before, so a failure here is never taken for a broken file.
"""

from __future__ import annotations

import ast
from bisect import bisect_right

from .model import Edit
from .source import SourceFile

_BLOCK_FIELDS = ("body", "orelse", "finalbody")
SMALL = 8  # lines: a top-level statement this short is parsed whole, not looked into


Item = tuple[int, int, ast.stmt]  # a statement's character span, and the statement


class Statements:
    """The statements of a module, found from the top down: only the blocks on the way to an edit are read."""

    def __init__(self, src: SourceFile, tree: ast.Module):
        self.src = src
        self.tree = tree
        self._firsts: dict[int, list[int]] = {}  # id(block) -> first line of each statement

    def _span(self, s: ast.stmt) -> tuple[int, int]:
        src = self.src
        start = src.offset(s.lineno, s.col_offset)
        for d in getattr(s, "decorator_list", ()):
            start = min(start, src.offset(d.lineno, d.col_offset) - 1)  # the "@"
        return start, src.offset(s.end_lineno, s.end_col_offset)

    def _first_lines(self, block: list[ast.stmt]) -> list[int]:
        firsts = self._firsts.get(id(block))
        if firsts is None:
            firsts = self._firsts[id(block)] = [
                min([s.lineno] + [d.lineno for d in getattr(s, "decorator_list", ())]) for s in block]
        return firsts

    def chain(self, e: Edit) -> list[Item]:
        """The statements whose spans hold ``e``, outermost first (empty: between top-level statements)."""
        line = self.src.line_of(e.start)
        out: list[Item] = []
        blocks = [self.tree.body]
        while blocks:
            found = None
            for block in blocks:
                if not block:
                    continue
                i = bisect_right(self._first_lines(block), line) - 1
                for s in block[max(i - 1, 0): i + 1][::-1]:  # statements sharing a line: the later first
                    start, end = self._span(s)
                    if start <= e.start and e.end <= end:
                        found = (start, end, s)
                        break
                if found:
                    break
            if found is None:
                break
            out.append(found)
            s = found[2]
            blocks = [getattr(s, name, None) or [] for name in _BLOCK_FIELDS]
            blocks = [b for b in blocks if b and isinstance(b[0], ast.stmt)]
            blocks += [h.body for h in getattr(s, "handlers", None) or ()]
            blocks += [c.body for c in getattr(s, "cases", None) or ()]
        return out

    def owns_lines(self, item: Item) -> tuple[int, int, str] | None:
        """``(start of its first line, end of its last line, its indentation)`` when nothing but the statement
        (and blanks, a comment) is on its lines and the line before does not run on into it; else None."""
        start, end, s = item
        src, text = self.src, self.src.text
        first = src.line_of(start)
        lo = src.line_starts[first - 1]
        if text[lo:start].strip(" \t\f"):
            return None
        if first > 1 and src.line_text(first - 1).endswith("\\"):
            return None
        last = s.end_lineno
        hi = src.line_starts[last] if last < len(src.line_starts) else len(text)
        rest = text[end:hi].strip()
        if rest and not rest.startswith("#"):
            return None
        return lo, hi, text[lo:start]


def _whole_lines_between(stmts: Statements, chain: list[Item], e: Edit) -> bool:
    """``e`` inserts whole statements at the start of a line at the top level, before a top-level statement or
    between two (``import torch_npu`` after the imports): such text parses there when it parses alone."""
    src = stmts.src
    if chain and not (len(chain) == 1 and chain[0][0] == e.start):
        return False
    line = bisect_right(src.line_starts, e.start)
    if src.line_starts[line - 1] != e.start or not e.text.endswith("\n") or e.text[:1] in " \t\f":
        return False
    if line > 1 and src.line_text(line - 1).endswith("\\"):
        return False
    try:
        ast.parse(e.text)
    except (SyntaxError, ValueError):
        return False
    return True


def unvouched(src: SourceFile, tree: ast.Module, edits: list[Edit], ordered) -> list[Edit]:
    """The edits whose nested statement does not parse alone under ``if 1:`` (or that sit at the top level):
    the caller parses their top-level statements. ``ordered``: the edits as an ``EditList``."""
    stmts = Statements(src, tree)
    units: dict[int, tuple[tuple[int, int, str], list[int]]] = {}  # id(statement) -> (lines, ids of its ancestors)
    left: list[Edit] = []
    body = tree.body
    firsts = stmts._first_lines(body)
    for e in edits:
        if e.start != e.end:
            i = bisect_right(firsts, src.line_of(e.start)) - 1
            if i >= 0 and body[i].end_lineno - firsts[i] < SMALL and src.line_of(e.end) <= body[i].end_lineno:
                left.append(e)  # in a short top-level statement: parsing it whole costs no more
                continue
        chain = stmts.chain(e)
        if e.start == e.end and _whole_lines_between(stmts, chain, e):
            continue
        span = None
        k = len(chain) - 1
        while k >= 1:  # nested statements only: chain[0] is a top-level one
            span = stmts.owns_lines(chain[k])
            if span is not None:
                break
            k -= 1
        if k < 1 or span is None:
            left.append(e)
            continue
        units.setdefault(id(chain[k][2]), (span, [id(c[2]) for c in chain[:k]]))
    for span, ancestors in units.values():
        if any(a in units for a in ancestors):
            continue  # a statement inside another one checked: parsed with it
        lo, hi, indent = span
        text = ordered.apply(src.text, lo, hi)
        body = []
        # the first line keeps its indentation and starts the statement (an edit may not move it)
        if text.startswith(indent) and text[len(indent) : len(indent) + 1] not in ("", " ", "\t", "\f", "#", "\n",
                                                                                  "\r", "\\"):
            try:
                body = ast.parse("if 1:\n" + text).body
            except (SyntaxError, ValueError):
                pass
        if not (len(body) == 1 and isinstance(body[0], ast.If) and not body[0].orelse):
            left.extend(e for e in edits if lo <= e.start and e.end <= hi)
    return left
