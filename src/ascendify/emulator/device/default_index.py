"""A bare ``"npu"`` passed to ``Tensor.to`` / ``Module.to`` means the current device, as on a real NPU.

PyTorch's ``to()`` fills a missing device index from the backend's device guard, and the Python device guard
that a Python backend can register (``torch._C._acc.DeviceGuard``) always answers device 0: only its device
type can be overridden from Python. So after ``torch.npu.set_device(1)``, ``t.to("npu")`` would land on
``npu:0`` while ``torch.zeros(2, device="npu")`` and ``t.npu()`` land on ``npu:1`` (and ``t.to("npu")`` on a
tensor already on ``npu:1`` would copy it to ``npu:0``).

:func:`note_current` (called whenever the current device changes) wraps ``torch.Tensor.to``, the first time a
device other than 0 becomes current, with a function that gives a bare ``npu`` device the current index before
calling PyTorch's own method; ``Module.to`` calls ``Tensor.to`` and follows. A program that never leaves
device 0 keeps PyTorch's method untouched. With ``settings.single_device`` (torchrun) every index is device 0
and nothing is rewritten.
"""

from __future__ import annotations

import functools

import torch

from ascendify.emulator import runtime

_current = runtime.current_device
_settings = runtime.settings
_installed: list = []  # PyTorch's Tensor.to, once wrapped


def _is_bare_npu(d) -> bool:
    if type(d) is str:
        return d == "npu"
    return type(d) is torch.device and d.type == "npu" and d.index is None


def _wrap(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        i = _current[0]
        if i > 0 and not _settings.single_device:
            if args and _is_bare_npu(args[0]):
                args = (torch.device("npu", i), *args[1:])
            elif kwargs and _is_bare_npu(kwargs.get("device")):
                kwargs["device"] = torch.device("npu", i)
        return original(self, *args, **kwargs)

    to.__ascendify_original__ = original
    return to


def note_current(index: int) -> None:
    """Called when device ``index`` becomes current: install the ``Tensor.to`` wrapper if it is not device 0."""
    if index > 0 and not _installed:
        from ascendify.core.patching import allow_on_lazy_parameters

        original = torch.Tensor.to
        _installed.append(original)
        wrapper = _wrap(original)
        runtime.patches.set(torch.Tensor, "to", wrapper)
        allow_on_lazy_parameters(runtime.patches, [(original, wrapper)])
