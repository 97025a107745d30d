"""Proof: the project's CUDA example scripts run *unmodified* under ``ascendify run`` and produce the same
numbers as their hand-ported versions on the same device (CPU: ``examples/portable_project``; emulated NPU:
``examples/npu_project`` under ``ascendify emulate``). Each pair runs concurrently to keep the suite short."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from auto_support import PYTHON, REPO, last_json, run_cmd

EXAMPLES = REPO / "examples"
KEYS = {"train": ("final_loss", "param_checksum", "steps"), "infer": ("output_checksum", "iters")}
TINY = {
    "train_gpt.py": ["--steps", "3", "--batch-size", "2", "--seq-len", "16", "--vocab-size", "64", "--d-model", "32",
                     "--n-layers", "2", "--n-heads", "2", "--dataset-tokens", "4096"],
    "train_imagenet.py": ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4", "--image-size", "32",
                          "--num-classes", "10", "--workers", "0", "--width", "8"],
    "infer.py": ["--batch-size", "4", "--image-size", "32", "--num-classes", "10", "--iters", "2", "--warmup", "1",
                 "--width", "8"],
}

pytestmark = pytest.mark.slow


def _pair(cuda_cmd: list[str], ref_cmd: list[str], ref_dir: str, tmp_path: Path) -> tuple[dict, dict, str]:
    """Run ``cuda_cmd`` (scripts of examples/cuda_project) and ``ref_cmd`` (of examples/REF_DIR) concurrently,
    each from its own empty folder under ``tmp_path``: what they write (checkpoints) stays out of examples/."""
    env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDIFY_")}
    base.update(env)
    procs = []
    for cmd, project in ((cuda_cmd, "cuda_project"), (ref_cmd, ref_dir)):
        cwd = tmp_path / project
        cwd.mkdir()
        cmd = [str(EXAMPLES / project / w) if w in TINY else w for w in cmd]  # the script, by its full path
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"{p.args}\n{err[-3000:]}"
    return last_json(outs[0][0]), last_json(outs[1][0]), outs[0][1]


def _same(a: dict, b: dict, kind: str) -> None:
    for k in KEYS[kind]:
        assert a[k] == b[k], (k, a, b)


@pytest.mark.parametrize("script, extra", [
    ("train_gpt.py", ["--precision", "bf16"]),
    ("train_imagenet.py", ["--amp"]),
    ("infer.py", []),
])
def test_cuda_examples_on_cpu_match_portable_versions(script, extra, tmp_path):
    args = TINY[script] + extra
    got, ref, stderr = _pair([PYTHON, "-m", "ascendify", "run", "--to", "cpu", script, *args],
                             [PYTHON, script, *args], "portable_project", tmp_path)
    _same(got, ref, "infer" if script == "infer.py" else "train")
    assert "ascendify run → cpu" in stderr


@pytest.mark.parametrize("script, extra", [
    ("train_gpt.py", ["--precision", "bf16"]),  # its `device.type == "cuda"` autocast choice is rewritten
    ("train_imagenet.py", ["--amp"]),
    ("infer.py", []),
])
def test_cuda_examples_on_emulated_npu_match_npu_versions(script, extra, tmp_path):
    args = TINY[script] + extra
    got, ref, stderr = _pair([PYTHON, "-m", "ascendify", "run", "--to", "npu", script, *args],
                             [PYTHON, "-m", "ascendify", "emulate", "-q", "--", PYTHON, script, *args],
                             "npu_project", tmp_path)
    _same(got, ref, "infer" if script == "infer.py" else "train")
    assert "npu (emulated)" in stderr


def test_torchrun_two_processes_nccl_on_emulated_npu(tmp_path):
    from auto_support import SCRIPTS, rank_results

    r = run_cmd([PYTHON, "-m", "ascendify", "run", "--to", "npu", "--log", str(tmp_path / "r.json"), "torchrun",
                 "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "ddp_nccl.py")],
                env={"DDP_OUT": str(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = rank_results(tmp_path)
    assert sorted(x["rank"] for x in lines) == [0, 1]
    assert {x["backend"] for x in lines} == {"hccl"}
    assert all(x["device"].startswith("npu") for x in lines)
    assert lines[0]["param_checksum"] == lines[1]["param_checksum"]
    assert {x["rank_sum"] for x in lines} == {1.0}
