import torch
from devcheck_helper import on_gpu

device = torch.device("cuda")
use_amp = device.type == "cuda"
print("use_amp", use_amp, "cuda" in str(device), on_gpu(device), "cuda" == "cu" + "da")
