"""A model whose weights are never initialised (FSDP2's to_empty without reset_parameters, here NaN on purpose):
the loss is NaN on both sides from the first step; CUDA calls (tests of ascendify port: never OK on NaN). The
model is built on the meta device first, as FSDP2 does: its initialisers draw nothing there."""
import torch
import torch.nn as nn

torch.manual_seed(0)
with torch.device("meta"):
    model = nn.Linear(8, 1)
model = model.to_empty(device="cuda")
with torch.no_grad():
    model.weight.fill_(float("nan"))
    model.bias.zero_()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    loss = model(torch.randn(4, 8).cuda()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, "loss", loss.item())
