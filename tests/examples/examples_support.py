"""Helpers for the example-project tests: where the projects are, tiny run flags, running a script."""

from __future__ import annotations

import atexit
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PROJECTS = ("cuda_project", "npu_project", "portable_project")
SCRIPTS = ("train_imagenet.py", "train_gpt.py", "infer.py")

# Tiny sizes: each run takes a few seconds on one CPU core (most of it is importing torch).
TINY = {
    "train_imagenet.py": ["--epochs", "2", "--steps-per-epoch", "3", "--batch-size", "4", "--image-size", "32",
                          "--num-classes", "10", "--workers", "0"],
    "train_gpt.py": ["--steps", "4", "--batch-size", "2", "--seq-len", "16", "--vocab-size", "64",
                     "--d-model", "32", "--n-layers", "2", "--n-heads", "2", "--warmup-steps", "2",
                     "--dataset-tokens", "4096", "--precision", "fp32"],
    "infer.py": ["--batch-size", "4", "--image-size", "32", "--num-classes", "10", "--iters", "3",
                 "--warmup", "1"],
}

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


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child run: one thread (2 shared cores), no emulation or redirection leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCENDIFY_", "TORCH_NPU_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else clean_env())


def run_example(project: str, name: str, cwd: Path, extra: list[str] = (), tiny: bool = True,
                runner: list[str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``examples/<project>/<name>`` with the tiny flags (and ``extra``) in ``cwd``."""
    argv = [sys.executable, *(runner or []), str(script(project, name)), *(TINY[name] if tiny else []), *extra]
    return run(argv, cwd, timeout=timeout)


def summary_of(proc: subprocess.CompletedProcess) -> dict:
    """The run's JSON summary: the last stdout line that parses as a JSON object. Fails with the output."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"
    for line in reversed(proc.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise AssertionError(f"no JSON summary in the output:\n{proc.stdout[-3000:]}")


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
    """``python -m torch.distributed.run`` on this host with a free port."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--nnodes", "1",
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *target]
    return run(argv, cwd, timeout=timeout, env=env)


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
