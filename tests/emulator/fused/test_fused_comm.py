"""Communication-fused operators on 2 emulated ranks (one torchrun job): all-gather + matmul, matmul +
reduce-scatter, matmul + all-reduce, AlltoAllv + grouped matmul and back, against references computed here from
the same global inputs (the formulas of torch_npu's pages)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gloo_teardown import run_again_on_teardown_abort

pytest.importorskip("torch_npu")
WORKER = Path(__file__).resolve().parent / "comm_worker.py"


def data(seed: int, *shape, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("fused_comm")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore::FutureWarning")
    proc = run_again_on_teardown_abort(lambda: subprocess.run(  # gloo's abort at exit: see gloo_teardown
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(_free_port()), str(WORKER), str(out)],
        env=env, capture_output=True, text=True, timeout=240))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def mm(a, b):
    return (a.float() @ b.float()).half()


def test_all_gather_reduce_scatter_and_all_reduce_matmuls(ranks):
    x1, w = data(1, 8, 256), data(2, 256, 8)
    parts = [data(3, 6, 256), data(4, 6, 256)]
    summed = parts[0].float() @ w.float() + parts[1].float() @ w.float()
    for rank, got in enumerate(ranks):
        assert got["hcom"].startswith("ascendify_hccl_")
        assert torch.equal(got["ag_gathered"], x1)  # allgather(x1) along dim 0
        torch.testing.assert_close(got["ag_out"], mm(x1, w), rtol=1e-3, atol=1e-3)
        assert got["ag_no_gather"] == 0  # gather_output=False: an empty tensor
        torch.testing.assert_close(got["rs_out"], summed[rank * 3:(rank + 1) * 3].half(), rtol=1e-3, atol=1e-2)
        torch.testing.assert_close(got["ar_out"], (summed + 1).half(), rtol=1e-3, atol=1e-2)  # x3 after the sum
        assert "world_size should be in [2, 4, 8, 16, 32]" in got["bad_world"]
        fused = got["report_fused"]
        assert fused["npu_all_gather_base_mm"] == 2 and fused["npu_alltoallv_gmm"] == 1


def test_alltoallv_grouped_matmul_permutes_by_expert_and_comes_back(ranks):
    e, sends = 2, [[1, 2, 3, 1], [2, 0, 1, 2]]
    gx = [data(10 + r, sum(sends[r]), 16) for r in range(2)]
    for rank, got in enumerate(ranks):
        # rows from rank s for my expert j: gx[s] rows at offset sum(sends[s][:rank * e + j])
        blocks = {}
        for s in range(2):
            offs = [0]
            for c in sends[s]:
                offs.append(offs[-1] + c)
            for j in range(e):
                i = rank * e + j
                blocks[(s, j)] = gx[s][offs[i]:offs[i + 1]]
        perm = torch.cat([blocks[(s, j)] for j in range(e) for s in range(2)])  # (expert, source rank) order
        assert torch.equal(got["a2a_perm"], perm)
        gw = data(20 + rank, e, 16, 4)
        sizes = [sum(blocks[(s, j)].shape[0] for s in range(2)) for j in range(e)]
        want = torch.cat([mm(p, gw[j]) for j, p in enumerate(perm.split(sizes))])
        torch.testing.assert_close(got["a2a_gy"], want, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(got["a2a_mm"], mm(gx[rank][:3], data(30, 16, 5)), rtol=1e-3, atol=1e-3)
        assert got["a2a_back"].shape == (sum(sends[rank]), 16) and got["a2a_none_mm"]
        assert got["a2a_warned"]  # EP world size 2: CANN's kernel would refuse it; the emulator warns
        assert "not supported on Ascend910B3" in got["a2a_on_a2"]  # documented for Atlas A3 only
