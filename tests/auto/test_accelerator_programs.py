"""Device-agnostic programs (``torch.accelerator``, as pytorch/examples writes them at its head) take the branch they
take on a GPU under ``ascendify run``: on the CPU (the reference run), on the emulated NPU, and under
``ascendify emulate`` unmodified. Each group of runs goes concurrently to keep the suite short."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from auto_support import PYTHON, SCRIPTS, last_json, rank_results

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDIFY_")}
    e.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return e


def _all(cmds: list[tuple[list[str], dict[str, str]]], cwd: Path) -> list[tuple[str, str]]:
    procs = [subprocess.Popen(c, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c, e in cmds]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"{p.args}\n{err[-3000:]}"
    return outs


def test_a_single_process_trainer_takes_the_accelerator_branch(tmp_path):
    script = str(SCRIPTS / "accel_train.py")
    log = tmp_path / "cpu.json"
    plain, cpu, npu, emulated = _all([
        ([PYTHON, script, "--amp"], _env()),
        ([PYTHON, "-m", "ascendify", "run", "--to", "cpu", "--log", str(log), script, "--amp"], _env()),
        ([PYTHON, "-m", "ascendify", "run", "--to", "npu", script, "--amp"], _env()),
        ([PYTHON, "-m", "ascendify", "emulate", "-q", "--", PYTHON, script, "--amp"], _env()),
    ], tmp_path)
    plain, cpu, npu, emulated = (last_json(o) for o, _ in (plain, cpu, npu, emulated))
    # without ascendify this machine has no accelerator: the CPU branch (what `run --to cpu` used to take)
    assert plain["branch"] == "cpu"
    # the reference run: the GPU's branch, executed on the CPU, so the same numbers as the CPU branch's
    assert cpu["branch"] == "accel" and cpu["device"] == cpu["param_device"] == "cpu"
    assert cpu["losses"] == plain["losses"]
    assert cpu["module"] == "cuda" and cpu["backend"] == "gloo" and cpu["device_count"] == 1 and cpu["memory"] == 0
    assert cpu["elapsed_ms"] > 0
    report = json.loads(log.read_text())
    redirected = {r["api"]: r for r in report["redirected"]}
    for api in ("torch.accelerator.is_available", "torch.accelerator.current_accelerator",
                "torch.accelerator.synchronize", "torch.get_device_module", "torch.accelerator.device_count",
                "torch.Event"):
        assert redirected[api]["first_site"].rpartition("/")[2].startswith("accel_train.py:"), api
    assert "torch.accelerator.memory_allocated" in {r["api"] for r in report["no_effect"]}
    # the emulated NPU, redirected or not: torch_npu's accelerator
    for o in (npu, emulated):
        assert o["branch"] == "accel" and o["device"] == "npu" and o["param_device"] == "npu:0", o
        assert o["module"] == "npu" and o["backend"] == "hccl" and o["device_count"] == 8 and o["memory"] > 0
        assert o["elapsed_ms"] > 0
        assert o["losses"] == pytest.approx(cpu["losses"], rel=1e-3)


def test_a_torchrun_ddp_job_finds_two_accelerators_and_their_backend(tmp_path):
    outs = {t: tmp_path / t for t in ("cpu", "npu")}
    for d in outs.values():
        d.mkdir()
    _all([([PYTHON, "-m", "ascendify", "run", "--to", t, "--log", str(d / "run.json"), "torchrun", "--standalone",
            "--nproc-per-node", "2", str(SCRIPTS / "accel_ddp.py")], _env(DDP_OUT=str(d)))
          for t, d in outs.items()], tmp_path)
    for t, backend in (("cpu", "gloo"), ("npu", "hccl")):
        ranks = rank_results(outs[t])  # the job exits without a file when it finds fewer than 2 accelerators
        assert [r["rank"] for r in ranks] == [0, 1], t
        assert {r["backend"] for r in ranks} == {backend}
        assert all(r["gpu_backend"] for r in ranks)  # `get_default_backend_for_device(acc) == "nccl"`, rewritten
        assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"] and {r["rank_sum"] for r in ranks} == {1.0}
    assert [r["device"] for r in rank_results(outs["cpu"])] == ["cpu", "cpu"]  # f"{acc}:{rank}": the one cpu
    assert [r["device"] for r in rank_results(outs["npu"])] == ["npu:0", "npu:1"]
    report = json.loads((outs["cpu"] / "run.json").read_text())
    redirected = {r["api"]: r["to"] for r in report["redirected"]}
    assert redirected["dist.init_process_group(device_id)"] == "None (cpu)"
    assert redirected["torch.device"] == "cpu (one cpu device)"
    assert "torch.accelerator.set_device_index" in {r["api"] for r in report["no_effect"]}
    assert any("get_default_backend_for_device" in f["code"] for f in report["findings"])
