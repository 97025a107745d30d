"""A tiny image classifier for trainer tests (GroupNorm, so one process and two agree on a global batch)."""

from torch import nn


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.GroupNorm(2, c)

    def forward(self, x):
        return x + self.norm(self.conv(x)).relu()


def make(num_classes: int = 10):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Sequential(Block(8), Block(8)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(8, num_classes),
    )


def make_no_dropout(num_classes: int = 10):
    """For one-process vs two-process comparisons: no per-sample randomness."""
    model = make(num_classes)
    model[5] = nn.Identity()
    return model
