"""The ``--to portable`` output of the training examples runs unchanged on the CPU (tiny synthetic sizes)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascendify import cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "cuda_project"

TINY = {
    "train_gpt.py": ["--steps", "2", "--batch-size", "2", "--seq-len", "8", "--vocab-size", "32", "--d-model", "16",
                     "--n-layers", "1", "--n-heads", "2", "--precision", "fp32", "--dataset-tokens", "512"],
    "train_imagenet.py": ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "2", "--image-size", "16",
                          "--num-classes", "4", "--workers", "0"],
}


@pytest.fixture(scope="module")
def portable_tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("portable") / "project"
    assert cli.main(["migrate", str(EXAMPLES), "-o", str(out), "--to", "portable", "-q"]) in (0, 3)
    return out


@pytest.mark.parametrize("script", sorted(TINY))
def test_portable_training_example_runs_on_cpu(portable_tree, script, tmp_path):
    converted = (portable_tree / script).read_text()
    assert "torch.cuda." not in converted  # every torch.cuda use is mapped or guarded
    summary = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCENDIFY_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    r = subprocess.run([sys.executable, script, *TINY[script], "--out-json", str(summary)], cwd=portable_tree,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(summary.read_text())
    assert data["steps"] >= 2
    assert math.isfinite(data["final_loss"])
