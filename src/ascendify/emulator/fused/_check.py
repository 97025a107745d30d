"""Argument checks shared by the fused operators: they raise what the NPU raises (:class:`NpuOpError`)."""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NpuOpError

FLOATS = (torch.float16, torch.bfloat16, torch.float32)
HALF = (torch.float16, torch.bfloat16)
_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
          torch.float64: "float64"}


def fail(op: str, message: str):
    raise NpuOpError(f"{op}: {message}")


def check(cond: bool, op: str, message: str) -> None:
    if not cond:
        fail(op, message)


def on_npu(t: torch.Tensor) -> bool:
    return t.device.type == "npu"


def dtype_in(t: torch.Tensor | None, allowed, op: str, arg: str) -> None:
    """``t``'s dtype is one of ``allowed``; float64 is also taken on CPU tensors (reference checks such as
    ``gradcheck``), never on the ``npu`` device."""
    if t is None or t.dtype in allowed or (t.dtype == torch.float64 and not on_npu(t)):
        return
    names = "/".join(_NAMES.get(d, str(d).removeprefix("torch.")) for d in allowed)
    fail(op, f"the dtype of {arg} must be {names}, but got {_NAMES.get(t.dtype, str(t.dtype))}")


def same_device(op: str, first: torch.Tensor, **others) -> None:
    """Every tensor in ``others`` lives where ``first`` does (the NPU refuses host tensors among its inputs)."""
    for arg, t in others.items():
        if isinstance(t, torch.Tensor) and t.device.type != first.device.type:
            fail(op, f"Expected all tensors to be on the same device, but {arg} is on {t.device} and the input "
                     f"on {first.device}. Expected NPU tensor, please check whether the input tensor device is "
                     "correct.")


def chip() -> str:
    """The emulated chip's product family from ``settings.device_name``: ``A2``, ``A3``, ``950`` (Ascend 950PR/DT),
    ``training`` (Atlas training series, 910A) or ``inference`` (Atlas inference series, 310P); other names count
    as A2."""
    from ascendify.emulator import runtime
    from ascendify.emulator.settings import chip_family

    family = chip_family(runtime.settings.device_name)
    return {"A1": "training", "310P": "inference", "A3": "A3", "A5": "950"}.get(family, "A2")


_FAMILY_NAMES = {"A2": "Atlas A2 training/inference series", "A3": "Atlas A3 training/inference series",
                 "training": "Atlas training series", "inference": "Atlas inference series",
                 "950": "Ascend 950PR/950DT"}


def product(op: str, products, first) -> None:
    """``op`` runs on the emulated chip's product family (``products``: the families its documentation lists,
    None for all); checked for ``npu`` inputs only (``first``: the first tensor argument, or a list of them)."""
    if products is None:
        return
    t = first[0] if isinstance(first, list | tuple) and first else first
    if not isinstance(t, torch.Tensor) or not on_npu(t):
        return
    family = chip()
    if family == "950" and "950" not in products and "A2" in products:
        return  # pages written before Ascend 950 list A2/A3 only; 950 runs the A2 operators
    if family not in products:
        from ascendify.emulator import runtime

        fail(op, f"not supported on {runtime.settings.device_name} ({_FAMILY_NAMES[family]}); torch_npu documents "
                 f"it for {', '.join(_FAMILY_NAMES[p] for p in products)}")


def kernel_limit(op: str, ok: bool, message: str) -> None:
    """A limit that torch_npu's documentation states but CANN's kernel (not torch_npu's own checks) enforces,
    such as the EP world sizes of ``npu_alltoallv_gmm``: under the ``fidelity`` setting ``error`` it raises
    :class:`NpuFidelityError`; under ``warn`` (the default) it warns once and the emulated op runs, so that
    small jobs (2 ranks) can exercise it."""
    if ok:
        return
    from ascendify.emulator import runtime
    from ascendify.emulator.errors import NpuFidelityError
    from ascendify.emulator.ops.fidelity import warn_once

    msg = f"{op}: {message} (torch_npu's documentation; CANN's kernel rejects it on a real NPU)"
    if runtime.settings.fidelity == "error":
        runtime.recorder.rejected["fused:" + op] += 1
        raise NpuFidelityError(msg + " (emulator fidelity mode 'error')")
    warn_once(f"fused-limit:{op}:{message}", "On a real NPU: " + msg)


def on_950(op: str, t, what: str) -> None:
    """``what`` (float8 / float4 operands or targets) exists on Ascend 950 only: refused for ``npu`` tensors on
    other chips, as torch_npu's pages state."""
    if isinstance(t, torch.Tensor) and on_npu(t) and chip() != "950":
        from ascendify.emulator import runtime

        fail(op, f"{what} is supported on Ascend 950PR/950DT only, not on {runtime.settings.device_name}")
