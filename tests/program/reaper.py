"""Start a command, signal it at a chosen moment, and say which of its descendants outlived it (a test helper).

    python reaper.py SPEC_JSON

SPEC: {"argv": [...], "cwd": DIR, "env": {...}, "log": FILE, "wait_for": [GLOB, ...] (files that must exist
before the signal; paths may contain * and ?), "wait_count": [[GLOB, N], ...] (at least N such files),
"wait_for_text": [[FILE, TEXT], ...], "timeout": SECONDS (for the
moment to come), "after": SECONDS (a delay after it), "signal": "SIGINT" | "SIGTERM" | "SIGKILL", "linger": SECONDS (how long after the signal the
descendants may live; default 5), "exit_timeout": SECONDS (how long the command may take to exit)}.

This process is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so whatever the command started and left behind
is re-parented here rather than to init, and is found by walking ``/proc``. Prints one JSON line:
{"moment_reached", "returncode", "exit_seconds", "left": [[pid, cmdline], ...] (alive ``linger`` seconds after the
signal), "started": [pids seen during the run]}; then kills what was left. Linux only.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (int(rest[1]), rest[0])
    return out


def descendants(root: int) -> list[int]:
    """Living (not zombie) descendants of ``root``."""
    table = _table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = [], list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        if table.get(pid, (0, "Z"))[1] not in ("Z", "X"):
            found.append(pid)
        todo.extend(kids.get(pid, []))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def _moment(spec: dict) -> bool:
    for pattern in spec.get("wait_for", []):
        if not glob.glob(pattern):
            return False
    for pattern, n in spec.get("wait_count", []):
        if len(glob.glob(pattern)) < n:
            return False
    for path, text in spec.get("wait_for_text", []):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if text not in f.read():
                    return False
        except OSError:
            return False
    return True


def main() -> int:
    spec = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the command hears SIGINT however this was started (not ignored)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    me = os.getpid()
    env = {**os.environ, **spec.get("env", {})}
    with open(spec["log"], "wb") as log:
        proc = subprocess.Popen(spec["argv"], cwd=spec.get("cwd"), env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    seen: set[int] = set()
    deadline = time.monotonic() + spec.get("timeout", 120)
    reached = False
    while time.monotonic() < deadline and proc.poll() is None:
        seen.update(descendants(me))
        if _moment(spec):
            reached = True
            break
        time.sleep(0.02)
    time.sleep(spec.get("after", 0.0))
    sig = getattr(signal, spec.get("signal", "SIGINT"))
    t0 = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=spec.get("exit_timeout", 60))
    except subprocess.TimeoutExpired:
        pass
    exit_seconds = time.monotonic() - t0 if proc.returncode is not None else None
    linger_end = t0 + spec.get("linger", 5.0)
    left = descendants(me)
    while left and time.monotonic() < linger_end:
        seen.update(left)
        while True:  # reap what was re-parented here
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        time.sleep(0.05)
        left = descendants(me)
    report = {"moment_reached": reached, "returncode": proc.returncode, "exit_seconds": exit_seconds,
              "left": [[pid, _cmdline(pid)] for pid in left], "started": sorted(seen)}
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
