"""The model for training: from the zoo (``ascendify.workloads.models``) or the user's ``FILE:FACTORY``, made ready for the
device: channels-last memory format, activation checkpointing of its blocks, ``torch.compile``."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ascendify.workloads import models


class Checkpointed(nn.Module):
    """Runs ``inner`` under activation checkpointing: its activations are recomputed in backward."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        if not self.training or not torch.is_grad_enabled():
            return self.inner(*args, **kwargs)
        return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)


def blocks(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """The repeated blocks of ``model``: the children of every ModuleList/Sequential whose children share one
    class with parameters (residual stages, transformer layers), as (parent, child name) pairs."""
    found = []
    for parent in model.modules():
        if not isinstance(parent, nn.ModuleList | nn.Sequential):
            continue
        kids = list(parent.named_children())
        classes = {type(m) for _, m in kids}
        if len(kids) >= 2 and len(classes) == 1 and any(True for _ in kids[0][1].parameters()):
            if not isinstance(kids[0][1], nn.ModuleList | nn.Sequential):
                found.append((parent, kids))
    pairs = []
    for parent, kids in found:
        pairs.extend((parent, name) for name, _ in kids)
    return pairs


def apply_activation_checkpointing(model: nn.Module) -> int:
    """Wrap each repeated block in :class:`Checkpointed`; returns how many were wrapped."""
    pairs = blocks(model)
    for parent, name in pairs:
        setattr(parent, name, Checkpointed(getattr(parent, name)))
    return len(pairs)


def build(cfg, num_classes: int, device: str, emulated: bool) -> nn.Module:
    """Build, move and prepare the model that ``cfg`` names."""
    model = models.build_model(cfg.model, num_classes=num_classes, image_size=cfg.image_size)
    if models.task_of(model) != "image-classification":
        raise models.ModelError(f"{cfg.model}: the trainer trains image classifiers; this model is "
                                f"{models.task_of(model)}")
    if cfg.activation_checkpointing and apply_activation_checkpointing(model) == 0:
        raise models.ModelError(f"{cfg.model}: found no repeated blocks to checkpoint")
    model = model.to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if cfg.compile:
        if emulated:
            raise models.ModelError("--compile: torch.compile does not run on the emulated NPU (its inductor "
                                    "backend needs a real device); drop --compile or use --device cpu")
        model = torch.compile(model)
    return model
