"""Turn PyTorch's PrivateUse1 into the ``npu`` device, once per process.

Order matters: refuse where the emulator must not run; rename PrivateUse1; register ``torch.npu``; generate
``Tensor.npu()``/``Module.npu()``; register the Python device hooks and guard (``torch._C._acc``, without
which the first matmul aborts the process); install the kernels; patch the few host-memory paths.
"""

from __future__ import annotations

import sys

import torch

VERIFIED_TORCH = ("2.13.0",)
UNVERIFIED_ENV = "ASCENDIFY_EMULATE_UNVERIFIED_TORCH"

_libs: list = []  # keep the torch.library registrations alive
# True when pinned host memory is real (the C++ hooks, ops/cfast.cpp): pin_memory=True allocates, is_pinned() is
# True, as on an NPU; without the C++ kernels pinning stays a no-op (device/patches.py)
pinned_memory = [False]


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


def _hooks_and_guard():
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


def install() -> int:
    """Register the backend; returns the number of directly registered kernels."""
    from ascendify.emulator.api import accelerator, cuda_hint, unsupported
    from ascendify.emulator.api import npu as npu_module
    from ascendify.emulator.device import autograd_engine, layouts, patches
    from ascendify.emulator.ops import kernels

    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu_module)
    from ascendify.emulator import runtime

    for name, sub in npu_module._SUBMODULE_OBJECTS.items():
        sys.modules[f"torch.npu.{name}"] = sub
        runtime.patches.on_restore(lambda key=f"torch.npu.{name}": sys.modules.pop(key, None))
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    hooks, guard = _hooks_and_guard()
    _libs.extend((hooks, guard))
    from ascendify.emulator.ops import cfast

    fast = cfast.module()
    if fast is not None and hasattr(fast, "register_hooks"):
        fast.register_hooks(hooks)  # the same answers, plus pinned host memory (Python hooks have no allocator)
        pinned_memory[0] = True
    else:
        torch._C._acc.register_python_privateuseone_hook(hooks)
    torch._C._acc.register_python_privateuseone_device_guard(guard)
    fallback_lib = torch.library.Library("_", "IMPL")
    aten_lib = torch.library.Library("aten", "IMPL")
    _libs.extend((fallback_lib, aten_lib))
    cfast.attach()
    n = kernels.register((fallback_lib, aten_lib))
    layouts.register(_libs)
    autograd_engine.install()
    patches.install(real_pinned_memory=pinned_memory[0])
    unsupported.install()
    accelerator.install()
    cuda_hint.install()
    from ascendify.emulator.device import hostmem

    hostmem.tune()
    return n
