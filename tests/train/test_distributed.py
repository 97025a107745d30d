"""Two processes (DDP under torchrun) give what one process gives with the same global batch."""

from __future__ import annotations

import json

import pytest
import torch

from tests.train.conftest import TINY, run_cli

COMMON = ["--model", f"{TINY}:make_no_dropout", "--synthetic-size", "100", "--image-size", "16", "--epochs", "2",
          "--no-tensorboard", "-q"]


def _load(out):
    history = json.loads((out / "history.json").read_text())
    return history, torch.load(out / "last.pt", weights_only=True)["model"], json.loads((out / "train.json").read_text())


@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    r = run_cli(*COMMON, "--batch-size", "32", "--device", "cpu", "--out", str(tmp_path / "one"))
    assert r.returncode == 0, r.stderr
    h1, w1, _ = _load(tmp_path / "one")
    for device in ("cpu", "npu"):
        out = tmp_path / f"two-{device}"
        r = run_cli(*COMMON, "--batch-size", "16", "--device", device, "--nproc", "2", "--out", str(out))
        assert r.returncode == 0, r.stderr[-3000:]
        h2, w2, summary = _load(out)
        assert summary["world_size"] == 2 and summary["emulated"] == (device == "npu")
        assert not list(out.glob("*rank1*"))  # only rank 0 writes
        for a, b in zip(h1, h2, strict=True):
            for key in ("train_loss", "train_acc", "val_loss", "val_acc", "lr"):
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (device, key)
        for k in w1:
            torch.testing.assert_close(w2[k], w1[k], rtol=1e-5, atol=1e-6, msg=f"{device}: {k}")
