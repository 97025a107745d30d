"""One rank of the 2-process test of the communication-fused operators (tests/emulator/fused/test_fused_comm.py).

Usage: ``python -m torch.distributed.run --nproc_per_node 2 comm_worker.py OUT_DIR``. Each rank enables the
emulator, joins the ``hccl`` group, builds the same global inputs from fixed seeds, calls each operator with its
own shard and the group's communicator name, and saves what it got to ``OUT_DIR/rank{R}.pt``; the test
computes the references. The emulated chip is an Atlas A2 (Ascend910B3), an A3 for the AlltoAllv operators
(documented for A3 only). EP world size 2 is below what CANN's AlltoAllv kernels take (8..128): the emulator
warns (fidelity ``warn``) and runs them.
"""

from __future__ import annotations

import os
import sys
import warnings

import ascendify.emulator

ascendify.emulator.enable()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_npu  # noqa: E402


def data(seed: int, *shape, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def main(out_dir: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("hccl")
    torch.npu.set_device(rank)
    hcom = dist.group.WORLD._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    got = {"hcom": hcom}
    x1 = data(1, world * 4, 256)  # the global activations; rank r holds rows [4r, 4r + 4)
    w = data(2, 256, 8)
    mine = x1[rank * 4:(rank + 1) * 4]
    out, gathered = torch_npu.npu_all_gather_base_mm(mine.npu(), w.npu(), hcom, world)
    got["ag_out"], got["ag_gathered"] = out.cpu(), gathered.cpu()
    _, none = torch_npu.npu_all_gather_base_mm(mine.npu(), w.npu(), hcom, world, gather_output=False)
    got["ag_no_gather"] = none.numel()
    part = data(3 + rank, 6, 256)  # each rank's own left operand: the products are summed and scattered
    got["rs_out"] = torch_npu.npu_mm_reduce_scatter_base(part.npu(), w.npu(), hcom, world).cpu()
    got["ar_out"] = torch_npu.npu_mm_all_reduce_base(part.npu(), w.npu(), hcom, x3=torch.ones(6, 8).half().npu()).cpu()
    # expert parallel: e = 2 local experts per rank; counts[r * e + j]: rows for rank r's expert j
    e = 2
    send = [[1, 2, 3, 1], [2, 0, 1, 2]][rank]
    recv = [[1, 2, 2, 0], [3, 1, 1, 2]][rank]  # recv[r][s * e + j] = send[s][r * e + j]
    gx = data(10 + rank, sum(send), 16)
    gw = data(20 + rank, e, 16, 4)
    try:  # the AlltoAllv + grouped-matmul operators are documented for Atlas A3 only
        torch_npu.npu_alltoallv_gmm(gx.npu(), data(20, e, 16, 4).npu(), hcom, world, send, recv)
    except RuntimeError as exc:
        got["a2a_on_a2"] = str(exc)
    ascendify.emulator.settings.device_name = "Ascend910_9392"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gy, mm_y, perm = torch_npu.npu_alltoallv_gmm(gx.npu(), gw.npu(), hcom, world, send, recv,
                                                     mm_x=gx[:3].npu(), mm_weight=data(30, 16, 5).npu(),
                                                     permute_out_flag=True)
        back, none_mm = torch_npu.npu_gmm_alltoallv(gy, data(40 + rank, e, 4, 16).npu(), hcom, world, recv, send)
    ascendify.emulator.settings.device_name = "Ascend910B3"  # npu_mm_all_reduce_base is documented for A2
    got["a2a_warned"] = any("ep_world_size must be 8, 16, 32, 64 or 128" in str(c.message) for c in caught)
    got["a2a_gy"], got["a2a_perm"], got["a2a_mm"] = gy.cpu(), perm.cpu(), mm_y.cpu()
    got["a2a_back"], got["a2a_none_mm"] = back.cpu(), none_mm is None
    try:
        torch_npu.npu_all_gather_base_mm(mine.npu(), w.npu(), hcom, 3)
    except RuntimeError as exc:
        got["bad_world"] = str(exc)
    got["report_fused"] = ascendify.emulator.report()["fused_ops"]
    torch.save(got, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
