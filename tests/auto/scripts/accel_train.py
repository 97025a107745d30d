"""A device-agnostic trainer in the shape of pytorch/examples at its head (mnist, vae, dcgan, word_language_model
--accel, minGPT's trainer): the device comes from torch.accelerator, the CPU is the fallback; pinned loader memory
on the accelerator; fp16 autocast and a GradScaler for the device's type (--amp); torch.Event timing. Prints one JSON line."""

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--no-accel", action="store_true")
parser.add_argument("--amp", action="store_true", help="fp16 autocast and a GradScaler, on any device")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()

use_accel = not args.no_accel and torch.accelerator.is_available()
torch.manual_seed(1)
if use_accel:
    device = torch.accelerator.current_accelerator()
else:
    device = torch.device("cpu")
print(f"Using device: {device}")

loader_kwargs = {"batch_size": 8}
if use_accel:
    loader_kwargs.update({"pin_memory": True, "shuffle": False})
g = torch.Generator().manual_seed(2)
data = torch.utils.data.TensorDataset(torch.randn(8 * args.steps, 12, generator=g),
                                      torch.randint(0, 3, (8 * args.steps,), generator=g))
loader = torch.utils.data.DataLoader(data, **loader_kwargs)

model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(device.type, enabled=args.amp)
losses = []
if use_accel:  # device-generic timing, as benchmarks write it
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    start.record()
for x, y in loader:
    x, y = x.to(device), y.to(device)
    with torch.amp.autocast(device_type=device.type, dtype=torch.float16, enabled=args.amp):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    losses.append(loss.item())

if use_accel:
    end.record()
    torch.accelerator.synchronize()
    torch.get_device_module(device).manual_seed(3)
print(json.dumps({
    "branch": "accel" if use_accel else "cpu", "device": str(device),
    "param_device": str(next(model.parameters()).device), "losses": losses,
    "device_count": torch.accelerator.device_count() if use_accel else 0,
    "module": torch.get_device_module(device).__name__.rpartition(".")[2],
    "backend": torch.distributed.get_default_backend_for_device(device),
    "memory": torch.accelerator.memory_allocated() if use_accel else None,
    "elapsed_ms": start.elapsed_time(end) if use_accel else None,
}))
