"""One configuration dataclass for the trainer: defaults, a TOML file, command-line overrides, in that order."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value or file; the message names the field or file and what is wrong."""


class OutputError(RuntimeError):
    """The run's output could not be written (a full disk, a folder made read-only): the message names the file.
    ``ascendify train`` exits 4."""

    exit_code = 4


@dataclass
class TrainConfig:
    """Everything a training run depends on. Field docs are the ``--help`` texts."""

    model: str = "resnet18"  # resnet50 | resnet18 | efficientnet_b0 | FILE.py:FACTORY
    data: str = "synthetic"  # synthetic | digits | DIR (an image folder, one sub-folder per class)
    device: str = "auto"  # auto | npu | cuda | cpu (npu is emulated where no NPU exists)
    amp: str = "off"  # bf16 | fp16 | off (fp16 uses a GradScaler)
    epochs: int = 5
    batch_size: int = 64  # per process; the global batch is batch_size x processes
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4
    sched: str = "cosine"  # step | cosine (per epoch)
    step_size: int = 0  # StepLR period in epochs (0: a third of the epochs)
    gamma: float = 0.1  # StepLR factor
    label_smoothing: float = 0.0
    grad_accum: int = 1  # micro-batches per optimizer step
    clip_grad: float = 0.0  # max gradient norm (0: off)
    activation_checkpointing: bool = False
    channels_last: bool = False
    compile: bool = False  # torch.compile the model (not on the emulated NPU)
    image_size: int = 32
    num_classes: int = 0  # 0: from the data
    val_fraction: float = 0.2
    synthetic_size: int = 1024  # samples in the synthetic data set
    workers: int = 0  # DataLoader worker processes
    seed: int = 0
    out: str = "runs/train"
    resume: bool = False  # continue from OUT/last.pt
    log_every: int = 100  # a progress line every N batches when not on a terminal
    max_steps: int = 0  # stop after N optimizer steps, writing last.pt (0: no limit)
    tensorboard: bool = True

    CHOICES = {"amp": ("bf16", "fp16", "off"), "sched": ("step", "cosine")}

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name, allowed in self.CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        for name in ("epochs", "batch_size", "grad_accum", "image_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("lr", "weight_decay", "label_smoothing", "clip_grad", "momentum", "gamma", "val_fraction"):
            if not math.isfinite(getattr(self, name)):  # nan passes every comparison below: a run of NaN losses
                raise ConfigError(f"{name} must be a finite number, not {getattr(self, name)}")
        for name in ("lr", "weight_decay", "label_smoothing", "clip_grad", "momentum", "max_steps", "num_classes",
                     "step_size", "workers", "synthetic_size"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
        if self.num_classes == 1:
            raise ConfigError("num_classes must be at least 2 (cross-entropy over one class learns nothing), not 1")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be between 0 and 1, not {self.val_fraction}")
        if self.label_smoothing >= 1.0:
            raise ConfigError(f"label_smoothing must be below 1, not {self.label_smoothing}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_sources(cls, toml_path: str | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """Defaults, then the TOML file (flat keys, or under ``[train]``), then ``overrides`` (None values skipped)."""
        values: dict[str, Any] = {}
        if toml_path:
            values.update(load_toml(toml_path))
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls(**values)


def load_toml(path: str) -> dict[str, Any]:
    """Read a trainer TOML file; unknown keys and wrong types are errors that name the file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    if isinstance(raw.get("train"), dict):
        raw = raw["train"]
    known = {f.name: f for f in fields(TrainConfig)}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"{path}: unknown key {key!r} (known: {', '.join(known)})")
        default = getattr(TrainConfig, name, None)
        if default is not None and not isinstance(value, type(default)):
            if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            else:
                raise ConfigError(f"{path}: {key} should be {type(default).__name__}, not {value!r}")
        out[name] = value
    return out
