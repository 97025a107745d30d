"""pytorch/examples' layout: the data sits beside the example folders and the program reads ../data; CUDA calls
(tests of ascendify port: the runs read ../data as the program would without port)."""
from pathlib import Path

import torch
import torch.nn as nn

values = [float(x) for x in Path("../data/values.txt").read_text().split()]
data = torch.tensor(values).view(-1, 4)
torch.manual_seed(0)
model = nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(20):
    x = data[step % len(data)].unsqueeze(0).cuda()
    loss = (model(x) - 1.0).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, "loss", loss.item())
