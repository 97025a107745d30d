"""The ops that need their own kernel on the emulated device (the table names them: ``kernel=``).

Copies across devices (``copy_``, ``_to_copy``, ``_copy_from*``), allocation (``empty*``, with the memory
check), ``resize_`` (grows the storage as an ``npu`` allocation), ``set_`` (storage swaps keep the device),
``record_stream`` (nothing to record: work is synchronous) and convolution's "overrideable" pair, which
PyTorch routes to for a PrivateUse1 device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ascendify.emulator import runtime
from ascendify.emulator.device.tensors import adopt, adopt_fresh, cpu_alias
from ascendify.emulator.ops import fidelity
from ascendify.emulator.ops.mismatch import mixed_error, two_devices

_CPU_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_F64 = (torch.float64, torch.complex128)
_check_index = runtime.check_index
_current = runtime.current_device


def _index_of(t: Tensor) -> int:
    d = t.get_device()
    return d if d >= 0 else _current[0]


def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    index = _check_index(device.index if device is not None else None)
    if pin_memory:
        raise RuntimeError("pin_memory=True only applies to CPU tensors (asked for an npu tensor)")
    if layout not in (None, torch.strided):
        raise RuntimeError(f"the emulated npu device supports strided tensors only, not {layout}")
    dtype = dtype or torch.get_default_dtype()
    n = 1
    for s in size:
        n *= int(s)
    runtime.memory.check(n * _itemsize(dtype), index)
    if dtype in _F64:
        fidelity.float64("empty", dtype)
    return adopt_fresh(torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format), index)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    index = _check_index(device.index if device is not None else None)
    if pin_memory:
        raise RuntimeError("pin_memory=True only applies to CPU tensors (asked for an npu tensor)")
    dtype = dtype or torch.get_default_dtype()
    if dtype in _F64:
        fidelity.float64("empty_strided", dtype)
    return adopt_fresh(torch.empty_strided(size, stride, dtype=dtype), index)


_ITEMSIZE: dict = {}


def _itemsize(dtype) -> int:
    s = _ITEMSIZE.get(dtype)
    if s is None:
        s = _ITEMSIZE[dtype] = torch.empty(0, dtype=dtype).element_size()
    return s


def copy_(self, src, non_blocking=False):
    dst = cpu_alias(self) if self.get_device() >= 0 else self
    if isinstance(src, Tensor) and src.get_device() >= 0:
        src = cpu_alias(src)
    dst.copy_(src)
    if self.get_device() >= 0 and self.dtype in _F64 and src.dtype not in _F64:
        fidelity.float64("copy_", self.dtype)
    return self


def copy_from(self, dst, non_blocking=False):
    copy_(dst, self)
    return dst


def copy_from_and_resize(self, dst):
    dst.resize_(self.shape)
    copy_(dst, self)
    return dst


def to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    on_npu = self.get_device() >= 0
    src = cpu_alias(self) if on_npu else self
    if device is None or device.type == "npu":
        index = _check_index(device.index) if device is not None and device.index is not None else _index_of(self)
        if not on_npu:
            runtime.memory.check(self.numel() * _itemsize(dtype or self.dtype), index)
        res = torch.ops.aten._to_copy.default(src, dtype=dtype, layout=layout, memory_format=memory_format)
        if res.dtype in _F64 and (not on_npu or self.dtype not in _F64):
            fidelity.float64("_to_copy", res.dtype)
        return adopt(res, index)
    # to another device (cpu, meta): a real copy; pinned host memory has no meaning here
    return torch.ops.aten._to_copy.default(
        src, dtype=dtype, layout=layout, device=device, memory_format=memory_format
    )


def resize_(self, size, memory_format=None):
    n = 1
    for s in size:
        n *= int(s)
    needed = (self.storage_offset() + n) * self.element_size()
    st = self.untyped_storage()
    if needed > st.nbytes():
        index = _index_of(self)
        new = adopt(torch.empty(needed, dtype=torch.uint8), index)
        old = st.nbytes()
        if old:
            cpu_alias(new)[:old].copy_(cpu_alias(_bytes_view(self)))
        _set_storage.redispatch(_CPU_KS, self, new.untyped_storage(), self.storage_offset(), list(size), [])
        if memory_format is None:
            return self
    return torch.ops.aten.resize_.default.redispatch(_CPU_KS, self, size, memory_format=memory_format)


_set_storage = torch.ops.aten.set_.source_Storage_storage_offset


def _bytes_view(t: Tensor) -> Tensor:
    """An ``npu`` uint8 tensor over the whole storage of ``t``."""
    st = t.untyped_storage()
    b = torch.empty(0, dtype=torch.uint8, device=t.device)
    _set_storage.redispatch(_CPU_KS, b, st, 0, [st.nbytes()], [1])
    return b


def set_empty(self):
    new = adopt(torch.empty(0, dtype=self.dtype), _index_of(self))
    return _set_storage.redispatch(_CPU_KS, self, new.untyped_storage(), 0, [0], [])


def record_stream(self, stream):
    return None


_DENSE = frozenset({"cpu", "npu"})


def has_compatible_shallow_copy_type(self, src) -> bool:
    """``param.data = other`` between ``cpu`` and ``npu`` strided tensors is allowed, as torch_npu's own kernel
    allows it (c10's default lists CPU, CUDA... but not PrivateUse1): ``p.data = p.data.npu()`` and FSDP2's
    ``tensor.data = tensor.to(device)`` work as on an NPU."""
    if self.layout != torch.strided or src.layout != torch.strided:
        return self.layout == src.layout and self.device.type == src.device.type
    return self.device.type in _DENSE and src.device.type in _DENSE


def efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    index = _check_index(device.index if device is not None else None)
    return adopt(torch.zeros(size, dtype=dtype), index)


def conv_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    _check_same(input, weight, bias)
    res = torch.ops.aten.convolution.default(
        cpu_alias(input), cpu_alias(weight), None if bias is None else cpu_alias(bias),
        stride, padding, dilation, transposed, output_padding, groups,
    )
    return adopt(res, _index_of(input))


def conv_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                output_padding, groups, output_mask):
    _check_same(grad_output, input, weight)
    bias_sizes = [weight.size(1) * groups] if transposed else [weight.size(0)]
    gi, gw, gb = torch.ops.aten.convolution_backward.default(
        cpu_alias(grad_output), cpu_alias(input), cpu_alias(weight), bias_sizes,
        stride, padding, dilation, transposed, output_padding, groups, output_mask,
    )
    index = _index_of(input)
    return tuple(None if t is None else adopt(t, index) for t in (gi, gw, gb))


def _check_same(*tensors) -> None:
    index = -1
    for t in tensors:
        if t is None:
            continue
        d = t.get_device()
        if d < 0:
            raise mixed_error(max(index, 0))
        if index >= 0 and d != index:
            raise two_devices(index, d)
        index = d


def redispatch_cpu(op):
    def kernel(*args, **kwargs):
        return op.redispatch(_CPU_KS, *args, **kwargs)

    return kernel
