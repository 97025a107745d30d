"""Install the emulated ``npu`` device in this process, once: every layer's part, in the order that matters.

Refusing where the emulator must not run is :func:`ascendify.emulator.device.backend.refusal`, asked first by
:func:`ascendify.emulator.enable`. Then: rename PrivateUse1 and register ``torch.npu``; generate
``Tensor.npu()``/``Module.npu()``; register the Python device hooks and guard (``torch._C._acc``, without which the
first matmul aborts the process); install the kernels; patch the few host-memory paths; install the torch_npu
surface that patches torch itself (unsupported APIs, ``torch.accelerator``, the CUDA hint, legacy typed tensors).

This module stands above ``device/`` (the base), ``ops/`` (the kernels) and ``api/`` (the torch_npu surface):
it is the one place that knows all three.
"""

from __future__ import annotations

import torch

from ascendify.emulator import runtime
from ascendify.emulator.api import accelerator, cuda_hint, legacy_types, unsupported
from ascendify.emulator.api import npu as npu_module
from ascendify.emulator.api.npu.streams import install_record_stream  # not the torch.npu.streams facade
from ascendify.emulator.device import autograd_engine, backend, hostmem, layouts, patches
from ascendify.emulator.ops import cfast, kernels

_libs: list = []  # keep the torch.library registrations alive
# True when pinned host memory is real (the C++ hooks, ops/cfast.cpp): pin_memory=True allocates, is_pinned() is
# True, as on an NPU; without the C++ kernels pinning stays a no-op (device/patches.py)
pinned_memory = [False]


def install() -> int:
    """Register the backend; returns the number of directly registered kernels."""
    backend.register_device(npu_module)
    hooks, guard = backend.hooks_and_guard()
    _libs.extend((hooks, guard))
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
    install_record_stream(runtime.patches)
    legacy_types.install(runtime.patches)
    unsupported.install()
    accelerator.install()
    cuda_hint.install()
    hostmem.tune()
    return n
