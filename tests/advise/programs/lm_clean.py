"""The clean twin of lm_planted.py: the same model written for an Ascend NPU (torch_npu's fused operators,
SDPA, a fused optimizer, bf16 autocast, fixed shapes, the loss read every few steps)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_npu

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100)
args = p.parse_args()
torch.manual_seed(0)
dev = "npu"
V, D, H, L, T, B = 1024, 128, 4, 2, 64, 8


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.w13 = nn.Linear(D, 8 * D, bias=False)
        self.w2 = nn.Linear(4 * D, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, D))
        return x + self.w2(torch_npu.npu_swiglu(self.w13(self.n2(x)), dim=-1))


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
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        return self.head(self.norm(x))


model = LM().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
data = torch.randint(0, V, (B * 4, T + 1)).pin_memory()
running = torch.zeros((), device=dev)
for step in range(args.steps):
    x = data[:B, :T].to(dev, non_blocking=True)
    y = data[:B, 1:T + 1].to(dev, non_blocking=True)
    with torch.autocast("npu", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    running += loss.detach()
    if (step + 1) % 50 == 0:
        print("loss", (running / 50).item())
        running.zero_()
