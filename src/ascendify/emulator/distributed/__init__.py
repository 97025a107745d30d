"""Distributed training on the emulated ``npu``.

- :mod:`.hccl`: the ``hccl`` process-group backend (gloo on zero-copy CPU aliases), what DDP and
  ``torch.distributed`` collectives use;
- :mod:`.hccl_rules`: HCCL's rules per chip and CANN version (``data/hccl_rules.json``), checked on each call;
- :mod:`.ranktable`: the Ascend rank table (``RANK_TABLE_FILE``) checked against the default group;
- :mod:`.data_parallel`: ``nn.DataParallel``, which torch_npu does not support, refused with a clear message.

:func:`install` registers both (called by :func:`ascendify.emulator.enable`).
"""

from __future__ import annotations

from ascendify.emulator.distributed.hccl import (
    BACKEND,
    EmulatedHcclProcessGroup,
    is_hccl_available,
    is_installed,
)
from ascendify.emulator.distributed.hccl import install as _install_hccl

__all__ = ["BACKEND", "EmulatedHcclProcessGroup", "install", "is_hccl_available", "is_installed"]


def install() -> None:
    """Register the ``hccl`` backend and the DataParallel refusal. Idempotent."""
    _install_hccl()
    from ascendify.emulator.distributed import data_parallel

    data_parallel.install()
