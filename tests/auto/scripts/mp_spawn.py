"""torch.multiprocessing.spawn with CUDA calls in the workers (the official ImageNet example's pattern)."""

import json

import torch
import torch.multiprocessing as mp


def worker(rank, queue):
    torch.cuda.set_device(rank)
    x = torch.ones(2, device=f"cuda:{rank}") * (rank + 1)
    queue.put({"rank": rank, "device": str(x.device), "sum": float(x.sum()), "avail": torch.cuda.is_available()})


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(q,), nprocs=2, join=True)
    out = sorted((q.get() for _ in range(2)), key=lambda r: r["rank"])
    print(json.dumps(out))
