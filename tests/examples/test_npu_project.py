"""The hand-written torch_npu port runs on the emulated NPU and gives the portable port's numbers on the CPU.

Both ports draw the same random numbers in the same order and run the same kernels underneath, so with AMP off
the summaries must be identical; with AMP on they must be close (the NPU's autocast op lists are not the CPU's).
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from examples_support import (
    EMULATED_RUNNER,
    TINY,
    assert_finite_summary,
    cached_summary,
    clean_env,
    run,
    run_example,
    script,
    summary_of,
    torchrun,
)

PROBE = """\
import ascendify.emulator
ascendify.emulator.enable()
import torch, torch_npu
assert (torch.ones(2, device="npu") + 1).sum().item() == 4.0
print("ok")
"""


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """A launcher that enables the emulator, then runs the script as ``python script.py`` would."""
    where = tmp_path_factory.mktemp("emulated")
    probe = run([sys.executable, "-c", PROBE], where, timeout=120)
    assert probe.returncode == 0 and "ok" in probe.stdout, probe.stderr[-2000:]
    path = where / "run_emulated.py"
    path.write_text(EMULATED_RUNNER)
    return str(path)


def _pair(name, tmp_path, runner, extra=()):
    npu = run_example("npu_project", name, tmp_path, list(extra), runner=[runner])
    cpu = cached_summary("portable_project", name, ("--device", "cpu", *extra))
    return summary_of(npu), cpu, npu


def test_npu_imagenet_trainer_resumed_on_the_emulator_matches_the_portable_trainer_on_cpu(tmp_path, runner):
    """Two epochs on the CPU == one epoch on the emulated NPU, a checkpoint, and a resumed second epoch.

    The checkpoint holds NPU tensors and reloads through the ``{"npu:0": ...}`` map_location."""
    name = "train_imagenet.py"
    cpu = cached_summary("portable_project", name, ("--device", "cpu"))
    first = run_example("npu_project", name, tmp_path, ["--epochs", "1"], runner=[runner])
    assert "running on npu devices" in first.stdout
    assert summary_of(first)["steps"] == 3
    resumed = run_example("npu_project", name, tmp_path, ["--resume"], runner=[runner])
    assert "resumed from ckpt_npu.pt" in resumed.stdout
    npu = summary_of(resumed)
    assert_finite_summary(npu)
    assert npu == cpu


def test_npu_gpt_trainer_on_the_emulator_matches_the_portable_trainer_on_cpu(tmp_path, runner):
    npu, cpu, proc = _pair("train_gpt.py", tmp_path, runner)
    assert "training on" in proc.stdout and "ASCEND_RT_VISIBLE_DEVICES" in proc.stdout
    assert_finite_summary(npu)
    assert npu == cpu  # the GPT ties its input and output embeddings: the tie must survive .to("npu")


def test_npu_infer_on_the_emulator_matches_the_portable_infer_on_cpu(tmp_path, runner):
    npu, cpu, proc = _pair("infer.py", tmp_path, runner)
    assert "inference on npu" in proc.stdout
    assert npu["iters"] == cpu["iters"] == 3
    assert npu["output_checksum"] == cpu["output_checksum"]


@pytest.mark.parametrize(("name", "amp_flags"), [("train_imagenet.py", ["--amp", "--epochs", "1", "--steps-per-epoch", "2"]),
                                                 ("train_gpt.py", ["--precision", "bf16"])])
def test_npu_trainer_with_amp_is_close_to_the_portable_trainer(name, amp_flags, tmp_path, runner):
    npu, cpu, _ = _pair(name, tmp_path, runner, amp_flags)
    assert_finite_summary(npu)
    assert npu["steps"] == cpu["steps"]
    assert math.isclose(npu["final_loss"], cpu["final_loss"], rel_tol=2e-2)
    assert math.isclose(npu["param_checksum"], cpu["param_checksum"], rel_tol=1e-3)


def test_two_process_hccl_run_on_the_emulator_matches_gloo_on_cpu(tmp_path, runner):
    name = "train_imagenet.py"
    npu_dir, cpu_dir = tmp_path / "npu", tmp_path / "cpu"
    npu_dir.mkdir()
    cpu_dir.mkdir()
    npu = torchrun(2, [runner, str(script("npu_project", name)), *TINY[name], "--epochs", "1",
                       "--out-json", "out.json"], npu_dir, env=clean_env())
    assert npu.returncode == 0, npu.stdout[-3000:] + npu.stderr[-3000:]
    assert "running on npu devices" in npu.stdout
    cpu = torchrun(2, [str(script("portable_project", name)), *TINY[name], "--epochs", "1", "--device", "cpu",
                       "--out-json", "out.json"], cpu_dir)
    assert cpu.returncode == 0, cpu.stdout[-3000:] + cpu.stderr[-3000:]
    read = [json.loads((d / f).read_text()) for d in (npu_dir, cpu_dir) for f in ("out.json", "out.rank1.json")]
    assert_finite_summary(read[0])
    assert read[0] == read[1] == read[2] == read[3]
