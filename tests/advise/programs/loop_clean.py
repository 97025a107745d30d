"""The clean twin of loop_planted.py: the same classifier and loop, done the NPU-friendly way."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()
torch.manual_seed(0)
dev = "cuda"


class Samples(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 256, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(0.002)  # decoding, augmenting: work done per sample
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 16)
        self.register_buffer("prior", torch.full((16,), 0.1))

    def forward(self, x):
        h = F.relu(self.fc1(x))
        gate = torch.sigmoid(h)
        return self.fc2(h * gate) + self.prior.log()


model = Net().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
loader = DataLoader(Samples(1024), batch_size=64, shuffle=True, num_workers=2, pin_memory=True, drop_last=True,
                    persistent_workers=True)
for epoch in range(args.epochs):
    correct = torch.zeros((), device=dev)
    total_loss = torch.zeros((), device=dev)
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        per = F.cross_entropy(logits.float(), y, reduction="none")
        keep = (per > 0.01).float()
        loss = (per * keep).sum() / keep.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        correct += (logits.argmax(-1) == y).sum()
        total_loss += loss.detach()
    print("epoch", epoch, (total_loss / len(loader)).item(), (correct / len(loader.dataset)).item())
