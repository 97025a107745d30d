"""The data pipeline bench: DataLoader settings compared, and CPU-side against device-side augmentation.

>>> from ascendify.bench import loader as L
>>> ds = L.SyntheticJpegs(64, source_size=96, image_size=64)                 # doctest: +SKIP
>>> rows = L.loader_sweep(ds, L.grid(workers=[0, 2], batch_sizes=[32]), batches=8)  # doctest: +SKIP
>>> L.recommend(rows)["setting"]                                             # doctest: +SKIP

The workload is real image work: JPEG decoding (PIL) and resizing in the loader, then the augmentation of
``ascendify.workloads.augment`` either per sample inside the workers (``augment="cpu"``) or per batch on the device
after the transfer (``augment="device"``). The dataset is a folder of images (``root/<class>/<file>``, as
torchvision's ``ImageFolder``) or :class:`SyntheticJpegs`, random images encoded once in memory, so nothing
is downloaded.

Each setting runs ``epochs`` epochs (2 by default) of ``batches`` batches, each batch moved to the device; the
rate is samples per second after the first batch of the first epoch (worker start-up, reported apart as
``startup_s``), so workers that are not persistent pay their restart at the second epoch, as in training.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import time
from pathlib import Path

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


# ------------------------------------------------------------------------------------------------ datasets


class SyntheticTensors:
    """A dataset repeating one ``(x, y)`` sample: the loader's own overhead, no decoding (the harness's
    ``--loader`` mode)."""

    def __init__(self, x, y, length: int):
        self.x, self.y, self.length = x.contiguous(), y, int(length)

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if not 0 <= i < self.length:
            raise IndexError(i)
        return self.x.clone(), self.y.clone()


class _DecodingDataset:
    """Shared decode path: bytes/file -> RGB -> resized uint8 [3, S, S] (-> augmented float with a transform)."""

    def __init__(self, image_size: int, decode_size: int | None, augment: str, seed: int):
        if augment not in ("cpu", "device", "none"):
            raise ValueError(f"augment={augment!r}: expected cpu, device or none")
        self.image_size = int(image_size)
        self.decode_size = int(decode_size or round(image_size * 256 / 224))
        self.augment = augment
        self.seed = seed
        self._transform = None

    def _source(self, i):  # bytes or a path
        raise NotImplementedError

    def _label(self, i) -> int:
        raise NotImplementedError

    def __getitem__(self, i):
        import numpy as np
        import torch
        from PIL import Image

        src = self._source(i)
        with Image.open(io.BytesIO(src) if isinstance(src, bytes) else src) as im:
            im = im.convert("RGB").resize((self.decode_size, self.decode_size), Image.BILINEAR)
            arr = np.asarray(im, dtype=np.uint8)
        x = torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()  # uint8 [3, S, S]
        if self.augment == "cpu":
            if self._transform is None:
                from ascendify.workloads import augment as data_aug

                self._transform = data_aug.build_augment(self.image_size)
            x = self._transform(x.unsqueeze(0).float().div_(255.0))[0]
        return x, self._label(i)


class SyntheticJpegs(_DecodingDataset):
    """``n`` random images (smooth colour fields plus noise, like photographs compress) encoded as JPEG once,
    in memory; decoded and resized on every access."""

    def __init__(self, n: int = 256, *, source_size: int = 320, image_size: int = 224,
                 decode_size: int | None = None, augment: str = "cpu", num_classes: int = 10, seed: int = 0):
        import numpy as np
        from PIL import Image

        super().__init__(image_size, decode_size, augment, seed)
        rng = np.random.default_rng(seed)
        self.num_classes = num_classes
        self._jpegs: list[bytes] = []
        yy, xx = np.mgrid[0:source_size, 0:source_size] / source_size
        for _ in range(int(n)):
            a = rng.uniform(0, 1, size=(3, 3))
            img = np.stack([a[c, 0] * xx + a[c, 1] * yy + a[c, 2] * xx * yy for c in range(3)], axis=-1)
            img = img / max(img.max(), 1e-6) * 200 + rng.normal(0, 12, size=img.shape)
            buf = io.BytesIO()
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
            self._jpegs.append(buf.getvalue())
        self._labels = rng.integers(0, num_classes, size=int(n)).tolist()

    def __len__(self):
        return len(self._jpegs)

    def _source(self, i):
        return self._jpegs[i]

    def _label(self, i):
        return self._labels[i]


class ImageFolder(_DecodingDataset):
    """``root/<class>/<image>`` files (jpg, png, bmp, webp), classes sorted by name."""

    def __init__(self, root: str | os.PathLike, *, image_size: int = 224, decode_size: int | None = None,
                 augment: str = "cpu", seed: int = 0):
        super().__init__(image_size, decode_size, augment, seed)
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: not a folder of images (expected {root}/<class>/<image files>)")
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.files: list[tuple[Path, int]] = []
        for ci, c in enumerate(classes):
            for f in sorted((root / c).rglob("*")):
                if f.suffix.lower() in IMAGE_EXTENSIONS and f.is_file():
                    self.files.append((f, ci))
        if not self.files:
            raise FileNotFoundError(
                f"{root}: no images found (expected {root}/<class>/<file> with {', '.join(IMAGE_EXTENSIONS)})")
        self.classes = classes

    def __len__(self):
        return len(self.files)

    def _source(self, i):
        return self.files[i][0]

    def _label(self, i):
        return self.files[i][1]


# ------------------------------------------------------------------------------------------------ settings


@dataclasses.dataclass(frozen=True)
class LoaderSetting:
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None  # only with workers
    persistent_workers: bool = False  # only with workers
    batch_size: int = 32

    def label(self) -> str:
        parts = [f"workers={self.num_workers}", f"batch={self.batch_size}"]
        if self.pin_memory:
            parts.append("pin")
        if self.num_workers:
            parts.append(f"prefetch={self.prefetch_factor}")
            if self.persistent_workers:
                parts.append("persistent")
        return " ".join(parts)

    def loader_kwargs(self) -> dict:
        kw = {"num_workers": self.num_workers, "pin_memory": self.pin_memory, "batch_size": self.batch_size}
        if self.num_workers:
            kw["prefetch_factor"] = self.prefetch_factor or 2
            kw["persistent_workers"] = self.persistent_workers
        return kw


def grid(*, workers=(0, 2), pin_memory=(False,), prefetch=(2,), persistent=(True,), batch_sizes=(32,)):
    """Every meaningful combination (prefetch and persistence only vary when there are workers)."""
    out: list[LoaderSetting] = []
    for b, w, pin in itertools.product(batch_sizes, workers, pin_memory):
        if w == 0:
            out.append(LoaderSetting(0, pin, None, False, b))
            continue
        for pf, pers in itertools.product(prefetch, persistent):
            out.append(LoaderSetting(w, pin, pf, pers, b))
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------------ measuring


def measure(dataset, setting: LoaderSetting, *, device=None, batches: int = 8, epochs: int = 2,
            device_augment=None) -> dict:
    """Run ``epochs`` x ``batches`` batches through a DataLoader with ``setting``, moving each batch to
    ``device`` (a ``BenchDevice`` or None for the CPU) and, when given, applying ``device_augment`` there."""
    import torch
    from torch.utils.data import DataLoader, Subset

    n = min(len(dataset), batches * setting.batch_size)
    if n < setting.batch_size:
        raise ValueError(f"the dataset has {len(dataset)} samples, fewer than one batch of {setting.batch_size}")
    subset = Subset(dataset, list(range(n)))
    from ascendify.program import children

    kw = setting.loader_kwargs()
    if setting.num_workers:
        kw["worker_init_fn"] = children.worker_init()  # the workers die with the bench, however it ends
    loader = DataLoader(subset, shuffle=False, drop_last=True, **kw)
    dev_t = device.torch_device if device is not None else torch.device("cpu")
    non_blocking = setting.pin_memory and dev_t.type != "cpu"
    sync = device.synchronize if device is not None else (lambda: None)
    samples = 0
    t_start = time.perf_counter()
    first = None
    epoch_starts: list[float] = []
    try:
        for _ in range(epochs):
            te = time.perf_counter()
            for i, (x, _y) in enumerate(loader):
                x = x.to(dev_t, non_blocking=non_blocking)
                if device_augment is not None:
                    x = device_augment(x.float().div_(255.0) if x.dtype == torch.uint8 else x)
                if first is None:
                    sync()
                    first = time.perf_counter()
                    continue
                if i == 0:
                    epoch_starts.append(time.perf_counter() - te)
                samples += x.shape[0]
            sync()
    finally:
        del loader  # stops persistent workers
    t_end = time.perf_counter()
    if first is None or samples == 0:
        raise ValueError("the loader produced fewer than two batches: raise batches or the dataset size")
    return {"setting": dataclasses.asdict(setting), "label": setting.label(),
            "samples_per_s": samples / (t_end - first), "startup_s": first - t_start,
            "epoch_restart_s": epoch_starts, "samples": samples}


def loader_sweep(dataset, settings, *, device=None, batches: int = 8, epochs: int = 2, on_result=None) -> list[dict]:
    rows = []
    for s in settings:
        try:
            row = measure(dataset, s, device=device, batches=batches, epochs=epochs)
            row["status"] = "ok"
        except Exception as e:  # a setting that cannot run here (e.g. workers refused) is recorded
            row = {"setting": dataclasses.asdict(s), "label": s.label(), "status": "error",
                   "error": f"{type(e).__name__}: {e}", "samples_per_s": None}
        rows.append(row)
        if on_result:
            on_result(row)
    return rows


def recommend(rows: list[dict], *, tolerance: float = 0.05) -> dict | None:
    """The fastest setting, preferring fewer workers / no pinning among those within ``tolerance`` of it."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("samples_per_s")]
    if not ok:
        return None
    best = max(r["samples_per_s"] for r in ok)
    near = [r for r in ok if r["samples_per_s"] >= best * (1 - tolerance)]
    pick = min(near, key=lambda r: (r["setting"]["num_workers"], r["setting"]["pin_memory"],
                                    -r["samples_per_s"]))
    return {"setting": pick["setting"], "label": pick["label"], "samples_per_s": pick["samples_per_s"],
            "best_samples_per_s": best,
            "why": "fastest" if pick["samples_per_s"] == best
            else f"within {tolerance:.0%} of the fastest ({best:.1f}/s) with fewer workers"}


