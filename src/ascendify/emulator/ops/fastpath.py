"""Specialised kernels for the two commonest op shapes: one Python frame per op, everything precomputed.

:func:`ascendify.emulator.ops.kernels.make_kernel` asks :func:`kernel_for` first. It answers for ops whose tensor
arguments are plain positional ``Tensor``/``Tensor?`` (their positions known from the schema), that take no
device or generator, and that the op table lets take the fast path (``fast_path``: not an op with no NPU
kernel, which must be reported, nor one that accepts CPU arguments), and either

- return one fresh tensor (``add.Tensor``, ``relu``, ``mm``, ``sum``...): :func:`functional`, or
- write their first argument and return it (``mul_.Scalar``, ``add_.Tensor``...): :func:`inplace`.

Everything else, and every call while the fp16 overflow check is on, goes through the generic kernels. The
results are the same as the generic path's (same CPU kernel on the same zero-copy aliases); the saving is
Python overhead: no per-call schema facts, no extra frames for the aliasing, no counter hashing.

>>> # under emulation: kernel_for(info(torch.ops.aten.add.Tensor)) -> a functional kernel
"""

from __future__ import annotations

import torch
from torch import Tensor

from ascendify.emulator import runtime
from ascendify.emulator.device import tensors
from ascendify.emulator.ops import fidelity
from ascendify.emulator.ops.mismatch import mixed_error, two_devices
from ascendify.emulator.ops.opinfo import scalar_overload

_settings = runtime.settings
_current = runtime.current_device
_F64 = (torch.float64, torch.complex128)
_KDL_CPU = tensors._KDL_CPU
_to_dlpack = tensors._to_dlpack
_from_dlpack = tensors._from_dlpack
_i64_at = tensors._i64_at
_u64_at = tensors._u64_at
_PTR = tensors._CAPSULE_POINTER
_DEV = tensors._DEVICE_OFFSET
_adopt_fresh = tensors.adopt_fresh
_cpu_alias = tensors.cpu_alias


def kernel_for(inf, generic):
    """A specialised kernel for ``inf`` (an :class:`~ascendify.emulator.ops.opinfo.OpInfo`), or None for the
    generic one. ``generic(inf, args, kwargs)`` is what the kernel falls back to while the fp16 overflow check
    is on."""
    if not tensors.CAPSULE_DIRECT:
        return None
    if not inf.fast or not inf.policy.fast_path or inf.tensor_kw or not inf.tensor_pos:
        return None
    if inf.kind == "functional" and inf.single_tensor:
        return functional(inf, generic)
    if inf.kind == "write" and inf.write_src == [0] and not inf.out_names and len(inf.op._schema.returns) == 1:
        return inplace(inf, generic)
    return None


def _aliases(inf):
    """The argument conversion shared by both kernels: (CPU arguments, device index)."""
    pos = inf.tensor_pos
    mixed = mixed_error

    def convert(args):
        cargs = list(args)
        index = -1
        cpu_seen = False
        n = len(args)
        for i in pos:
            if i >= n:
                break
            a = args[i]
            if not isinstance(a, Tensor):  # None, or a number (a wrapped-number scalar)
                continue
            d = a.get_device()
            if d >= 0:
                if d != index:
                    if index >= 0:
                        raise two_devices(index, d)
                    index = d
                if a.is_conj() or a.is_neg():
                    cargs[i] = _cpu_alias(a)
                else:
                    cap = _to_dlpack(a)
                    _i64_at(_u64_at(id(cap) + _PTR).value + _DEV).value = _KDL_CPU
                    cargs[i] = _from_dlpack(cap)
            elif a.dim():
                cpu_seen = True
        if index < 0:
            return cargs, _current[0]
        if cpu_seen:
            raise mixed(index)
        return cargs, index

    return convert


def functional(inf, generic):
    """Kernel for an op returning one fresh tensor: alias the inputs, run the CPU op, adopt the result."""
    convert = _aliases(inf)
    call, name, scalar = inf.call, inf.name, scalar_overload

    def kernel(*args, **kwargs):
        if _settings.fp16_overflow != "off" or _settings.overflow_mode != "inf_nan":
            return generic(inf, args, kwargs)
        inf.calls += 1
        cargs, index = convert(args)
        try:
            res = call(*cargs, **kwargs)
        except RuntimeError as e:  # see kernels._call: a number where the schema has a Tensor
            if "Expected a value of type 'Tensor'" not in str(e):
                raise
            res = scalar(inf, cargs)(*cargs, **kwargs)
        if res.dtype in _F64:
            fidelity.float64(name, res.dtype)
        return _adopt_fresh(res, index)

    kernel.__name__ = f"npu_{name}"
    return kernel


def inplace(inf, generic):
    """Kernel for an op that writes its first argument and returns it (``mul_``, ``add_``...)."""
    convert = _aliases(inf)
    call, name, scalar = inf.call, inf.name, scalar_overload

    def kernel(*args, **kwargs):
        if _settings.fp16_overflow != "off" or _settings.overflow_mode != "inf_nan":
            return generic(inf, args, kwargs)
        inf.calls += 1
        cargs, _ = convert(args)
        try:
            call(*cargs, **kwargs)
        except RuntimeError as e:
            if "Expected a value of type 'Tensor'" not in str(e):
                raise
            scalar(inf, cargs)(*cargs, **kwargs)
        return args[0]

    kernel.__name__ = f"npu_{name}"
    return kernel
