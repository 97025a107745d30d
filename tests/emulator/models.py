"""Small models and a training loop shared by the emulator tests (tiny sizes: the suite must stay fast)."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class SmallTransformer(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16, classes: int = 10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(8, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        return self.head(self.norm(self.encoder(h)).mean(1))


def batches(kind: str, steps: int, batch: int = 4, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if kind == "cnn":
            x = torch.randn(batch, 3, 12, 12, generator=g)
        else:
            x = torch.randint(0, 32, (batch, 8), generator=g)
        yield x, torch.randint(0, 10, (batch,), generator=g)


def train(kind: str, optimizer: str, device: str, steps: int = 20, autocast_dtype=None):
    """Train from a fixed seed; return the final state dict on the CPU."""
    torch.manual_seed(0)
    model = (SmallCNN() if kind == "cnn" else SmallTransformer()).to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    for x, y in batches(kind, steps):
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype or torch.float32,
                            enabled=autocast_dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}
