"""The device-agnostic port runs on this CPU, deterministically, resumes exactly, and trains under torchrun."""

from __future__ import annotations

import json

import pytest
from examples_support import (
    TINY,
    assert_finite_summary,
    cached_summary,
    run_example,
    script,
    summary_of,
    torchrun,
)

PROJECT = "portable_project"
CPU = ["--device", "cpu"]


@pytest.mark.parametrize("name", ["train_imagenet.py", "train_gpt.py"])
def test_trainer_runs_on_cpu_and_is_deterministic(name, tmp_path):
    reference = cached_summary(PROJECT, name, tuple(CPU))
    again = summary_of(run_example(PROJECT, name, tmp_path, [*CPU, "--out-json", "summary.json"]))
    assert_finite_summary(again)
    assert again == reference  # bit-identical across processes, not merely close
    assert json.loads((tmp_path / "summary.json").read_text()) == again
    assert again["steps"] == (6 if name == "train_imagenet.py" else 4)


def test_imagenet_trainer_learns(tmp_path):
    proc = run_example(PROJECT, "train_imagenet.py", tmp_path,
                       [*CPU, "--epochs", "4", "--steps-per-epoch", "4", "--lr", "0.05", "--checkpoint", ""])
    summary_of(proc)
    losses = [float(line.split("train loss ")[1].split(",")[0])
              for line in proc.stdout.splitlines() if "train loss" in line]
    assert len(losses) == 4 and losses[-1] < losses[0], proc.stdout
    assert not list(tmp_path.glob("*.pt"))  # --checkpoint '' writes none


def test_imagenet_resume_matches_an_uninterrupted_run(tmp_path):
    reference = cached_summary(PROJECT, "train_imagenet.py", tuple(CPU))
    first = summary_of(run_example(PROJECT, "train_imagenet.py", tmp_path, [*CPU, "--epochs", "1"]))
    assert first["steps"] == 3 and (tmp_path / "ckpt.pt").is_file()
    assert first["param_checksum"] != reference["param_checksum"]
    resumed = run_example(PROJECT, "train_imagenet.py", tmp_path, [*CPU, "--resume"])
    assert "resumed from ckpt.pt" in resumed.stdout
    assert summary_of(resumed) == reference

    # the checkpoint feeds the inference script: trained weights give other logits than the seeded init
    untrained = cached_summary(PROJECT, "infer.py", tuple(CPU))
    trained = run_example(PROJECT, "infer.py", tmp_path, [*CPU, "--checkpoint", "ckpt.pt"])
    assert "loaded weights from ckpt.pt" in trained.stdout
    assert summary_of(trained)["output_checksum"] != untrained["output_checksum"]


def test_infer_runs_on_cpu_is_deterministic_and_profiles(tmp_path):
    reference = cached_summary(PROJECT, "infer.py", tuple(CPU))
    profiled = run_example(PROJECT, "infer.py", tmp_path, [*CPU, "--profile", "--out-json", "infer.json"])
    again = summary_of(profiled)
    assert "Self CPU" in profiled.stdout  # the profiler's table
    assert reference["iters"] == again["iters"] == 3
    assert reference["output_checksum"] == again["output_checksum"]
    assert again["latency_ms"] > 0
    assert json.loads((tmp_path / "infer.json").read_text()) == again


@pytest.mark.parametrize("name", ["train_imagenet.py", "train_gpt.py"])
def test_two_process_torchrun_on_cpu_with_gloo(name, tmp_path):
    """DDP over gloo: both ranks end with the same parameters and the same (all-reduced) loss."""
    proc = torchrun(2, [str(script(PROJECT, name)), *TINY[name], *CPU, "--out-json", "out.json"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rank0 = json.loads((tmp_path / "out.json").read_text())
    rank1 = json.loads((tmp_path / "out.rank1.json").read_text())
    assert_finite_summary(rank0)
    assert rank0 == rank1
    # two ranks see twice the data of one process: the numbers must differ from a single-process run
    assert rank0["param_checksum"] != cached_summary(PROJECT, name, tuple(CPU))["param_checksum"]
