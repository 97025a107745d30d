import torch

torch.zeros(1, device="cuda")
raise ValueError("boom from the user script")
