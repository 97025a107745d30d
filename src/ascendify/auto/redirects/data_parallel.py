"""``nn.DataParallel``: single-process multi-GPU replication exists only on CUDA.

Off CUDA it runs the wrapped module on one device, as ``DataParallel`` itself does on a machine without
GPUs (``model.module``, the ``module.`` prefix of state-dict keys and ``forward`` stay the same), and the run
report says so: to use several devices, launch one process per device with torchrun and use DDP.
"""

from __future__ import annotations

import functools
from typing import Any


def install(s) -> None:
    import torch

    DP = torch.nn.DataParallel
    rec = s.rec
    reason = (f"nn.DataParallel is CUDA-only: the module runs on one {s.target.device_type} device; "
              "use DistributedDataParallel under torchrun for several")

    @functools.wraps(DP.__init__)
    def dp_init(self, module: Any, device_ids: Any = None, output_device: Any = None, dim: int = 0) -> None:
        rec.noop("torch.nn.DataParallel", reason)
        torch.nn.Module.__init__(self)
        self.module = module
        self.device_ids = []
        self.dim = dim
        self.output_device = None

    s.patches.set(DP, "__init__", dp_init)
