"""Helpers for the ascendify.auto tests: run the project's Python in a clean environment, read JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PYTHON = sys.executable


def run_cmd(args: list[str], cwd: Path | None = None, env: dict[str, str | None] | None = None,
            timeout: int = 240) -> subprocess.CompletedProcess:
    """Run a command with the project's Python; a clean env apart from ``env`` overrides."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDIFY_")}
    e.setdefault("OMP_NUM_THREADS", "1")
    e["PYTHONUNBUFFERED"] = "1"
    for k, v in (env or {}).items():  # a value of None removes the variable
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return subprocess.run(args, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)


def ascendify_run(*args: str, **kw) -> subprocess.CompletedProcess:
    return run_cmd([PYTHON, "-m", "ascendify", "run", *args], **kw)


def last_json(stdout: str) -> dict:
    """The last line of ``stdout`` that parses as a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise AssertionError(f"no JSON line in output:\n{stdout[-2000:]}")


def rank_results(folder: Path) -> list[dict]:
    """The per-rank JSON files ``scripts/ddp_nccl.py`` writes to ``$DDP_OUT``, in rank order."""
    return [json.loads(f.read_text()) for f in sorted(folder.glob("rank*.json"))]
