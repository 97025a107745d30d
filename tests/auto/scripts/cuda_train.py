"""A small CUDA-only training script (test fixture): device strings, .cuda(), AMP, cuDNN flags, memory
statistics, CUDA events, checkpoints. Prints one JSON line: final_loss, param_checksum, steps."""

import argparse
import json
import os
import tempfile

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--amp", action="store_true")
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()

assert torch.cuda.is_available(), "this script needs a GPU"
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)

device = torch.device("cuda", 0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
x = torch.randn(64, 16, device="cuda")
y = torch.randint(0, 4, (64,)).to(device)

start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _step in range(args.steps):
    with torch.autocast("cuda", enabled=args.amp, dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
end.record()
torch.cuda.synchronize()
elapsed = start.elapsed_time(end)
mem = torch.cuda.max_memory_allocated()

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "ckpt_cuda.pt")
    torch.save({"model": model.state_dict(), "device": device}, path)
    state = torch.load(path, map_location="cuda:0")
    model.load_state_dict(state["model"])

checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
print(json.dumps({"final_loss": round(float(loss), 6), "param_checksum": checksum, "steps": args.steps,
                  "param_device": str(next(model.parameters()).device), "elapsed_ok": elapsed >= 0}))
raise SystemExit(args.exit_code)
