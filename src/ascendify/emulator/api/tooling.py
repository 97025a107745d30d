"""The torch_npu utility layer that tools and checkpoints touch, on the emulated npu device.

Users' own NPU tools run torch_npu code that is neither an operator nor a device API: msprobe's dump asks
``torch_npu.get_npu_format(t) == torch_npu.Format.FRACTAL_NZ`` for every tensor it summarises, and registers
``torch_npu.utils.storage._rebuild_npu_tensor`` with ``torch.serialization.add_safe_globals`` before it loads
anything; checkpoints written by older torch_npu releases pickle that same function. This module gives the shim
(:mod:`ascendify.emulator.api.shim`) those names with torch_npu's signatures and behaviour:

- ``get_npu_format`` / ``Format``: the storage format that :mod:`ascendify.emulator.fused.formats` records
  (``npu_format_cast``); ND (2) for a storage never cast, NCHW/NCDHW for 4-D/5-D ones, as torch_npu guesses.
  Like the real operator it is an ``npu``-only kernel: a CPU tensor raises the dispatcher's error.
- ``torch_npu.utils.storage._rebuild_npu_tensor(storage, storage_offset, size, stride, requires_grad,
  backward_hooks, npu_storage_info)``: torch_npu's legacy rebuild (its pickled global); the tensor comes back on
  ``npu`` with the recorded format (a bool means "no format"), or on the CPU when
  ``torch_npu.utils.serialization.RE_MAP_CPU`` is set, as torch_npu does.
"""

from __future__ import annotations

import sys

import torch

from ascendify.emulator.fused import formats

Format = formats.Format


def get_npu_format(self: torch.Tensor) -> int:
    """``torch_npu.get_npu_format``: the ACL format of ``self``'s storage (an int; compare with ``Format``)."""
    if not isinstance(self, torch.Tensor):
        raise TypeError(f"get_npu_format(): argument 'self' must be Tensor, not {type(self).__name__}")
    if self.device.type != "npu":
        raise NotImplementedError(
            "Could not run 'npu::get_npu_format' with arguments from the "
            f"'{self.device.type.upper()}' backend. 'npu::get_npu_format' is only available for the 'PrivateUse1' "
            "backend (torch_npu.get_npu_format takes npu tensors)")
    return formats.get_format(self)


def _rebuild_npu_tensor(storage, storage_offset, size, stride, requires_grad, backward_hooks, npu_storage_info):
    """torch_npu's rebuild of an NPU tensor from a checkpoint (``torch_npu.utils.storage._rebuild_npu_tensor``)."""
    untyped = getattr(storage, "_untyped_storage", storage)
    tensor = torch.tensor([], dtype=storage.dtype, device=untyped.device)
    tensor.set_(storage, storage_offset, size, stride)
    tensor.requires_grad = requires_grad
    tensor._backward_hooks = backward_hooks
    # torch_npu.utils.serialization.RE_MAP_CPU (torch_npu's load sets it for map_location="cpu")
    if not getattr(sys.modules.get("torch_npu.utils.serialization"), "RE_MAP_CPU", False):
        tensor = tensor.npu()
        if not isinstance(npu_storage_info, bool):
            from ascendify.emulator.fused.layout import npu_format_cast

            tensor = npu_format_cast(tensor, int(npu_storage_info))
    return tensor


_rebuild_npu_tensor.__module__ = "torch_npu.utils.storage"


def storage_attrs() -> dict:
    """The contents of the shim's ``torch_npu.utils.storage``."""
    return {"_rebuild_npu_tensor": _rebuild_npu_tensor}


def serialization_attrs() -> dict:
    """The contents of the shim's ``torch_npu.utils.serialization`` (``load``/``save`` are torch's: the
    emulated device's tensors pickle as PyTorch's own ``npu`` tensors)."""
    return {"load": torch.load, "save": torch.save, "RE_MAP_CPU": False}
