"""Helpers for the example-project tests: where the projects are, tiny run flags, running a script."""

from __future__ import annotations

import atexit
import math
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from example_runs import EXAMPLES, REPO, SCRIPTS, TINY, clean_env, summary_of  # noqa: F401  (re-exported)
from gloo_teardown import run_again_on_teardown_abort

PROJECTS = ("cuda_project", "npu_project", "portable_project")

# Runs a script the way `python script.py` would, after enabling the emulated npu device.
EMULATED_RUNNER = """\
import os, runpy, sys
import ascendify.emulator
ascendify.emulator.enable()
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
"""


def script(project: str, name: str) -> Path:
    return EXAMPLES / project / name


def run(argv: list[str], cwd: Path, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else clean_env())


def run_example(project: str, name: str, cwd: Path, extra: list[str] = (), tiny: bool = True,
                runner: list[str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``examples/<project>/<name>`` with the tiny flags (and ``extra``) in ``cwd``."""
    argv = [sys.executable, *(runner or []), str(script(project, name)), *(TINY[name] if tiny else []), *extra]
    return run(argv, cwd, timeout=timeout)


def assert_finite_summary(summary: dict, keys=("final_loss", "param_checksum", "steps")) -> None:
    assert set(keys) <= set(summary), summary
    for k in keys:
        assert isinstance(summary[k], (int, float)) and math.isfinite(summary[k]), (k, summary)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, target: list[str], cwd: Path, env: dict | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run`` on this host with a free port (again, with another port, where gloo
    aborted a worker at exit: ``gloo_teardown``)."""

    def once() -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--nnodes", "1",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *target]
        return run(argv, cwd, timeout=timeout, env=env)

    return run_again_on_teardown_abort(once)


_CACHE: dict[tuple, dict] = {}
_CACHE_DIR: tempfile.TemporaryDirectory | None = None


def cached_summary(project: str, name: str, extra: tuple[str, ...] = ()) -> dict:
    """The summary of a tiny run, run once per test session (several tests compare against the same reference)."""
    global _CACHE_DIR
    key = (project, name, tuple(extra))
    if key not in _CACHE:
        if _CACHE_DIR is None:
            _CACHE_DIR = tempfile.TemporaryDirectory(prefix="ascendify-examples-")
            atexit.register(_CACHE_DIR.cleanup)
        cwd = Path(tempfile.mkdtemp(dir=_CACHE_DIR.name))
        _CACHE[key] = summary_of(run_example(project, name, cwd, list(extra)))
    return dict(_CACHE[key])
