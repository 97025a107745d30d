from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = str(Path(__file__).with_name("tiny.py"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_cfg(tmp_path):
    """A TrainConfig factory for a tiny, fast run in tmp_path."""
    from ascendify.train import TrainConfig

    def make(**kw):
        base = dict(model=f"{TINY}:make", data="synthetic", synthetic_size=96, image_size=16, batch_size=16,
                    epochs=2, device="cpu", lr=0.05, out=str(tmp_path / "run"), tensorboard=False)
        base.update(kw)
        return TrainConfig(**base)

    return make


def run_cli(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ASCENDIFY_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    e.update({"OMP_NUM_THREADS": "1", "COLUMNS": "100"})
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "ascendify", "train", *args], capture_output=True, text=True,
                          env=e, cwd=REPO, timeout=timeout)
