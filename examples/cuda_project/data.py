"""Synthetic, deterministic data: no downloads, the same samples on every machine.

* ``SyntheticImageNet``: labelled images whose class shows in the mean colour, plus noise. Sample ``i``
  is drawn from its own ``torch.Generator`` seeded with ``(seed, i)``, so it does not depend on the
  DataLoader's workers, the sampler or the device.
* ``make_token_stream``: a token stream built from a fixed vocabulary of "phrases", so a language model has
  something to learn.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class SyntheticImageNet(Dataset):
    def __init__(self, size: int, image_size: int = 224, num_classes: int = 1000, seed: int = 0):
        self.size = size
        self.image_size = image_size
        self.num_classes = num_classes
        self.seed = seed
        g = torch.Generator().manual_seed(seed)
        self.class_means = torch.randn(num_classes, 3, 1, 1, generator=g)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(self.num_classes, (1,), generator=g))
        noise = torch.randn(3, self.image_size, self.image_size, generator=g)
        image = self.class_means[label] + 0.5 * noise
        return image, label


def make_token_stream(n_tokens: int, vocab_size: int, seed: int = 0, n_phrases: int = 64,
                      phrase_len: int = 8) -> torch.Tensor:
    """A 1-D int64 tensor of ``n_tokens`` tokens: random phrases drawn from a fixed phrase book."""
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(vocab_size, (n_phrases, phrase_len), generator=g)
    n = (n_tokens + phrase_len - 1) // phrase_len
    ids = torch.randint(n_phrases, (n,), generator=g)
    return phrases[ids].reshape(-1)[:n_tokens].contiguous()
