"""Small helpers shared by the scripts: device choice, seeding, meters, the run summary.

Device-agnostic: the same code runs on CUDA, Ascend NPU (torch_npu), XPU, MPS and the CPU.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import torch


def default_device_type() -> str:
    """The accelerator PyTorch was built or extended for (``cuda``, ``npu``, ``xpu``, ``mps``), else ``cpu``."""
    acc = torch.accelerator.current_accelerator(check_available=False)
    if acc is not None and torch.accelerator.is_available():
        return acc.type
    return "cpu"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def memory_allocated_mib(device: torch.device) -> tuple[float, float]:
    """(allocated, peak allocated) device memory in MiB; zeros on the CPU."""
    if device.type == "cpu":
        return 0.0, 0.0
    return (torch.accelerator.memory_allocated(device) / 2**20,
            torch.accelerator.max_memory_allocated(device) / 2**20)


def reset_peak_memory(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.reset_peak_memory_stats(device)


def empty_cache(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.empty_cache()


def device_name(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    return torch.get_device_module(device.type).get_device_name(device)


def set_seed(seed: int) -> None:
    """Seed every generator the scripts draw from (``torch.manual_seed`` seeds every device too)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def param_checksum(model: torch.nn.Module) -> float:
    """Sum of all parameters, accumulated in float64 on the host: one number to compare runs by."""
    total = 0.0
    for p in model.parameters():
        total += float(p.detach().cpu().double().sum())
    return total


class AverageMeter:
    """Running average of a scalar (loss, accuracy, step time)."""

    def __init__(self, name: str, fmt: str = ":.4f"):
        self.name, self.fmt = name, fmt
        self.reset()

    def reset(self) -> None:
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self) -> str:
        return ("{name} {val" + self.fmt + "} ({avg" + self.fmt + "})").format(**self.__dict__)


def accuracy(output: torch.Tensor, target: torch.Tensor, topk=(1,)) -> list[float]:
    """Top-k accuracy in percent."""
    with torch.no_grad():
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [float(correct[:k].reshape(-1).float().sum()) * 100.0 / target.size(0) for k in topk]


def summary_path(path: str, rank: int) -> str:
    """Rank 0 writes ``path``; rank r > 0 writes ``<stem>.rank<r><suffix>`` beside it."""
    if rank == 0:
        return path
    stem, suffix = os.path.splitext(path)
    return f"{stem}.rank{rank}{suffix}"


def emit_summary(summary: dict, out_json: str | None, rank: int = 0) -> None:
    """Print the run summary as one JSON line and, with ``--out-json``, write it to a file."""
    line = json.dumps(summary, sort_keys=True)
    print(line, flush=True)
    if out_json:
        path = summary_path(out_json, rank)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(line + "\n")
