"""One rank of the 2-process ``hccl`` test (run by torchrun from tests/emulator/test_distributed.py).

Usage: ``python -m torch.distributed.run --nproc_per_node 2 hccl_worker.py OUT_DIR STEPS``. Each rank enables
the emulator itself, runs every collective on ``npu`` tensors, then trains a small CNN with DDP
(``device_ids``) on its half of a fixed global batch, and writes what it saw to ``OUT_DIR/rank{R}.json`` and
its final parameters to ``OUT_DIR/params{R}.pt``. The test checks the numbers; this script only records them.
"""

from __future__ import annotations

import json
import os
import sys

import ascendify.emulator

ascendify.emulator.enable()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

GLOBAL_BATCH = 8


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 5),
    )


def make_data(steps: int):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(GLOBAL_BATCH, 3, 6, 6, generator=g), torch.randint(0, 5, (GLOBAL_BATCH,), generator=g))
        for _ in range(steps)
    ]


def values(t: torch.Tensor) -> list:
    assert t.device.type == "npu", t.device
    return t.cpu().tolist()


def collectives(rank: int, world: int) -> dict:
    out: dict = {"backend": dist.get_backend(), "is_hccl_available": dist.is_hccl_available()}

    t = torch.full((3,), float(rank + 1), device="npu")
    dist.all_reduce(t)
    out["all_reduce"] = values(t)

    t = torch.full((2,), float(rank + 1), device="npu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = values(t)

    t = torch.full((2,), float(rank + 1), device="npu")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["all_reduce_avg"] = values(t)

    gathered = [torch.empty(2, device="npu") for _ in range(world)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device="npu"))
    out["all_gather"] = [values(g) for g in gathered]

    flat = torch.empty(2 * world, device="npu")
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device="npu"))
    out["all_gather_into_tensor"] = values(flat)

    # HCCL compares element counts, not shapes (accelerate's gather_for_metrics passes a flat output)
    flat = torch.empty(2 * 3 * world, device="npu")
    dist.all_gather_into_tensor(flat, torch.full((2, 3), float(rank), device="npu"))
    out["all_gather_into_flat"] = values(flat)
    shaped = torch.empty(world, 3, device="npu")
    dist.all_gather_into_tensor(shaped, torch.full((3,), float(rank), device="npu"))
    out["all_gather_into_stacked"] = values(shaped)
    r = torch.empty(3, 2, device="npu")
    dist.reduce_scatter_tensor(r, torch.arange(6.0 * world, device="npu") + rank)
    out["reduce_scatter_from_flat"] = values(r)
    try:
        dist.all_gather_into_tensor(torch.empty(2 * world + 1, device="npu"), torch.ones(2, device="npu"))
        out["all_gather_bad_numel"] = None
    except RuntimeError as e:
        out["all_gather_bad_numel"] = str(e)
    parts = [torch.empty(r + 1, device="npu") for r in range(world)]  # uneven parts: HcclAllGatherV
    dist.all_gather(parts, torch.full((rank + 1,), float(rank), device="npu"))
    out["all_gather_uneven"] = [values(g) for g in parts]
    rows = [torch.empty(1, 2, device="npu") for _ in range(world)]  # other shape, same count
    dist.all_gather(rows, torch.full((2,), float(rank), device="npu"))
    out["all_gather_reshaped"] = [values(g) for g in rows]
    mine = torch.empty(rank + 1, device="npu")  # uneven parts: HcclReduceScatterV
    dist.reduce_scatter(mine, [torch.full((r + 1,), float(rank + 1), device="npu") for r in range(world)])
    out["reduce_scatter_uneven"] = values(mine)

    ins = [torch.full((rank + j + 1,), float(10 * rank + j), device="npu") for j in range(world)]
    outs = [torch.empty(j + rank + 1, device="npu") for j in range(world)]  # parts of other sizes: AlltoAllV
    dist.all_to_all(outs, ins)
    out["all_to_all_uneven"] = [values(o) for o in outs]

    try:  # pinned host memory needs the C++ kernels (ops/cfast.cpp): without them, torch's error
        pinned = torch.empty(4, pin_memory=True)
        out["pinned"] = [pinned.is_pinned(), torch.ones(2).pin_memory().is_pinned(), torch.ones(2).is_pinned()]
    except RuntimeError as e:
        out["pinned"] = str(e)

    b = torch.full((2,), float(rank + 10), device="npu")
    dist.broadcast(b, src=1)
    out["broadcast"] = values(b)

    r = torch.empty(2, device="npu")
    dist.reduce_scatter(r, [torch.full((2,), float(10 * rank + i), device="npu") for i in range(world)])
    out["reduce_scatter"] = values(r)

    r = torch.empty(2, device="npu")
    dist.reduce_scatter_tensor(r, torch.arange(2.0 * world, device="npu") + rank)
    out["reduce_scatter_tensor"] = values(r)

    x = torch.full((2,), float(rank + 1), device="npu")
    dist.reduce(x, dst=0)
    out["reduce_dst0"] = values(x)

    if rank == 0:
        dist.send(torch.arange(3.0, device="npu"), dst=1)
    else:
        y = torch.zeros(3, device="npu")
        dist.recv(y, src=0)
        out["recv"] = values(y)

    # a ring exchange posting isend before irecv: deadlocks if isend blocks until the peer receives
    outgoing = torch.full((1 << 18,), float(rank), device="npu")
    incoming = torch.empty(1 << 18, device="npu")
    sent = dist.isend(outgoing, (rank + 1) % world)
    got = dist.irecv(incoming, (rank - 1) % world)
    sent.wait()
    got.wait()
    out["ring_received_from"] = sorted(set(incoming.cpu().tolist()))

    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    out["all_gather_object"] = objects
    payload = [{"from": rank}]
    dist.broadcast_object_list(payload, src=1)
    out["broadcast_object_list"] = payload

    a2a = torch.empty(world, device="npu")
    dist.all_to_all_single(a2a, torch.arange(world, device="npu", dtype=torch.float32) + 10 * rank)
    out["all_to_all_single"] = values(a2a)

    gathered_at_0 = [torch.empty(1, device="npu") for _ in range(world)] if rank == 0 else None
    dist.gather(torch.tensor([float(rank)], device="npu"), gathered_at_0, dst=0)
    if rank == 0:
        out["gather"] = [values(g) for g in gathered_at_0]
    piece = torch.empty(1, device="npu")
    dist.scatter(piece, [torch.tensor([10.0 + r], device="npu") for r in range(world)] if rank == 0 else None, src=0)
    out["scatter"] = values(piece)

    sub = dist.new_group(ranks=list(range(world)), backend="hccl")
    t = torch.full((2,), float(rank), device="npu")
    dist.all_reduce(t, group=sub)
    out["subgroup_all_reduce"] = values(t)

    view = torch.zeros(4, device="npu")
    work = dist.all_reduce(view[1:3].fill_(rank + 1.0), async_op=True)
    out["async_wait"] = bool(work.wait())
    out["async_in_place_view"] = values(view)

    dist.barrier()

    try:
        dist.all_reduce(torch.ones(2))
        out["cpu_tensor_error"] = None
    except Exception as e:  # HCCL refuses CPU tensors
        out["cpu_tensor_error"] = f"{type(e).__name__}: {e}"

    gloo = dist.new_group(backend="gloo")
    try:
        dist.all_reduce(torch.ones(2, device="npu"), group=gloo)
        out["gloo_npu_error"] = None
    except Exception as e:  # gloo has no npu backend, as on hardware
        out["gloo_npu_error"] = f"{type(e).__name__}: {e}"
    cpu = torch.ones(2)
    dist.all_reduce(cpu, group=gloo)
    out["gloo_cpu"] = cpu.tolist()
    return out


