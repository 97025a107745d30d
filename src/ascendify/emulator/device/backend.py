"""The base of the emulated device: whether it may run here (:func:`refusal`), and the two steps that make
PyTorch's PrivateUse1 the ``npu`` device (:func:`register_device`, :func:`hooks_and_guard`).

The whole installation, in its order, is :func:`ascendify.emulator.install.install`: it stands above the
kernels (``ops/``) and the torch_npu surface (``api/``), which this module never imports.
"""

from __future__ import annotations

import sys

import torch

VERIFIED_TORCH = ("2.13.0",)
UNVERIFIED_ENV = "ASCENDIFY_EMULATE_UNVERIFIED_TORCH"


def torch_release() -> str:
    return torch.__version__.split("+", 1)[0]


def refusal() -> str | None:
    """Why the emulator must not be enabled in this process (None: it may)."""
    import os

    from ascendify.core import devices

    real = sys.modules.get("torch_npu")
    if (real is not None and not getattr(real, "__ascendify_shim__", False)) or devices.torch_npu_installed():
        return ("a real torch_npu is installed in this environment: use the real NPU (the emulator never "
                "replaces torch_npu); run the emulator in an environment without torch-npu")
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", "npu"):
        return f"another PyTorch backend ('{name}') already owns the PrivateUse1 device in this process"
    if name == "npu":
        return "the 'npu' device is already registered in this process by something other than ascendify"
    for dev, probe in (("cuda", torch.cuda.is_available), ("xpu", lambda: hasattr(torch, "xpu") and
                                                              torch.xpu.is_available())):
        try:
            if probe():
                return (f"a real accelerator ({dev}) is available in this process; the emulated npu device "
                        "would compete with it (PyTorch allows one accelerator per process)")
        except Exception:
            pass
    if torch_release() not in VERIFIED_TORCH and os.environ.get(UNVERIFIED_ENV) != "1":
        return (f"torch {torch.__version__} is not a version the emulator was verified with "
                f"({', '.join(VERIFIED_TORCH)}): it relies on experimental torch internals "
                f"(torch._C._acc, the DLPack device tag). Set {UNVERIFIED_ENV}=1 to try anyway.")
    for attr in ("_acc",):
        if not hasattr(torch._C, attr):
            return f"this torch build lacks torch._C.{attr}, which the emulator needs"
    return None


def register_device(npu_module) -> None:
    """Rename PrivateUse1 to ``npu``, register ``npu_module`` as ``torch.npu`` (and its submodules as
    ``torch.npu.X``), and generate ``Tensor.npu()``/``Module.npu()``/``Storage.npu()``."""
    from ascendify.emulator import runtime

    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu_module)
    for name, sub in npu_module._SUBMODULE_OBJECTS.items():
        sys.modules[f"torch.npu.{name}"] = sub
        runtime.patches.on_restore(lambda key=f"torch.npu.{name}": sys.modules.pop(key, None))
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)


def hooks_and_guard():
    """PyTorch's Python device hooks and guard for PrivateUse1 (``torch._C._acc``), not yet registered: without
    them the first matmul aborts the process."""
    acc = torch._C._acc

    from ascendify.emulator import runtime

    class Hooks(acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return runtime.enabled

        def has_primary_context(self, device_index: int) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    private_use1 = torch._C._autograd.DeviceType.PrivateUse1

    class Guard(acc.DeviceGuard):
        def type_(self):  # called from C++ for many ops and autograd nodes: no lookups
            return private_use1

    return Hooks(), Guard()
