"""A compiled model called under autocast, as a new user wrote it: torch.compile's dynamo/inductor and
autocast query the device themselves; those calls are torch's, not this script's."""
import json

import torch

model = torch.nn.Linear(8, 8).cuda()
model = torch.compile(model)
ctx = torch.autocast("cuda", dtype=torch.bfloat16)
x = torch.randn(4, 8, device="cuda")
with ctx:
    y = model(x)
torch.cuda.synchronize()
print(json.dumps({"dtype": str(y.dtype), "device": y.device.type}))
