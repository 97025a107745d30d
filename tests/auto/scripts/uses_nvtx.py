"""NVTX ranges around a step (annotations only): skipped by default, an error with --strict."""

import torch

x = torch.ones(3).cuda()
torch.cuda.nvtx.range_push("step")
y = x * 2
torch.cuda.nvtx.range_pop()
print("sum", float(y.sum()))
