"""``ascendify doctor --explain LOGFILE``: find known error messages in a log (``data/known_errors.json``).

The knowledge base is data: each entry has an ``id``, a ``family``, ``patterns`` (regular expressions matched
case-insensitively against each line), the ``cause``, the ``fix`` and its ``sources``. This module only matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TextIO

from ascendify.core import knowledge


@cache
def entries() -> list[dict[str, Any]]:
    return knowledge.load("known_errors")["entries"]


@cache
def _compiled() -> list[tuple[dict[str, Any], list[re.Pattern[str]]]]:
    return [(e, [re.compile(p, re.I) for p in e["patterns"]]) for e in entries()]


# matches kept per entry (the count goes on): a log of a million identical errors stays a small report
KEEP = 1000
CHUNK = 1 << 22  # characters read at a time: the log is streamed, never held whole
OVERLAP = 4096  # a line longer than 4 chunks is matched in pieces that overlap by this much


def _required(tree) -> set[str] | None:
    """Lower-case strings of which a match of the parsed pattern ``tree`` contains at least one: its longest run of
    literal characters, or, for a pattern that is one alternation, one such run per branch. None when there is
    none of at least 3 characters."""
    from re import _constants as C

    best: list[str] = []
    cur: list[str] = []
    for op, av in tree:
        if op is C.LITERAL:
            cur.append(chr(av))
            continue
        best, cur = max(best, cur, key=len), []
    best = max(best, cur, key=len)
    if len(best) >= 3:
        return {"".join(best).lower()}
    items = list(tree)
    if len(items) == 1 and items[0][0] is C.SUBPATTERN:
        return _required(items[0][1][-1])
    if len(items) == 1 and items[0][0] is C.BRANCH:
        out: set[str] = set()
        for branch in items[0][1][1]:
            got = _required(branch)
            if got is None:
                return None
            out |= got
        return out
    return None


@cache
def _prefilter() -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
    """What a line must contain to be worth matching entry by entry: one of these lower-case strings (each
    pattern's required literal text), or a match of one of the patterns that have none. Most lines of a log hold
    none of them, and ``str.find`` over a chunk skips them 100x faster than every pattern on every line."""
    from re import _parser

    words: set[str] = set()
    other = []
    for e in entries():
        for p in e["patterns"]:
            got = _required(_parser.parse(p, re.I))
            if got is None:
                other.append(re.compile(p, re.I | re.M))
            else:
                words |= got
    return frozenset(words), tuple(other)


@dataclass
class Scan:
    """What :func:`scan` read: ``hits`` (at most ``KEEP`` per entry, in log order), ``counts`` (every match per
    entry id), ``lines`` read, and ``unread``: why part of the log was not read (None when all of it was)."""

    hits: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    unread: str | None = None
    last: dict[str, int] = field(default_factory=dict, repr=False)  # entry id -> the last line it matched


def _match_line(line: str, line_no: int, out: Scan) -> None:
    for entry, pats in _compiled():
        if out.last.get(entry["id"]) == line_no:
            continue  # once per line (the pieces of a very long line overlap)
        for pat in pats:
            if pat.search(line):
                out.last[entry["id"]] = line_no
                n = out.counts.get(entry["id"], 0)
                out.counts[entry["id"]] = n + 1
                if n < KEEP:
                    out.hits.append({"entry": entry, "line_no": line_no, "line": line.rstrip(), "pattern": pat.pattern})
                break


def _scan_chunk(chunk: str, first_line: int, out: Scan) -> None:
    """Match the lines of ``chunk`` (whole lines; its first is line ``first_line``)."""
    words, other = _prefilter()
    low = chunk.lower()
    if len(low) != len(chunk):  # a character whose lower case is longer: positions differ, go line by line
        for i, line in enumerate(chunk.split("\n")):
            if any(w in line.lower() for w in words) or any(p.search(line) for p in other):
                _match_line(line, first_line + i, out)
        return
    starts: set[int] = set()
    for w in words:
        i = low.find(w)
        while i >= 0:
            start = low.rfind("\n", 0, i) + 1
            starts.add(start)
            end = low.find("\n", i)
            i = low.find(w, end) if end >= 0 else -1  # the rest of this line is taken already
    for p in other:
        for m in p.finditer(chunk):
            starts.add(chunk.rfind("\n", 0, m.start()) + 1)
    counted_to = counted = 0
    for start in sorted(starts):
        end = chunk.find("\n", start)
        counted += chunk.count("\n", counted_to, start)
        counted_to = start
        _match_line(chunk[start:] if end < 0 else chunk[start:end], first_line + counted, out)


def scan(stream: TextIO, *, chunk: int = CHUNK) -> Scan:
    """Every (entry, line) match in the text ``stream``, read to its end in chunks of whole lines (a line longer
    than a chunk is matched in pieces). An error while reading ends the scan and says where (``Scan.unread``)."""
    out = Scan()
    buf, line, last = "", 1, "\n"
    while True:
        try:
            data = stream.read(chunk)
        except (OSError, UnicodeError) as e:
            out.unread = f"reading stopped at line {line}: {getattr(e, 'strerror', None) or e}"
            data = ""
        eof = not data
        buf += data
        if eof:
            piece, buf = buf, ""
        else:
            cut = buf.rfind("\n")
            if cut < 0 and len(buf) < 4 * chunk:
                continue  # a long line: read on to its end
            if cut < 0:  # matched in pieces that overlap, so that a message across the cut is still seen
                piece, buf = buf, buf[-OVERLAP:]
            else:
                piece, buf = buf[: cut + 1], buf[cut + 1:]
        if piece:
            _scan_chunk(piece, line, out)
            line += piece.count("\n")
            last = piece[-1]
        if eof:
            break
    out.lines = line - 1 if last == "\n" else line
    return out


def match_text(text: str) -> list[dict[str, Any]]:
    """Every (entry, line) match in ``text``, in log order: ``[{"entry", "line_no", "line", "pattern"}]``.

    An entry is reported once per line (its first matching pattern); one line can match several entries
    (``ERR00100`` and the ``EE9999`` it carries).
    """
    import io

    return scan(io.StringIO(text, newline=None)).hits


def summarize(hits: list[dict[str, Any]], counts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Group matches by entry (first-seen order): each with its matched lines (``matches``, at most ``KEEP``) and
    ``count``, every line it matched (``counts`` from :class:`Scan`; else the matches given)."""
    groups: dict[str, dict[str, Any]] = {}
    for h in hits:
        e = h["entry"]
        g = groups.setdefault(
            e["id"],
            {
                "id": e["id"],
                "family": e["family"],
                "title": e["title"],
                "cause": e["cause"],
                "fix": e["fix"],
                "sources": e["sources"],
                "patterns": e["patterns"],
                "matches": [],
            },
        )
        g["matches"].append({"line_no": h["line_no"], "line": h["line"], "pattern": h["pattern"]})
    for g in groups.values():
        g["count"] = (counts or {}).get(g["id"], len(g["matches"]))
    return list(groups.values())


_URL = re.compile(r"https?://[^\s'\"<>)]+")


def specific_fix(entry: dict[str, Any], line: str, text: str = "") -> str:
    """``entry``'s fix made specific to the line it matched (and the rest of the log, ``text``) where the entry
    says how (its ``specific`` field): the package to install for a missing module (a torch companion such as
    torchvision as the CPU build made for this torch), the whole URL a failed download asked for, the path a
    missing file was opened at. Else the entry's own fix.

    >>> e = next(x for x in entries() if x["id"] == "module-not-found")
    >>> specific_fix(e, "ModuleNotFoundError: No module named 'cv2'")[:41]
    'pip install opencv-python (the module cv2'
    """
    spec = entry.get("specific") or {}
    fix = entry["fix"]
    m = next((p.search(line) for p in _compiled_of(entry) if p.search(line)), None)
    groups = m.groupdict() if m else {}
    module = (groups.get("module") or "").split(".")[0] if "pip_names" in spec else ""
    if module:
        builds = spec.get("torch_builds") or {}
        if module in (builds.get("versions") or {}):
            try:
                import torch

                tv = torch.__version__.split("+")[0]
            except ImportError:
                tv = ""
            minor = ".".join(tv.split(".")[:2])
            want = builds["versions"][module].get(minor)
            pin = f"=={want}.*" if want else ""
            return (f"pip install '{module}{pin}' --index-url {builds['index']}: {module} is {builds['note']}"
                    + (f" (torch {tv} here)" if tv else "") + ".")
        pip = spec["pip_names"].get(groups.get("module") or "", spec["pip_names"].get(module, module))
        named = f" (the module {module} comes from the package {pip})" if pip != module else ""
        return (f"pip install {pip}{named} into the environment that runs the program, with the project's own "
                "requirements; if it is CUDA-only (flash_attn, apex, xformers), `ascendify migrate` lists what "
                "replaces it on Ascend.")
    if spec.get("url"):
        urls = _URL.findall(text or line)
        if urls:
            url = urls[-1].rstrip(".,;:")
            hub = any(h in url for h in spec.get("hub_hosts") or ())
            if hub:
                return (f"the program fetches {url}: download it once where the network is reachable, then run "
                        "with HF_HUB_OFFLINE=1 and the filled cache (or point the program at a local copy).")
            return (f"the program downloads {url}, and this machine cannot reach it: download the file where the "
                    "network is reachable and put it where the program looks for it (its data folder), or use "
                    "synthetic data for the port check.")
    if spec.get("path") and groups.get("path"):
        return (f"the program opened {groups['path']!r}, which is not there (relative paths are read from the "
                f"folder the program runs in). {fix}")
    return fix


def _compiled_of(entry: dict[str, Any]) -> list[re.Pattern[str]]:
    return next((pats for e, pats in _compiled() if e is entry), [re.compile(p, re.I) for p in entry["patterns"]])
