"""Checkpoints: ``last.pt`` (to resume exactly) and ``best.pt`` (the best validation accuracy), written atomically.

A checkpoint holds the model, optimizer, scheduler and GradScaler states, every RNG state (Python, NumPy, torch
CPU, the device's), the position in training (epoch, optimizer steps into the epoch, global step), the partial
epoch's running metrics and the history so far: a resumed run continues bit-identically. Files are loaded with
``weights_only=True`` (no pickled code).
"""

from __future__ import annotations

import io
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ascendify.core.fileio import write_atomic

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and says why."""


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    epoch: int = 0  # the epoch in progress (or the next one, at an epoch boundary)
    step_in_epoch: int = 0  # optimizer steps already taken in that epoch
    global_step: int = 0
    best_val_acc: float = -1.0
    running: dict[str, float] = field(default_factory=dict)  # the partial epoch's sums
    history: list[dict[str, Any]] = field(default_factory=list)


def rng_states(device: str) -> dict[str, Any]:
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        states["numpy"] = [kind, torch.from_numpy(keys.copy()), pos, has_gauss, cached]
    except ImportError:
        pass
    mod = _device_module(device)
    if mod is not None:
        states["device"] = mod.get_rng_state()
    return states


def set_rng_states(states: dict[str, Any], device: str) -> None:
    random.setstate(_tuplify(states["python"]))
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy as np

        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))
    mod = _device_module(device)
    if mod is not None and "device" in states:
        mod.set_rng_state(states["device"])


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, list) else x


def _device_module(device: str):
    kind = device.partition(":")[0]
    if kind == "cpu":
        return None
    mod = torch.get_device_module(kind)
    return mod if hasattr(mod, "get_rng_state") else None


def save(path: Path, *, model, optimizer, scheduler, scaler, progress: Progress, config: dict, device: str) -> None:
    """Write a checkpoint atomically (a crash mid-write leaves the previous file intact)."""
    state = {
        "format": FORMAT,
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "progress": asdict(progress),
        "rng": rng_states(device),
        "config": config,
    }
    state = _to_cpu(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(path, buf.getvalue())


def load(path: Path, *, model, optimizer, scheduler, scaler, device: str) -> Progress:
    """Restore everything :func:`save` wrote; returns the :class:`Progress` to continue from."""
    if not path.exists():
        raise CheckpointError(f"{path}: no checkpoint to resume from (run without --resume first)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an ascendify train checkpoint (format {FORMAT})")
    try:
        _unwrap(model).load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: the model does not match this checkpoint ({str(e).splitlines()[0]})") from None
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    set_rng_states(state["rng"], device)
    return Progress(**state["progress"])


def saved_config(path: Path) -> dict:
    """The configuration stored in a checkpoint (to check a resume uses the same settings); a truncated or foreign
    file is a :class:`CheckpointError` naming it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or damaged? ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}); start again without --resume, or "
                              "restore the file") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an ascendify train checkpoint (format {FORMAT})")
    config = state.get("config")
    return config if isinstance(config, dict) else {}


def _unwrap(model):
    model = getattr(model, "module", model)  # DDP
    return getattr(model, "_orig_mod", model)  # torch.compile


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu(v) for v in obj)
    return obj
