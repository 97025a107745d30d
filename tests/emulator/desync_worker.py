"""One rank of the collective-desync test (tests/emulator/test_desync.py): ``desync_worker.py CASE RANK PORT``.

Cases: ``skip`` (rank 1 skips an all_reduce: its next one, of another shape, pairs with rank 0's skipped one),
``hang`` (rank 1 skips the last all_reduce and carries on with other work), ``ok`` (the same calls on both
ranks, then a few DDP steps: no report; prints the calls recorded). Each rank first checks that its memory
figures equal its npu storages' bytes (the per-rank part of the memory test) and prints ``READY rank time``.
"""

from __future__ import annotations

import os
import sys
import time

import ascendify.emulator

ascendify.emulator.enable(self_test=False)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

case, rank, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("hccl", rank=rank, world_size=2)

held = [torch.ones(100 + rank, device="npu"), torch.zeros(3, 5, device="npu", dtype=torch.float16)]
stored = sum(t.untyped_storage().nbytes() for t in held)
assert torch.npu.memory_allocated() >= stored, (torch.npu.memory_allocated(), stored)
before = torch.npu.memory_allocated()
extra = torch.empty(1000, device="npu")
assert torch.npu.memory_allocated() - before == extra.untyped_storage().nbytes()
print("READY", rank, time.time(), flush=True)

x = torch.ones(4, device="npu")
y = torch.ones(2, device="npu")
if case == "skip":
    if rank == 0:
        dist.all_reduce(x)  # rank 1 skips this one
    dist.all_reduce(y)
    dist.barrier()
elif case == "hang":
    dist.all_reduce(x)
    if rank == 0:
        dist.all_reduce(x)  # rank 1 never gets here: it works on
    else:
        time.sleep(60)
elif case == "ok":
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.all_reduce(x)
    dist.broadcast(y, src=0)
    model = DDP(torch.nn.Linear(4, 2).npu())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4, device="npu")).sum().backward()
        opt.step()
    time.sleep(3 * 0.5)  # a few watchdog rounds: the check compares everything issued
    dist.barrier()
    from ascendify.emulator.distributed import desync

    (checker,) = [c for c in (ref() for ref in desync._checkers) if c is not None]
    print("CALLS", " ".join(entry[1].split("(")[0] for entry in checker.seq), flush=True)
print("END", rank, flush=True)
dist.destroy_process_group()
