"""fp16 AMP training with a GradScaler (tests of ascendify port --overflow): an attention score whose matmul
overflows float16 when --gain is large (the default; the clamp after it keeps the loss finite, so only the
overflow check sees it), and stays finite with --gain 1. CUDA when asked with --cuda."""
import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--cuda", action="store_true")
p.add_argument("--gain", type=float, default=300.0)
p.add_argument("--iters", type=int, default=100)
p.add_argument("--init-scale", type=float, default=256.0)
opt = p.parse_args()
device = torch.device("cuda" if opt.cuda else "cpu")
torch.manual_seed(0)


class Attn(nn.Module):
    def __init__(self, gain):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gain = gain

    def forward(self, x):
        h = self.proj(x) * self.gain
        s = torch.matmul(h, h.transpose(-1, -2))
        return s.clamp(-1e4, 1e4).float().softmax(-1) @ x


class Net(nn.Module):
    def __init__(self, gain):
        super().__init__()
        self.attn = Attn(gain)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.attn(x))


model = Net(opt.gain).to(device)
optim = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.cuda.amp.GradScaler(init_scale=opt.init_scale, enabled=opt.cuda)
for _ in range(opt.iters):
    x = torch.randn(4, 6, 8, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=opt.cuda):
        loss = model(x).float().pow(2).mean()
    optim.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optim)
    scaler.update()
