"""Fidelity checks: behave like the real NPU where the reference data says it differs from the CPU.

Each check is a small function called by the kernels; each records into the recorder and, depending on the
settings, warns once per op or raises :class:`NpuFidelityError`.

- :func:`no_npu_kernel`: the op has no NPU kernel in torch_npu (``knowledge.overloads_without_npu_kernel()``);
  on hardware it runs on the CPU with a "CAUTION ... fall back" warning, or fails when
  ``TORCH_NPU_FALLBACK_CPU_DISABLE=1``.
- :func:`float64`: float64 / complex128 tensors on ``npu`` (many NPU kernels reject them).
- :func:`fp16_overflow`: an fp16/bf16 result holds inf/nan although its inputs were finite (opt-in).
- :func:`unsupported_api`: an API that the official support list marks unsupported on every chip.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from ascendify.emulator import runtime
from ascendify.emulator.errors import NpuFidelityError
from ascendify.program import frames

_settings = runtime.settings
_rec = runtime.recorder
_quiet = runtime.quiet


def _warn_once(key: str, message: str) -> None:
    if key not in _rec.warned:
        _rec.warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=_user_stacklevel())


warn_once = _warn_once  # for the other checks of the package (distributed/hccl_rules.py)


# the overflow watch (``port``/``dump --overflow``) is a TorchDispatchMode between the user's call and the kernel
_LIB_DIRS = (os.sep + "ascendify" + os.sep + "emulator" + os.sep, os.sep + "torch" + os.sep,
             os.sep + os.path.join("ascendify", "precision", "overflow.py"))


_PAST_LIBS = frames.passing(contains=_LIB_DIRS, base=None)


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside the emulator and torch."""
    user = frames.user_frame(2, _PAST_LIBS)
    if user is None:
        return 2
    level, f = 2, sys._getframe(2)
    while f is not user:
        f = f.f_back
        level += 1
    return level


def no_npu_kernel(name: str) -> None:
    """``name`` (``lgamma``, ``_foreach_add.Tensor``) has no NPU kernel."""
    if _quiet[0]:
        return
    msg = (
        f"The operator 'aten::{name}' has no NPU kernel in torch_npu: on a real NPU it falls back to run on "
        "the CPU (slow: a device-host round trip), or fails under TORCH_NPU_FALLBACK_CPU_DISABLE=1."
    )
    if _settings.fidelity == "error":
        _rec.rejected[name] += 1
        raise NpuFidelityError(msg + " (emulator fidelity mode 'error')")
    _rec.no_npu_kernel[name] += 1
    _warn_once("op:" + name, "CAUTION: " + msg)


def float64(name: str, dtype: torch.dtype) -> None:
    """An ``npu`` tensor of ``dtype`` (float64/complex128) was produced by ``name``."""
    mode = _settings.float64
    if mode == "allow" or _quiet[0] or _torch_internal():
        return
    _rec.float64[name] += 1
    msg = (
        f"'{name}' produced a {dtype} tensor on npu: float64 is only partly supported on Ascend NPUs "
        "(many kernels reject it or run it slowly); use float32."
    )
    if mode == "error":
        _rec.rejected["float64:" + name] += 1
        raise NpuFidelityError(msg + " (emulator float64 policy 'error')")
    _warn_once("f64:" + name, msg)


# torch's own code that uses float64 on the device for bookkeeping (it works on a real NPU too)
_INTERNAL_F64 = ("amp/grad_scaler.py", "amp/autocast_mode.py", "_tensor_str.py", "utils/data/")


# frames passed over to find the caller: the emulator's own, and the overflow watch (a TorchDispatchMode: a call it
# passes through, and the reductions it runs on that call's tensors, are its caller's) with torch's plumbing
# between a mode and the op (OpOverload.__call__, the mode's disable-dynamo wrapper)
_SEE_THROUGH = tuple(os.sep.join(p) for p in (("ascendify", "emulator"), ("ascendify", "precision", "overflow.py"),
                                             ("torch", "_ops.py"), ("torch", "_dynamo", "eval_frame.py"),
                                             ("torch", "_compile.py")))


_PAST_WATCH = frames.passing(contains=_SEE_THROUGH, base=None)


def _torch_internal() -> bool:
    """True when the nearest caller outside ascendify's emulator (and its overflow watch) is one of torch's own
    float64 bookkeeping files."""
    f = frames.user_frame(2, _PAST_WATCH)
    if f is None:
        return False
    name = f.f_code.co_filename.replace(os.sep, "/")
    return any("/torch/" + p in name for p in _INTERNAL_F64)


def fp16_overflow(name: str, dtype: torch.dtype) -> None:
    _rec.fp16_overflow[name] += 1
    msg = (
        f"'{name}' produced inf/nan in {dtype} from finite inputs: an overflow in reduced precision "
        "(on 910A chips it saturates instead; use GradScaler or bf16/fp32 for this op)."
    )
    if _settings.fp16_overflow == "error":
        _rec.rejected["fp16_overflow:" + name] += 1
        raise NpuFidelityError(msg + " (emulator fp16_overflow 'error')")
    _warn_once("ovf:" + name, msg)


def unsupported_api(api: str) -> None:
    _rec.unsupported_apis[api] += 1
    msg = f"{api} is unsupported on every Ascend chip family (official torch_npu support list for torch 2.13)."
    if _settings.fidelity == "error":
        _rec.rejected[api] += 1
        raise NpuFidelityError(msg + " (emulator fidelity mode 'error')")
    _warn_once("api:" + api, msg)


_LOW = (torch.float16, torch.bfloat16)


def all_finite(values) -> bool:
    """True when no tensor (or Python float) among ``values`` (lists included) holds inf/nan."""
    for t in values:
        if isinstance(t, torch.Tensor):
            if t.is_floating_point() and t.numel() and not bool(t.isfinite().all()):
                return False
        elif isinstance(t, float):
            if t != t or t in (float("inf"), float("-inf")):
                return False
        elif isinstance(t, list | tuple) and not all_finite(t):
            return False
    return True


def low_precision(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in _LOW
