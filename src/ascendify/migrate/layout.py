"""Line length of the converted code: no changed line longer than the file's own longest line (or 79).

A rewrite can make a line longer (``torch.cuda.memory_allocated()`` becomes a guarded expression on the
portable target). Such a line is broken the way a person would break it: inside a bracket, after a comma or
before ``if``/``else``/``and``/``or``/``for``, with the continuation aligned one column after the bracket::

    peak = (torch.accelerator.max_memory_allocated() if torch.accelerator.is_available() else 0) / 2**20
    # in a file whose longest line has 80 characters:
    peak = (torch.accelerator.max_memory_allocated()
            if torch.accelerator.is_available() else 0) / 2**20

Only lines that are not in the original file are touched, so an unchanged file and a second run stay
byte-identical. Breaks never fall inside a string or a comment, nor inside a bracket opened on an earlier
line; a tuple on the right of an assignment (``x, y = a, b``) gets brackets to break inside. Where no break
fits (the long part is inside an f-string), the line stays as it is.
"""

from __future__ import annotations

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(")]}")
# a break before `if` keeps `if ... else ...` together: it wins over one before `else` (lower rank first)
_KEYWORDS = {" if ": 0, " for ": 0, " else ": 1, " and ": 1, " or ": 1}
PEP8 = 79  # the limit in a file whose own lines are all shorter


def longest_line(text: str) -> int:
    return max(map(len, text.splitlines()), default=0)


def wrap_long_lines(new: str, original: str, limit: int | None = None) -> str:
    """``new`` with each line that is longer than ``limit`` and not a line of ``original`` broken inside its
    brackets. ``limit`` defaults to ``original``'s longest line, or PEP 8's 79 in a file of shorter lines."""
    limit = max(longest_line(original), PEP8) if limit is None else limit
    if limit <= 0 or longest_line(new) <= limit:
        return new
    known = set(original.splitlines())
    out = []
    for line in new.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if len(body) > limit and body not in known:
            pieces = wrap_line(body, limit) or wrap_line(_bracket_tuple(body) or "", limit)
            if pieces is not None:
                end = line[len(body):]
                nl = end or ("\r\n" if "\r\n" in new else "\n")
                line = nl.join(pieces) + end
        out.append(line)
    return "".join(out)


def _breaks(line: str) -> list[tuple[int, int, int, int, int]]:
    """Places to break ``line``: (end of the piece before, start of the next piece, its indent column, bracket
    depth, rank)."""
    stack: list[int] = []  # column after each bracket opened on this line and still open
    lambdas: list[int] = []  # depths of lambda parameter lists being read (no break between parameters)
    out: list[tuple[int, int, int, int, int]] = []
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "#":
            break
        if c in "'\"":
            triple = line[i : i + 3] in ('"""', "'''")
            quote = line[i : i + 3] if triple else c
            j = i + len(quote)
            while j < n:
                if line[j] == "\\":
                    j += 2
                    continue
                if line.startswith(quote, j):
                    break
                j += 1
            if j >= n:
                break  # the string goes on past this line
            i = j + len(quote)
            continue
        if c in _OPEN:
            stack.append(i + 1)
        elif c in _CLOSE:
            if not stack:
                break  # a bracket opened on an earlier line closes: its indentation is not known here
            stack.pop()
        elif c == "l" and line.startswith("lambda", i) and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            lambdas.append(len(stack))
        elif c == ":" and lambdas and lambdas[-1] == len(stack):
            lambdas.pop()
        elif stack and not (lambdas and lambdas[-1] == len(stack)):
            if c == "," and line.startswith(" ", i + 1):
                k = i + 1
                while k < n and line[k] == " ":
                    k += 1
                if k < n and line[k] not in _CLOSE and line[k] != "#":
                    out.append((i + 1, k, stack[-1], len(stack), 0))
            elif c == " ":
                for kw, rank in _KEYWORDS.items():
                    if line.startswith(kw, i):
                        out.append((i, i + 1, stack[-1], len(stack), rank))
                        break
        i += 1
    return out


def _top_level(line: str) -> tuple[list[int], int, int]:
    """Offsets of the commas and of the first ``=`` outside brackets and strings, and where a comment starts."""
    commas: list[int] = []
    assign, depth, i, n = -1, 0, 0, len(line)
    while i < n:
        c = line[i]
        if c == "#":
            return commas, assign, i
        if c in "'\"":
            quote = line[i : i + 3] if line[i : i + 3] in ('"""', "'''") else c
            j = i + len(quote)
            while j < n and not line.startswith(quote, j):
                j += 2 if line[j] == "\\" else 1
            if j >= n:
                return [], -1, n
            i = j + len(quote)
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and c == "," and assign >= 0:
            commas.append(i)
        elif depth == 0 and c == "=" and assign < 0 and line[i - 1 : i] == " " and line[i + 1 : i + 2] == " ":
            assign = i
        i += 1
    return commas, assign, n


def _bracket_tuple(line: str) -> str | None:
    """``x, y = a, b`` as ``x, y = (a, b)``: the same tuple, now with a bracket to break inside."""
    commas, assign, comment = _top_level(line)
    if assign < 0 or not commas:
        return None
    code, rest = line[:comment].rstrip(), line[comment:]
    value = code[assign + 1 :].strip()
    if not value or value.endswith(","):
        return None
    return f"{code[: assign + 1]} ({value})" + (f"  {rest}" if rest else "")


def wrap_line(line: str, limit: int) -> list[str] | None:
    """``line`` as pieces of at most ``limit`` characters, broken inside its brackets (the outermost bracket
    first, as late as fits); None when that cannot be done."""
    breaks = _breaks(line)
    if not breaks:
        return None
    pieces: list[str] = []
    placed: list[tuple[int, int]] = [(0, 0)]  # (offset in line, column) where each piece starts
    start, indent = 0, 0
    while True:
        head = " " * indent if pieces else ""
        if len(head) + len(line) - start <= limit:
            break
        fitting = [b for b in breaks if start < b[0] and len(head) + len(line[start : b[0]].rstrip()) <= limit]
        if not fitting:
            return None
        end, nxt, col, _, _ = min(fitting, key=lambda b: (b[3], b[4], -b[0]))
        pieces.append(head + line[start:end].rstrip())
        # the bracket's column where its piece now starts (pieces after the first are re-indented)
        off, at = next((o, c) for o, c in reversed(placed) if o <= col - 1)
        start, indent = nxt, col - off + at
        placed.append((start, indent))
    if not pieces:
        return None
    pieces.append((" " * indent) + line[start:])
    return pieces if all(len(p) <= limit for p in pieces) else None
