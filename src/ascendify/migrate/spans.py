"""Span queries that stay fast on a large file: a 5 MB generated file has ~150,000 edits and CUDA tokens, and
checking each against all the others (what the engine did) took minutes.

- :class:`Spans`: a fixed set of ``(start, end)`` character spans, sorted once with the running maximum of
  their ends, so "does any span overlap ``[a, b)``" and "does any span contain ``[a, b)``" cost a binary search.
- :class:`Grid`: a growing set of edits filed by 128-character block, for the engine's conflict check (the
  edits kept so far that may overlap a new one are those filed in the blocks it covers: kept edits do not
  overlap one another outside a hole, so a block holds a bounded number of them).

>>> s = Spans([(10, 20), (30, 31)])
>>> s.overlaps(19, 25), s.overlaps(20, 30), s.contains(12, 18), s.contains(12, 21)
(True, False, True, False)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import accumulate

from .model import Edit


class Spans:
    __slots__ = ("starts", "reach")

    def __init__(self, spans: Iterable[tuple[int, int]]):
        ordered = sorted(spans)
        self.starts = [s for s, _ in ordered]
        self.reach = list(accumulate((e for _, e in ordered), max))  # the largest end among spans 0..i

    def overlaps(self, a: int, b: int) -> bool:
        """Some span ``(s, e)`` has ``s < b and a < e`` (an empty span overlaps what strictly surrounds it)."""
        i = bisect_left(self.starts, b)
        return i > 0 and self.reach[i - 1] > a

    def contains(self, a: int, b: int) -> bool:
        """Some span ``(s, e)`` has ``s <= a and b <= e``."""
        i = bisect_right(self.starts, a)
        return i > 0 and self.reach[i - 1] >= b

    def __len__(self) -> int:
        return len(self.starts)


_BLOCK = 7  # 2**7 = 128 characters


def _blocks(e: Edit) -> range:
    return range(e.start >> _BLOCK, (max(e.end - 1, e.start) >> _BLOCK) + 1)


class Grid:
    """Edits filed by the blocks they cover; :meth:`near` yields every filed edit that may overlap an edit."""

    __slots__ = ("_cells",)

    def __init__(self) -> None:
        self._cells: dict[int, list[Edit]] = {}

    def add(self, e: Edit) -> None:
        cells = self._cells
        for k in _blocks(e):
            cell = cells.get(k)
            if cell is None:
                cells[k] = [e]
            else:
                cell.append(e)

    def near(self, e: Edit) -> Iterator[Edit]:
        """Filed edits sharing a block with ``e`` (an edit may come more than once); every edit that overlaps
        ``e`` is among them (an overlap needs a common character, or an empty edit strictly inside the other)."""
        cells = self._cells
        for k in _blocks(e):
            cell = cells.get(k)
            if cell:
                yield from cell