class WithUnused(torch.nn.Module):
    """The CNN and a head no step uses: DDP with ``find_unused_parameters=True`` (the Trainer's default under DDP)
    marks it unused through a pinned host copy of its used-parameter map, in the first backward."""

    def __init__(self):
        super().__init__()
        self.body = make_model()
        self.unused = torch.nn.Linear(5, 5)

    def forward(self, x):
        return self.body(x)


def train(rank: int, world: int, steps: int, unused: bool = False, **ddp_options) -> dict:
    """DDP the torch_npu way: rank r sets and trains on ``npu:LOCAL_RANK``."""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"npu:{local_rank}")
    torch.npu.set_device(device)
    model = (WithUnused() if unused else make_model()).to(device)
    ddp = DDP(model, device_ids=[local_rank], **ddp_options)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    per_rank = GLOBAL_BATCH // world
    for x, y in make_data(steps):
        xs = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        ys = y[rank * per_rank:(rank + 1) * per_rank].to(device)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(xs), ys)
        loss.backward()
        opt.step()
    body = model.body if unused else model
    params = {k: v.detach().cpu() for k, v in body.state_dict().items()}
    return {
        "param_devices": sorted({p.device.type for p in model.parameters()}),
        "grad_devices": sorted({p.grad.device.type for p in body.parameters()}),
        "params": params,
    }


def main() -> int:
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("hccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    report = {"rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"])}
    report.update(collectives(rank, world))
    trained = train(rank, world, steps)
    torch.save(trained.pop("params"), os.path.join(out_dir, f"params{rank}.pt"))
    # gradients as views into the communication buckets, small buckets (several allreduces per step)
    viewed = train(rank, world, steps, gradient_as_bucket_view=True, bucket_cap_mb=0.0005)
    torch.save(viewed.pop("params"), os.path.join(out_dir, f"params_bucket_view{rank}.pt"))
    if isinstance(report["pinned"], list):  # DDP's find_unused_parameters copies through pinned host memory
        found = train(rank, world, steps, unused=True, find_unused_parameters=True)
        torch.save(found.pop("params"), os.path.join(out_dir, f"params_find_unused{rank}.pt"))
    report.update(trained)
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
