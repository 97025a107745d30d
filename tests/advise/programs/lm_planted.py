"""A small Llama-style language model trained the slow way (a CUDA program): every line marked PLANT is a
pattern `ascendify advise` must name, at that line. Its clean twin is lm_clean.py."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100)
p.add_argument("--vary", type=int, default=1)
args = p.parse_args()
torch.manual_seed(0)
dev = "cuda"
V, D, H, L, T, B = 1000, 128, 4, 2, 64, 8


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # PLANT ADV401
        return x * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.w1 = nn.Linear(D, 4 * D, bias=False)
        self.w3 = nn.Linear(D, 4 * D, bias=False)
        self.w2 = nn.Linear(4 * D, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # PLANT ADV402
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)  # PLANT ADV404
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        x = x + self.o(y)
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))  # PLANT ADV403


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, D // H, 2).float() / (D // H)))
        f = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, self.cos[:t], self.sin[:t])
        return self.head(self.norm(x))  # PLANT ADV502


model = LM().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)  # PLANT ADV405
data = torch.randint(0, V, (B * 4, T + 1))
losses = []
for step in range(args.steps):
    t = T - (step % 3) * 8 * args.vary
    x, y = data[:B, :t].to(dev), data[:B, 1:t + 1].to(dev)  # PLANT ADV201
    logits = model(x)  # PLANT ADV501
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())  # PLANT ADV101
print("final loss", losses[-1])
