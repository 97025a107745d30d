"""A small classifier trained with the loop's slow habits (a CUDA program): every line marked PLANT is a pattern
`ascendify advise` must name, at that line. Its clean twin is loop_clean.py."""
import argparse
import time

import numpy as np
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
        self.fc2 = nn.Linear(512, 10)
        self.register_buffer("prior", torch.from_numpy(np.full(10, 0.1)))

    def forward(self, x):
        h = F.relu(self.fc1(x))
        gate = torch.logit(torch.sigmoid(h).clamp(1e-4, 1 - 1e-4))  # PLANT ADV301
        return self.fc2(h * torch.sigmoid(gate)) + self.prior.log()  # PLANT ADV302


model = Net().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(Samples(1000), batch_size=64, shuffle=True)  # PLANT ADV202 ADV503
for _epoch in range(args.epochs):
    seen = []
    for x, y in loader:
        x, y = x.to(dev), y.to(dev)  # PLANT ADV504
        logits = model(x.float())
        per = F.cross_entropy(logits, y, reduction="none")
        keep = per > 0.01
        loss = per[keep].mean()  # PLANT ADV104
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()  # PLANT ADV103
        seen += logits.argmax(-1).cpu().tolist()  # PLANT ADV102
        if loss.item() < 0.001:  # PLANT ADV101
            break
