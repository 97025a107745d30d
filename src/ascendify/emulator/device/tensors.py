"""Zero-copy retagging between ``cpu`` and ``npu`` tensors (the DLPack retag), with memory accounting.

An ``npu`` tensor is host memory whose DLPack device was rewritten from ``kDLCPU`` (1) to ``kDLExtDev`` (12),
which ATen maps to PrivateUse1 (``npu`` once renamed). With ``settings.single_device`` every index is
retagged as device 0 (PyTorch's autograd engine drives a Python backend's device 0 only). The reverse rewrite gives a CPU alias of the same
memory. Both keep the owner alive through the DLPack deleter; neither copies.

>>> # under emulation:
>>> # t = adopt(torch.ones(3)); t.device  -> device(type='npu', index=0)
>>> # cpu_alias(t).data_ptr() == t.data_ptr()  -> True
"""

from __future__ import annotations

import ctypes

import torch

from ascendify.emulator import runtime
from ascendify.emulator.device.layouts import refuse_layout as _refuse_layout

_KDL_CPU = 1
_KDL_EXT_DEV = 12
_DLTENSOR = b"dltensor"
_DEVICE_OFFSET = 8  # DLTensor: void* data; DLDevice {int32 device_type; int32 device_id}

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_i64_at = ctypes.c_int64.from_address
_u64_at = ctypes.c_uint64.from_address
_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack
_memory = runtime.memory
_settings = runtime.settings
_CAPSULE_POINTER = 16  # CPython's PyCapsule: PyObject_HEAD (refcount, type), then ``void *pointer``


def _capsule_layout_ok() -> bool:
    """True when reading the capsule's pointer field directly gives what ``PyCapsule_GetPointer`` gives (the
    direct read skips a ctypes foreign call on every retag; checked once, else the API is used)."""
    try:
        cap = _to_dlpack(torch.zeros(1))
        return _u64_at(id(cap) + _CAPSULE_POINTER).value == _get_pointer(cap, _DLTENSOR)
    except Exception:
        return False


CAPSULE_DIRECT = _capsule_layout_ok()

if CAPSULE_DIRECT:
    def _dl_device(cap) -> ctypes.c_int64:
        """The DLPack device word of capsule ``cap`` (writable)."""
        return _i64_at(_u64_at(id(cap) + _CAPSULE_POINTER).value + _DEVICE_OFFSET)
else:  # pragma: no cover - another Python implementation or a debug build
    def _dl_device(cap) -> ctypes.c_int64:
        return _i64_at(_get_pointer(cap, _DLTENSOR) + _DEVICE_OFFSET)


def _retag(t: torch.Tensor, code: int) -> torch.Tensor:
    """Re-export ``t`` with DLPack device word ``code`` (device_type | device_id << 32, little-endian)."""
    try:
        cap = _to_dlpack(t)
    except RuntimeError:
        _refuse_layout(t)
        raise
    _dl_device(cap).value = code
    return _from_dlpack(cap)


def cpu_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the memory of ``npu`` tensor ``t`` (zero-copy; writes show through).

    The lazy conjugate and negative bits, which DLPack drops, are put back on the alias.
    """
    cap = _to_dlpack(t)
    _dl_device(cap).value = _KDL_CPU
    c = _from_dlpack(cap)
    if t.is_conj():
        c = c.conj()
    if t.is_neg():
        c = c._neg_view()
    return c


def adopt(t: torch.Tensor, index: int = 0) -> torch.Tensor:
    """The ``npu:index`` tensor over the memory of CPU tensor ``t`` (zero-copy), counted as device memory.

    Memory that is already an ``npu`` tensor's (an alias handed back by a kernel) is not counted twice.
    """
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if _settings.single_device:
        index = 0
    out = _retag(t, _KDL_EXT_DEV | (index << 32))
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return out
    if st.resizable():  # fresh CPU allocator memory; aliases from DLPack are not resizable
        _memory.track(st, st.nbytes(), index)
    return out


def adopt_fresh(t: torch.Tensor, index: int = 0) -> torch.Tensor:
    """:func:`adopt` for a kernel's result (never a lazy conjugate/negative view): the hot path."""
    if _settings.single_device:
        index = 0
    try:
        cap = _to_dlpack(t)
    except RuntimeError:
        _refuse_layout(t)
        raise
    _dl_device(cap).value = _KDL_EXT_DEV | (index << 32)
    out = _from_dlpack(cap)
    st = t.untyped_storage()
    if st.resizable():
        _memory.track(st, st.nbytes(), index)
    return out
