"""``ascendify doctor --explain LOGFILE``: find known error messages in a log (``data/known_errors.json``).

The knowledge base is data: each entry has an ``id``, a ``family``, ``patterns`` (regular expressions matched
case-insensitively against each line), the ``cause``, the ``fix`` and its ``sources``. This module only matches.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from ascendify.core import knowledge


@cache
def entries() -> list[dict[str, Any]]:
    return knowledge.load("known_errors")["entries"]


@cache
def _compiled() -> list[tuple[dict[str, Any], list[re.Pattern[str]]]]:
    return [(e, [re.compile(p, re.I) for p in e["patterns"]]) for e in entries()]


def match_text(text: str, max_lines: int = 200_000) -> list[dict[str, Any]]:
    """Every (entry, line) match in ``text``, in log order: ``[{"entry", "line_no", "line", "pattern"}]``.

    An entry is reported once per line (its first matching pattern); one line can match several entries
    (``ERR00100`` and the ``EE9999`` it carries).
    """
    hits: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines()[:max_lines], 1):
        for entry, pats in _compiled():
            for pat in pats:
                if pat.search(line):
                    hits.append({"entry": entry, "line_no": n, "line": line.rstrip(), "pattern": pat.pattern})
                    break
    return hits


def summarize(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group matches by entry (first-seen order): each with every matched line."""
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
