"""The sharded stack on emulated ``hccl``: DeviceMesh, DTensor, FSDP2, FSDP1, tensor/sequence parallel, DCP.

Two torchrun jobs (2 and 4 processes) each run every feature of ``sharded_worker.py`` (starting processes is
what costs: one job per world size). Each feature's per-step losses must equal the single-process run on the
whole batch within fp32 reduction order (bf16 rounding for the mixed-precision policy). The 4-process job
loads the checkpoint the 2-process job saved; this process loads the 4-process one without a process group.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gloo_teardown import run_again_on_teardown_abort

HERE = Path(__file__).resolve().parent
WORKER = HERE / "sharded_worker.py"


def _load_worker():
    spec = importlib.util.spec_from_file_location("sharded_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


worker = _load_worker()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(world: int, out: Path, load_from: Path | None = None) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = run_again_on_teardown_abort(lambda: subprocess.run([  # gloo's abort at exit: see gloo_teardown
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        str(WORKER), str(out), *([str(load_from)] if load_from else []),
    ], env=env, capture_output=True, text=True, timeout=300))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"result{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out2, out4 = tmp_path_factory.mktemp("sharded2"), tmp_path_factory.mktemp("sharded4")
    results = {2: _run(2, out2)}
    results[4] = _run(4, out4, load_from=out2)
    return results, {2: out2, 4: out4}


@pytest.fixture(scope="module")
def references():
    return {"mlp": worker.reference_mlp(), "mlp_bf16": worker.reference_mlp(torch.bfloat16),
            "seq": worker.reference_seq(), "attn": worker.reference_seq(worker.AttnBlock)}


def _feature(jobs, world: int, name: str) -> list[dict]:
    per_rank = [res[name] for res in jobs[0][world]]
    for rank, r in enumerate(per_rank):
        assert "error" not in r, f"{name} on {world} ranks, rank {rank}:\n{r.get('error')}"
    return per_rank


# feature -> (reference, relative tolerance)
LOSS_FEATURES = {
    "fsdp2": ("mlp", 1e-5),
    "fsdp2_mixed": ("mlp_bf16", 1e-3),  # bf16 forward/backward on each rank's slice
    "fsdp2_offload": ("mlp", 1e-5),
    "hsdp": ("mlp", 1e-5),  # FSDP2 on a (replicate, shard) mesh
    "fsdp1": ("mlp", 1e-5),
    "tp": ("seq", 1e-5),
    "tp_attention": ("attn", 1e-5),  # heads sharded into SDPA (DTensor rules for the CPU flash kernel)
    "sp": ("seq", 1e-5),
    "mesh2d": ("seq", 1e-5),
}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", sorted(LOSS_FEATURES))
def test_losses_equal_the_single_process_run(jobs, references, world, name):
    ref_name, rtol = LOSS_FEATURES[name]
    per_rank = _feature(jobs, world, name)
    ref = references[ref_name]
    assert ref[0] != ref[-1]  # the model trains
    for r in per_rank:
        assert r["losses"] == pytest.approx(ref, rel=rtol), (name, world)


@pytest.mark.parametrize("world", [2, 4])
def test_the_sharded_stack_breaks_no_hccl_rule(jobs, world):
    """What FSDP, DTensor and DCP send to hccl is what HCCL takes (dtypes, ops, contiguity): no violation.
    DCP's gather_object gathers on rank 0, which torch_npu runs as an all_gather with its warning: a note."""
    for rank, res in enumerate(jobs[0][world]):
        notes = res["hccl_rule_violations"]
        assert res["backend"] == "hccl" and set(notes) <= {"collective.gather"}, notes
        assert bool(notes) == (rank == 0)


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_built_on_meta_and_initialised_shard_by_shard_trains(jobs, world):
    per_rank = _feature(jobs, world, "fsdp2_meta")
    for r in per_rank:
        assert r["finite"] and 0.05 < r["std"] < 1.0, r  # a real random init, not zeros or garbage
        assert r["buffer_device"] == "npu"
        assert r["losses"] == per_rank[0]["losses"] and r["weight"] == per_rank[0]["weight"]
        assert r["losses"][-1] < r["losses"][0]  # it trains


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_shards_and_policies(jobs, world):
    plain, mixed, offload = (_feature(jobs, world, n) for n in ("fsdp2", "fsdp2_mixed", "fsdp2_offload"))
    for rank in range(world):
        assert plain[rank]["sharded_rows"] == 32 // world and plain[rank]["sharded_device"] == "npu"
        assert plain[rank]["forward_weight"] == ["torch.float32", "npu"]
        assert mixed[rank]["forward_weight"] == ["torch.bfloat16", "npu"]  # MixedPrecisionPolicy applied
        assert offload[rank]["sharded_device"] == "cpu"  # CPUOffloadPolicy keeps the shards on the host
        assert offload[rank]["forward_weight"] == ["torch.float32", "npu"]  # and computes on the device


@pytest.mark.parametrize("world", [2, 4])
def test_device_mesh_and_dtensor(jobs, world):
    per_rank = _feature(jobs, world, "dtensor")
    n = 4 * world * 3
    for rank, r in enumerate(per_rank):
        assert r["mesh_group_name"] and r["local_device"] == "npu"
        assert r["local_rows"] == [float(3 * i) for i in range(4 * rank, 4 * rank + 4)]  # Shard(0)
        assert r["full_equal"] and r["replicated_equal"]
        assert r["sum"] == 2.0 * n * (n - 1) / 2
    tp = _feature(jobs, world, "tp")
    assert all(r["fc1_local_rows"] == 32 // world for r in tp)
    assert all(r["wq_local_rows"] == 16 // world for r in _feature(jobs, world, "tp_attention"))  # heads split
    mesh2d = _feature(jobs, world, "mesh2d")
    assert all(r["mesh_shape"] == [world // 2, 2] for r in mesh2d)
    hsdp = _feature(jobs, world, "hsdp")
    assert all(r["placements"] == "(Replicate(), Shard(dim=0))" and r["sharded_rows"] == 16 for r in hsdp)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_checkpoint_saved_on_two_ranks_loads_on_four_and_on_one(jobs):
    results, outs = jobs
    assert all(r["dcp"]["loaded_equal"] and r["dcp"]["loaded_device"] == "npu" for r in results[4])
    _feature(jobs, 2, "dcp")
    import torch.distributed.checkpoint as dcp

    model = worker.make_mlp()
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    dcp.load({"model": sd}, checkpoint_id=str(outs[4] / "ckpt"))  # written by 4 ranks, read by 1
    saved = torch.load(outs[4] / "saved_full.pt")
    assert saved.keys() == sd.keys()
    for k, v in saved.items():
        assert torch.equal(sd[k], v), k
    assert not torch.equal(saved["0.weight"], model.state_dict()["0.weight"])  # trained, not the initial
