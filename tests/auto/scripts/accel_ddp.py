"""A torchrun DDP job in the shape of pytorch/examples' distributed/ddp and FSDP2 at their head: it exits unless
torch.accelerator shows 2 devices, takes the backend from get_default_backend_for_device, binds the process group
to torch.device(f"{acc}:{rank}"). Writes one JSON file per rank to $DDP_OUT/rank<N>.json."""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def verify_min_gpu_count(min_gpus: int = 2) -> bool:
    return torch.accelerator.is_available() and torch.accelerator.device_count() >= min_gpus


if not verify_min_gpu_count(2):
    print("Unable to locate sufficient 2 gpus to run this example. Exiting.")
    sys.exit()
rank = int(os.environ["LOCAL_RANK"])
acc = torch.accelerator.current_accelerator()
device = torch.device(f"{acc}:{rank}")
torch.accelerator.set_device_index(rank)
backend = dist.get_default_backend_for_device(device)
dist.init_process_group(backend=backend, device_id=device)

torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device), device_ids=[rank])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)
for _ in range(3):
    loss = model(torch.randn(16, 8, generator=g).to(device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
t = torch.tensor([float(rank)], device=device)
dist.all_reduce(t)
torch.accelerator.synchronize()
result = {"rank": rank, "backend": dist.get_backend(), "device": str(device),
          "param_device": str(next(model.parameters()).device),
          "gpu_backend": dist.get_default_backend_for_device(acc) == "nccl",
          "param_checksum": sum(float(p.detach().double().sum()) for p in model.parameters()),
          "rank_sum": float(t.item())}
with open(os.path.join(os.environ["DDP_OUT"], f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
