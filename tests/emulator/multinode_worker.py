"""A rank of the launch tests (tests/emulator/test_multinode.py); the emulator is enabled by ASCENDIFY_EMULATE=npu.

Usage: ``python multinode_worker.py OUT_DIR MODE``; MODE ``torchrun`` (RANK/WORLD_SIZE/LOCAL_RANK from torchrun),
``ranktable`` (the Ascend convention: RANK_ID, RANK_SIZE, DEVICE_ID, RANK_TABLE_FILE, MASTER_ADDR/PORT) or
``fail`` (rank 1 breaks an HCCL rule under fidelity error while rank 0 waits in a collective). Each rank writes
``OUT_DIR/rank{R}.json``: its rank, world size, device and an all_reduce of rank + 1.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

import ascendify.emulator  # noqa: F401  (enabled by ASCENDIFY_EMULATE=npu)

out, mode = sys.argv[1], sys.argv[2]
if mode == "ranktable":
    torch.npu.set_device(int(os.environ["DEVICE_ID"]))
    dist.init_process_group("hccl", rank=int(os.environ["RANK_ID"]), world_size=int(os.environ["RANK_SIZE"]))
else:
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
rank = dist.get_rank()
with open(os.path.join(out, f"pid{rank}"), "w") as f:
    f.write(str(os.getpid()))
if mode == "fail" and rank == 1:
    dist.all_reduce(torch.ones(2, dtype=torch.float64, device="npu"))  # HCCL refuses float64: raises here
t = torch.full((2,), float(rank + 1), device="npu")
dist.all_reduce(t)
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "world": dist.get_world_size(), "device": str(t.device), "sum": t.cpu().tolist(),
               "group_rank": os.environ.get("GROUP_RANK"), "backend": dist.get_backend()}, f)
dist.barrier()
dist.destroy_process_group()
