"""What this machine has: small probes that never raise (a real NPU, the emulated one, CUDA, XPU, MPS).

Everything in ascendify that needs to know the device asks this module (the style of HF accelerate's
``is_<device>_available``). Probes import torch lazily; none of them initialises a device context beyond
what ``is_available()`` does. Which device a verb then *uses* (``--device auto``'s order) is decided once, above
this module: :func:`ascendify.device.placement.resolve`.
"""

from __future__ import annotations

import os
from functools import cache


@cache
def torch_npu_installed() -> bool:
    """True when a *real* torch_npu distribution is installed (the emulator's shim does not count)."""
    try:
        from importlib import metadata

        metadata.distribution("torch-npu")
        return True
    except Exception:
        return False


def is_npu_available() -> bool:
    """True when a real Ascend NPU is usable through torch_npu. Never raises."""
    if not torch_npu_installed():
        return False
    try:
        import torch
        import torch_npu  # noqa: F401

        return bool(torch.npu.is_available())
    except Exception:
        return False


def is_emulated_npu_enabled() -> bool:
    """True when ascendify's emulated ``npu`` device is active in this process. Never raises."""
    import sys

    emu = sys.modules.get("ascendify.emulator")
    if emu is None:
        return False
    try:
        return bool(emu.is_enabled())
    except Exception:
        return False


def is_cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def is_xpu_available() -> bool:
    try:
        import torch

        return bool(hasattr(torch, "xpu") and torch.xpu.is_available())
    except Exception:
        return False


def is_mps_available() -> bool:
    try:
        import torch

        return bool(torch.backends.mps.is_available())
    except Exception:
        return False


def emulation_requested() -> bool:
    """True when the environment asks for the emulated NPU (``ASCENDIFY_EMULATE=npu``)."""
    return os.environ.get("ASCENDIFY_EMULATE", "").strip().lower() == "npu"


def device_name(device: str) -> str:
    """A person's name for ``device``: the accelerator's product name, or the host CPU's model."""
    kind = device.partition(":")[0]
    try:
        import torch

        if kind == "npu" and not is_emulated_npu_enabled():
            return str(torch.npu.get_device_name(torch.device(device)))
        if kind == "cuda":
            return str(torch.cuda.get_device_name(torch.device(device)))
    except Exception:
        pass
    cpu = _cpu_model()
    return f"emulated npu (host CPU: {cpu})" if kind == "npu" else cpu


@cache
def cpu_has_bf16() -> bool | None:
    """True when the host CPU computes bfloat16 natively (``avx512_bf16``/``amx_bf16``, Arm ``bf16``), False when
    it does not (bf16 matmuls then run many times slower than fp32), None when unknown (no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    except OSError:
        pass
    return None


@cache
def _cpu_model() -> str:
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
