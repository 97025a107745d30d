"""Running the example projects' scripts from tests: where they are, tiny flags, a clean child environment, and
the JSON summary each run prints. Shared by tests/examples, tests/migrate (and usable by any test package).
Also the checkout state that tests/conftest.py's guard compares (:func:`tree_state`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SCRIPTS = ("train_imagenet.py", "train_gpt.py", "infer.py")

# The tiny runs of examples/README.md: each takes a few seconds on one CPU core (most of it importing torch).
TINY = {
    "train_imagenet.py": ["--epochs", "2", "--steps-per-epoch", "3", "--batch-size", "4", "--image-size", "32",
                          "--num-classes", "10", "--workers", "0"],
    "train_gpt.py": ["--steps", "4", "--batch-size", "2", "--seq-len", "16", "--vocab-size", "64",
                     "--d-model", "32", "--n-layers", "2", "--n-heads", "2", "--warmup-steps", "2",
                     "--dataset-tokens", "4096", "--precision", "fp32"],
    "infer.py": ["--batch-size", "4", "--image-size", "32", "--num-classes", "10", "--iters", "3",
                 "--warmup", "1"],
}


def clean_env(**extra: str) -> dict[str, str]:
    """One thread (exact comparisons need the same thread count on both sides; 2 shared cores), and no
    emulation, redirection or torchrun variables leaking in from the test process."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASCENDIFY_", "TORCH_NPU_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


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


_CACHES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".egg-info")


def tree_state(repo: Path = REPO) -> set[str] | None:
    """The checkout's state as the source-tree guard sees it (see tests/conftest.py): the ``git status
    --porcelain --ignored`` lines for ``examples/`` and for ignored files anywhere, caches left out. None where
    ``repo`` is not a git checkout."""
    if shutil.which("git") is None or not (repo / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=repo, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    state = set()
    for line in out.splitlines():
        path = line[3:]
        if any(c in path for c in _CACHES):
            continue
        if path.startswith("examples/") or line.startswith("!! "):
            state.add(line)
    return state
