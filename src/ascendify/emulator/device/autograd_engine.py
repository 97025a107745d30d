"""Run every npu backward on the caller's thread, as the CPU's runs, and explain what the engine cannot do.

PyTorch's autograd engine runs the backward of a non-CPU device on a per-device worker thread, with one ready
queue per device index, sized once, at the first ``backward()`` of the process, from the device count of every
registered device guard. For the emulated npu that design costs and breaks things:

- every backward hands its graph to that thread and waits for it: two thread switches per backward, and the
  activations made by the caller's thread are read on another core (on a loaded 2-core machine this alone made
  a batch-8 training step 1.6-1.7x the CPU's instead of 1.2x);
- the Python device guard of a Python backend (``torch._C._acc.DeviceGuard``) reports one device, so backward
  on ``npu:N`` with N > 0 failed an internal assert ("device_ready_queues_ ... INTERNAL ASSERT FAILED");
- after a ``backward()`` that ran before the emulator was enabled there was no npu queue at all (same assert);
- the device thread's intra-op thread count (an OpenMP setting of each thread) was fixed when it started.

:func:`install` wraps the engine's Python entry point (``_engine_run_backward``, behind ``Tensor.backward``,
``torch.autograd.backward`` and ``torch.autograd.grad``) to run it with PyTorch's own thread-local switch
``torch.autograd.set_multithreading_enabled(False)``: the engine then takes the caller's (CPU) ready queue for
every node, as it does for CPU tensors. Results are the same (the same kernels in the same order); backward hooks
run on the caller's thread. Code that calls the engine without that entry point still meets the assert, which
:func:`explain` turns into an :class:`~ascendify.emulator.errors.EmulatorError` that says what to do.
"""

from __future__ import annotations

import functools

import torch
import torch.autograd
import torch.autograd.graph

from ascendify.emulator.errors import EmulatorError

SIGNATURE = "device_ready_queues_"

MULTI_DEVICE = (
    "backward on npu:{index} is not emulated: PyTorch's autograd engine drives one device of a Python backend "
    "(npu:0). Run one device per process (torchrun: each worker's npu:LOCAL_RANK is its device 0), or set "
    "ASCENDIFY_EMULATE_SINGLE_DEVICE=1 (every npu:N is device 0), or keep autograd on npu:0"
)


def _devices(outputs) -> list[int]:
    ts = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
    return sorted({t.get_device() for t in ts if isinstance(t, torch.Tensor) and t.device.type == "npu"})


def explain(err: RuntimeError, outputs) -> EmulatorError | None:
    """The clear error for engine failure ``err`` on ``outputs`` (None: not one the emulator knows)."""
    if SIGNATURE not in str(err):
        return None
    beyond = [i for i in _devices(outputs) if i > 0]
    if beyond:
        return EmulatorError(MULTI_DEVICE.format(index=beyond[0]))
    from ascendify.emulator.reporting.selftest import LATE_ENABLE

    return EmulatorError(f"autograd cannot run on the emulated npu device in this process: {LATE_ENABLE}")


_multithreading = torch._C._is_multithreading_enabled
_set_multithreading = torch._C._set_multithreading_enabled


def _wrap(original):
    @functools.wraps(original)
    def run_backward(t_outputs, *args, **kwargs):
        # the caller's thread runs the whole graph (see the module docstring); the setting is thread-local
        prev = _multithreading()
        if prev:
            _set_multithreading(False)
        try:
            return original(t_outputs, *args, **kwargs)
        except RuntimeError as e:
            clear = explain(e, t_outputs)
            if clear is None:
                raise
            raise clear from e
        finally:
            if prev:
                _set_multithreading(True)

    run_backward.__ascendify_original__ = original
    return run_backward


def install() -> None:
    """Wrap ``_engine_run_backward`` where ``torch.autograd`` and ``torch.autograd.graph`` look it up. Once."""
    current = torch.autograd.graph._engine_run_backward
    if getattr(current, "__ascendify_original__", None) is not None:
        return
    from ascendify.emulator import runtime

    wrapped = _wrap(current)
    runtime.patches.set(torch.autograd.graph, "_engine_run_backward", wrapped)
    if getattr(torch.autograd, "_engine_run_backward", None) is current:
        runtime.patches.set(torch.autograd, "_engine_run_backward", wrapped)
