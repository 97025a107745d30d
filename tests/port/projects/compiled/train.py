"""A tiny compiled CUDA trainer (torch.compile on the model, attention through SDPA): tests of ascendify port."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
args = p.parse_args()


class TinyAttn(nn.Module):
    def __init__(self, d=8, heads=2, vocab=16):
        super().__init__()
        self.heads = heads
        self.emb, self.qkv, self.out = nn.Embedding(vocab, d), nn.Linear(d, 3 * d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        return self.out(x + y)


torch.manual_seed(0)
device = "cuda"
model = TinyAttn().to(device)
model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
data = torch.randint(0, 16, (4, 7), generator=torch.Generator().manual_seed(1)).to(device)
x, y = data[:, :6], data[:, 1:]
for step in range(args.steps):
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, 16), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
