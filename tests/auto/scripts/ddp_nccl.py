"""A 2-process CUDA DDP job as people write it: nccl, cuda:LOCAL_RANK, set_device, DistributedSampler-free
synthetic data. Prints one JSON line per rank: rank, world_size, backend, device, param_checksum, and writes
it to $DDP_OUT/rank<N>.json when DDP_OUT is set (two ranks' stdout lines may interleave)."""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group(backend="nccl")
device = torch.device(f"cuda:{local_rank}")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
model = DDP(model, device_ids=[local_rank], output_device=local_rank)
opt = torch.optim.SGD(model.parameters(), lr=0.05)

g = torch.Generator().manual_seed(100 + dist.get_rank())
for _ in range(3):
    x = torch.randn(16, 8, generator=g).cuda(non_blocking=True)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

t = torch.tensor([float(dist.get_rank())], device=device)
dist.all_reduce(t)
torch.cuda.synchronize()
checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
result = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": dist.get_backend(),
          "device": str(next(model.parameters()).device), "param_checksum": checksum, "rank_sum": float(t.item())}
print(json.dumps(result))
if os.environ.get("DDP_OUT"):
    with open(os.path.join(os.environ["DDP_OUT"], f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
