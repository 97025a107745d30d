"""Clear errors where PyTorch's autograd engine cannot run backward on the emulated npu device.

The engine gives each non-CPU device index a ready queue, sized once, at the first ``backward()`` of the
process, from the device count of every registered device guard. The Python device guard of a Python backend
(``torch._C._acc.DeviceGuard``) reports one device and cannot be told otherwise from Python, so:

- backward on ``npu:N`` with N > 0 fails (outside ``single_device`` mode, where every index is device 0);
- after a ``backward()`` that ran before the emulator was enabled, every npu backward fails (no queue at all).

Both fail an internal assert of the engine ("device_ready_queues_ ... INTERNAL ASSERT FAILED ... please report
a bug to PyTorch"). :func:`install` wraps the engine's Python entry point (``_engine_run_backward``, behind
``Tensor.backward`` and ``torch.autograd.grad``) to turn that assert into an
:class:`~ascendify.emulator.errors.EmulatorError` that says what to do.

The engine runs npu backward nodes in its own device thread, whose intra-op thread count (an OpenMP setting of
each thread) was fixed when the thread started: after ``torch.set_num_threads(n)`` the CPU's backward would use n
threads and the npu's the old number, so the two stop agreeing bit for bit. The wrapper gives the root npu node a
pre-hook that brings the device thread to the caller's count first (a C call, once per backward).
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


def _thread_sync_hooks(outputs) -> list:
    """Pre-hooks on the npu roots of this backward that set the device thread's intra-op thread count to the
    caller's (see the module docstring); returns their handles, removed after the backward."""
    ts = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
    roots = [t.grad_fn for t in ts
             if isinstance(t, torch.Tensor) and t.device.type == "npu" and t.grad_fn is not None]
    if not roots:
        return []
    wanted = torch.get_num_threads()

    def sync(grad_outputs):
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)

    return [roots[0].register_prehook(sync)]


def _wrap(original):
    @functools.wraps(original)
    def run_backward(t_outputs, *args, **kwargs):
        handles = _thread_sync_hooks(t_outputs)
        try:
            return original(t_outputs, *args, **kwargs)
        except RuntimeError as e:
            clear = explain(e, t_outputs)
            if clear is None:
                raise
            raise clear from e
        finally:
            for h in handles:
                h.remove()

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
