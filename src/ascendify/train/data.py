"""Data, all offline: ``synthetic`` (for speed), scikit-learn's bundled ``digits``, or an image folder.

Every dataset returns ``(image [3, S, S] float, label)``; images are resized on the fly to ``image_size`` and
normalised. The train/validation split is fixed by the seed. :class:`ResumableSampler` is torch's
``DistributedSampler`` (shuffled per epoch with ``set_epoch``, sharded by rank) that can also start part-way
through an epoch, so a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, DistributedSampler

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


class DataError(ValueError):
    """A data set that cannot be used; the message names it and says why."""


def _resize(img: torch.Tensor, size: int) -> torch.Tensor:
    if img.shape[-1] == size and img.shape[-2] == size:
        return img
    return F.interpolate(img[None], size=(size, size), mode="bilinear", align_corners=False)[0]


class TensorImages(Dataset):
    """Images held in memory as ``[N, C, h, w]`` in [0, 1], resized on the fly to ``size`` and normalised."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, size: int, mean: float, std: float) -> None:
        self.images, self.labels, self.size, self.mean, self.std = images, labels, size, mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        img = _resize(self.images[i], self.size)
        if img.shape[0] == 1:
            img = img.expand(3, -1, -1)
        return (img - self.mean) / self.std, int(self.labels[i])


class ImageFolder(Dataset):
    """One sub-folder per class, images decoded with Pillow (RGB), resized to ``size``, normalised (ImageNet)."""

    MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __init__(self, root: str, size: int) -> None:
        base = Path(root)
        if not base.is_dir():
            what = "is a file, not a folder" if base.exists() else "no such folder"
            raise DataError(f"{root}: {what} (--data: synthetic, digits, or a folder with one sub-folder of images "
                            "per class)")
        self.classes = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
        self.samples = [
            (f, ci)
            for ci, c in enumerate(self.classes)
            for f in sorted((base / c).rglob("*"))
            if f.suffix.lower() in IMAGE_SUFFIXES
        ]
        if len(self.classes) < 2:
            raise DataError(f"{root}: found {len(self.classes)} class folder(s); need at least 2 sub-folders of images")
        if not self.samples:
            raise DataError(f"{root}: no images ({', '.join(IMAGE_SUFFIXES)}) in its class folders")
        self.size = size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        from PIL import Image

        path, label = self.samples[i]
        try:
            with Image.open(path) as im:
                rgb = im.convert("RGB").resize((self.size, self.size), Image.BILINEAR)
        except OSError as e:
            raise DataError(f"{path}: cannot decode image ({e})") from None
        x = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).view(self.size, self.size, 3)
        x = x.permute(2, 0, 1).float().div_(255)
        return (x - self.MEAN) / self.STD, label


class Synthetic(Dataset):
    """Deterministic random images with a class-dependent pattern (learnable), generated per index."""

    def __init__(self, n: int, num_classes: int, size: int, seed: int) -> None:
        self.n, self.num_classes, self.size, self.seed = n, num_classes, size, seed
        g = torch.Generator().manual_seed(seed + 7919)
        self.patterns = torch.randn(num_classes, 3, 4, 4, generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        label = i % self.num_classes
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        noise = torch.randn(3, self.size, self.size, generator=g)
        signal = F.interpolate(self.patterns[label][None], size=(self.size, self.size), mode="nearest")[0]
        return noise * 0.5 + signal, label


@dataclass
class DataSets:
    train: Dataset
    val: Dataset
    num_classes: int
    name: str


def build_datasets(spec: str, *, image_size: int, val_fraction: float, seed: int, synthetic_size: int,
                   num_classes: int = 0) -> DataSets:
    """The train and validation sets for ``spec`` (synthetic | digits | a folder), split by ``seed``."""
    if spec == "synthetic":
        k = num_classes or 10
        full: Dataset = Synthetic(synthetic_size, k, image_size, seed)
    elif spec == "digits":
        from sklearn.datasets import load_digits

        d = load_digits()
        images = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(d.target, dtype=torch.int64)
        k = 10
        full = TensorImages(images, labels, image_size, mean=0.3, std=0.4)
    else:
        folder = ImageFolder(spec, image_size)
        k = len(folder.classes)
        full = folder
    if num_classes and num_classes != k and spec != "synthetic":
        raise DataError(f"{spec}: has {k} classes, but num_classes is {num_classes}")
    n = len(full)
    n_val = max(1, round(n * val_fraction))
    if n - n_val < 1:
        raise DataError(f"{spec}: {n} sample(s) are too few to split into train and validation")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    train = torch.utils.data.Subset(full, perm[n_val:])
    val = torch.utils.data.Subset(full, sorted(perm[:n_val]))
    return DataSets(train, val, k, spec)


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` that can skip the first ``start`` samples of this rank's share of an epoch."""

    def __init__(self, dataset, *, num_replicas: int, rank: int, shuffle: bool, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
        self.start = 0

    def set_start(self, start: int) -> None:
        """Begin the next iteration ``start`` samples into this rank's share (reset by :meth:`set_epoch`)."""
        self.start = start

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.start = 0

    def __iter__(self):
        indices = list(super().__iter__())
        return iter(indices[self.start:])

    def __len__(self) -> int:
        return self.num_samples - self.start