def feeds(loader_rate: float, compute_rate: float | None) -> dict | None:
    """Can a loader producing ``loader_rate`` samples/s keep a step consuming ``compute_rate`` busy?"""
    if not compute_rate:
        return None
    ratio = loader_rate / compute_rate
    if ratio >= 1.2:
        verdict, status = f"the loader keeps up with compute (headroom {ratio - 1:.0%})", "ok"
    elif ratio >= 1.0:
        verdict, status = "the loader barely keeps up: any slowdown starves the device", "warn"
    else:
        verdict, status = (f"the loader starves the device: it feeds {ratio:.0%} of the compute rate; add "
                           "workers, move augmentation onto the device, or pre-decode the data"), "fail"
    return {"loader_samples_per_s": loader_rate, "compute_samples_per_s": compute_rate, "ratio": ratio,
            "status": status, "verdict": verdict}


def compare_augmentation(make_dataset, setting: LoaderSetting, *, device=None, image_size: int = 224,
                         batches: int = 8, epochs: int = 2) -> dict:
    """Samples/s of the same pipeline with augmentation per sample in the loader (``cpu``) and per batch on
    ``device`` after the transfer (``device``). ``make_dataset(augment)`` builds the dataset."""
    from ascendify.workloads import augment as data_aug

    out = {}
    cpu_ds = make_dataset("cpu")
    out["cpu"] = measure(cpu_ds, setting, device=device, batches=batches, epochs=epochs)
    aug = data_aug.build_augment(image_size)
    if device is not None:
        aug = aug.to(device.torch_device)
    dev_ds = make_dataset("device")
    out["device"] = measure(dev_ds, setting, device=device, batches=batches, epochs=epochs, device_augment=aug)
    out["speedup_device_over_cpu"] = out["device"]["samples_per_s"] / out["cpu"]["samples_per_s"]
    return out
