"""Specialised kernels for the two commonest op shapes: one Python frame per op, everything precomputed.

:func:`ascendify.emulator.kernels.make_kernel` asks :func:`kernel_for` first. It answers for ops whose tensor
arguments are plain positional ``Tensor``/``Tensor?`` (their positions known from the schema), that take no
device or generator, have an NPU kernel on hardware (no fidelity report), and either

- return one fresh tensor (``add.Tensor``, ``relu``, ``mm``, ``sum``...): :func:`functional`, or
- write their first argument and return it (``mul_.Scalar``, ``add_.Tensor``...): :func:`inplace`.

Everything else, and every call while the fp16 overflow check is on, goes through the generic kernels. The
results are the same as the generic path's (same CPU kernel on the same zero-copy aliases); the saving is
Python overhead: no per-call schema facts, no extra frames for the aliasing, no counter hashing.

>>> # under emulation: kernel_for(info(torch.ops.aten.add.Tensor)) -> a functional kernel
"""

from __future__ import annotations

from torch import Tensor

from ascendify.emulator import fidelity, kernels, runtime, tensors

_settings = runtime.settings
_current = runtime.current_device
_F64 = kernels._F64
_KDL_CPU = tensors._KDL_CPU
_to_dlpack = tensors._to_dlpack
_from_dlpack = tensors._from_dlpack
_i64_at = tensors._i64_at
_u64_at = tensors._u64_at
_PTR = tensors._CAPSULE_POINTER
_DEV = tensors._DEVICE_OFFSET
_adopt_fresh = tensors.adopt_fresh
_cpu_alias = tensors.cpu_alias


def kernel_for(inf):
    """A specialised kernel for ``inf`` (a :class:`kernels.OpInfo`), or None for the generic one."""
    if not tensors.CAPSULE_DIRECT:
        return None
    if not inf.fast or inf.flagged or inf.allow_cpu or inf.tensor_kw or not inf.tensor_pos:
        return None
    if inf.kind == "functional" and inf.single_tensor:
        return functional(inf)
    if inf.kind == "write" and inf.write_src == [0] and not inf.out_names and len(inf.op._schema.returns) == 1:
        return inplace(inf)
    return None


def _aliases(inf):
    """The argument conversion shared by both kernels: (CPU arguments, device index)."""
    pos = inf.tensor_pos
    two_devices, mixed = kernels._two_devices, kernels._mixed_error

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


def functional(inf):
    """Kernel for an op returning one fresh tensor: alias the inputs, run the CPU op, adopt the result."""
    convert = _aliases(inf)
    call, name, generic, scalar = inf.call, inf.name, kernels._run_fast, kernels.scalar_overload

    def kernel(*args, **kwargs):
        if _settings.fp16_overflow != "off":
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


def inplace(inf):
    """Kernel for an op that writes its first argument and returns it (``mul_``, ``add_``...)."""
    convert = _aliases(inf)
    call, name, generic, scalar = inf.call, inf.name, kernels._run_fast, kernels.scalar_overload

    def kernel(*args, **kwargs):
        if _settings.fp16_overflow != "off":
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
