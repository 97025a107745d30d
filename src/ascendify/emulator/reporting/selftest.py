"""The short self-test run by :func:`ascendify.emulator.enable`: a few ops, a view, autograd, a copy back.

It checks the experimental pieces the emulator rests on (the DLPack retag, the device guard, the fallback)
against plain CPU results, so that an incompatible torch fails at enable time with a clear message instead
of later with wrong numbers.
"""

from __future__ import annotations

import torch


def run() -> dict:
    """Raise ``AssertionError`` on a mismatch; return what was checked."""
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    x = cpu.to("npu")
    _expect(x.device.type == "npu" and x.data_ptr() != cpu.data_ptr(), "to('npu') must copy to an npu tensor")
    _expect(torch.equal(x.cpu(), cpu), "round trip cpu -> npu -> cpu changed values")
    w = torch.linspace(-1, 1, 20).reshape(4, 5).to("npu").requires_grad_()
    y = (x @ w).relu()
    y.t()[1:3].sum().backward()
    wc = w.detach().cpu().requires_grad_()
    yc = (cpu @ wc).relu()
    yc.t()[1:3].sum().backward()
    _expect(torch.equal(y.detach().cpu(), yc.detach()), "matmul/relu differ from the CPU")
    _expect(torch.equal(w.grad.cpu(), wc.grad), "autograd through a view differs from the CPU")
    v = x.view(4, 3)
    v.add_(1)
    _expect(torch.equal(x.cpu(), cpu + 1), "an in-place op on a view did not reach its base")
    _expect(float(x.sum()) == float((cpu + 1).sum()), "item() differs from the CPU")
    return {"ops": "to/matmul/relu/view/add_/sum/backward", "ok": True}


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


LATE_ENABLE = (
    "a backward() ran in this process before the emulator was enabled: PyTorch's autograd engine sets up its "
    "per-device queues at the first backward() and cannot run backward on a device added later. Enable the "
    "emulator before the first backward() in the process (e.g. import ascendify.emulator and enable() at the "
    "top, or use ASCENDIFY_EMULATE=npu / ascendify emulate)"
)


def autograd_engine_problem() -> str | None:
    """Why autograd cannot run on the ``npu`` device in this process (None: it can), from a tiny backward.

    The one known cause is a ``backward()`` before :func:`~ascendify.emulator.enable`: the engine's device
    queues were sized without the npu device and every npu backward then fails an internal assert.
    """
    w = torch.ones(2, device="npu", requires_grad=True)
    try:
        (w * 2).sum().backward()
    except RuntimeError as e:  # PyTorch's assert, or the emulator's clear error made from it (autograd_engine)
        if "device_ready_queues_" in f"{e} {e.__cause__}":
            return LATE_ENABLE
        raise
    return None
