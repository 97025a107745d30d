"""Helpers for the tests that run converted example scripts: tiny flags, a clean child environment, summaries.

Runs of the hand-written ports are cached for the test session: several tests compare against the same one.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from pathlib import Path

from example_runs import EXAMPLES, REPO, SCRIPTS, clean_env, summary_of  # noqa: F401
from example_runs import TINY as EXAMPLE_TINY

# The examples' tiny runs, without writing a checkpoint file.
TINY = {**EXAMPLE_TINY, "train_imagenet.py": [*EXAMPLE_TINY["train_imagenet.py"], "--checkpoint", ""]}


# One emulated device unless a test asks for more: with several, the CUDA original's DataParallel branch
# (unsupported on Ascend, and listed so by the migration report) would run.
EMULATE = (sys.executable, "-m", "ascendify", "emulate", "-q", "--devices", "1", "--", "python")


def run_script(project: Path, name: str, extra: tuple[str, ...] = (), *, emulated: bool | tuple = False,
               cwd: Path | None = None, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``python NAME <tiny flags> EXTRA`` in ``project`` (under ``ascendify emulate`` when ``emulated``; a tuple
    is the launcher's argv)."""
    prefix = list(emulated if isinstance(emulated, tuple) else EMULATE if emulated else (sys.executable,))
    argv = [*prefix, str(project / name), *TINY[name], *extra]
    return subprocess.run(argv, cwd=cwd or project, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else clean_env())


def comparable(summary: dict) -> dict:
    """The numbers that must agree between two runs (latency is a timing)."""
    return {k: v for k, v in summary.items() if k != "latency_ms"}


def _hand_port_run(project: str, name: str, extra: tuple[str, ...], emulated: bool) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="ascendify-handport-") as where:
        return run_script(EXAMPLES / project, name, extra, emulated=emulated, cwd=Path(where))


# Runs are started ahead in two worker threads (most of a tiny run is importing torch, so two overlap well)
# and each is run once per test session, whichever test asks first.
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="example-run")
_RUNS: dict[tuple, Future] = {}
_FNS: dict[tuple, object] = {}
_LOCK = threading.Lock()


def start(key: tuple, fn=None) -> Future:
    """Start ``fn()`` in the background under ``key`` (once; later calls may leave ``fn`` out): its future."""
    with _LOCK:
        if fn is not None:
            _FNS.setdefault(key, fn)
        if key not in _RUNS or _RUNS[key].cancelled():
            _RUNS[key] = _POOL.submit(_FNS[key])
        return _RUNS[key]


def start_hand_port(project: str, name: str, extra: tuple[str, ...] = (), emulated: bool = False) -> Future:
    extra = tuple(extra)
    return start(("hand", project, name, extra, emulated), lambda: _hand_port_run(project, name, extra, emulated))


@cache
def hand_port_summary(project: str, name: str, extra: tuple[str, ...] = (), emulated: bool = False) -> dict:
    """Summary of a tiny run of the hand-written port ``examples/<project>/<name>`` (once per session)."""
    return summary_of(start_hand_port(project, name, extra, emulated).result())


def selected_params(request, name: str) -> list:
    """The values of parameter ``name`` in this module's tests that the session will run (in order)."""
    out = []
    for item in request.session.items:
        if item.path == request.node.path and hasattr(item, "callspec") and name in item.callspec.params:
            value = item.callspec.params[name]
            if value not in out:
                out.append(value)
    return out
