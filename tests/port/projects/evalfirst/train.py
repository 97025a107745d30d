"""A trainer that evaluates before its first optimizer step (nanoGPT's estimate_loss at iteration 0), for a long
time; CUDA calls (tests of ascendify port: a --time-budget stops it there, and it is no inference program)."""
import time

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.eval()
with torch.no_grad():
    for i in range(4000):  # the evaluation: about 40 s
        model(torch.randn(4, 8).cuda())
        time.sleep(0.01)
        if i % 100 == 0:
            print("eval batch", i, flush=True)
model.train()
for step in range(20):
    loss = model(torch.randn(4, 8).cuda()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, "loss", loss.item())
