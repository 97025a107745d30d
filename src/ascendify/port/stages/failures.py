"""What a run's output says when it failed: the user's frame and exception, the program's last line, and the known
errors (``doctor --explain``'s knowledge base) it shows, each with the fix made specific to it."""

from __future__ import annotations

import re
from pathlib import Path


def last_line(output: str) -> str | None:
    """The program's last line of output, short (what it said before it ended by itself: ``Exiting.``), not a
    line of ours (``ascendify ...``).

    >>> last_line("epoch 1\\nUnable to locate sufficient 2 gpus to run this example. Exiting.\\n")
    'Unable to locate sufficient 2 gpus to run this example. Exiting.'
    """
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line and not line.startswith(("ascendify", "$ ")):
            return line if len(line) <= 160 else line[:157] + "..."
    return None

def known_errors(output: str) -> list[dict[str, str]]:
    """The known errors (``doctor --explain``'s knowledge base) found in a run's output, last first: the one
    that ended the run is usually the last."""
    try:
        from ascendify.doctor import explain
    except ImportError:  # a build without the doctor
        return []
    seen, out = set(), []
    for hit in reversed(explain.match_text(output[-200_000:])):
        e = hit["entry"]
        if e["id"] not in seen:
            seen.add(e["id"])
            out.append({"id": e["id"], "title": e["title"], "fix": explain.specific_fix(e, hit["line"], output),
                        "line": hit["line"].strip()[:300]})
    return out

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')

_EXC = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Z]\w*)(?::\s?(.*))?$")


def exception_line(output: str) -> str:
    """The exception of the last traceback, short: its class without the module path and its message, the
    message's next line added when the first says nothing (``InductorError: LoweringException: AssertionError:``
    then ``target: aten.var_mean.correction``). Not the program's last line, which for Dynamo errors is advice
    on environment variables."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return ""
    for j in range(starts[-1] + 1, len(lines)):
        line = lines[j]
        if not line or line[0].isspace() or line.startswith("["):
            continue
        m = _EXC.match(line.rstrip())
        if not m:
            continue
        text = (m.group(2) or "").strip()
        msg = f"{m.group(1)}: {text}" if text else m.group(1)
        if m.group(2) is not None and (not text or text.endswith(":")):  # "X:" with its message on the next line
            nxt = next((x.strip() for x in lines[j + 1 : j + 4] if x.strip()), "")
            msg = f"{msg.rstrip(':')}: {nxt}" if nxt else msg.rstrip(":")
        return msg if len(msg) <= 160 else msg[:157] + "..."
    return ""


def first_user_frame(output: str) -> str | None:
    """The last traceback frame outside torch, site-packages and ascendify (where the user's code failed),
    with the exception line."""
    lines = output.splitlines()
    frames = [(i, m) for i, m in enumerate(_FRAME.match(line) for line in lines) if m]
    user = [(i, m) for i, m in frames
            if not any(s in m.group(1) for s in ("site-packages", "/torch/", "ascendify", "<frozen"))]
    last = exception_line(output) or (output.strip().splitlines()[-1] if output.strip() else "")
    if not user:
        return last or None
    i, m = user[-1]
    code = lines[i + 1].strip() if i + 1 < len(lines) else ""
    if ":" not in last and code and code != last and not code.startswith(("File ", "^", "~", "[")):  # bare: its line
        last += f" at `{code}`"
    return f"{Path(m.group(1)).name}:{m.group(2)} in {m.group(3)}: {last}"
