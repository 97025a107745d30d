"""Errors raised by the emulator."""


class EmulatorError(RuntimeError):
    """The emulator cannot be enabled here (a real torch_npu or another accelerator owns the process, an
    unverified torch version, a failed self-test), or an emulated API was misused."""


class NotEmulatedError(AttributeError):
    """A torch_npu name that exists on real hardware but has no meaning (or no implementation) on the emulator."""


class NpuFidelityError(RuntimeError):
    """Under fidelity mode ``error``: what a real NPU would reject or silently run elsewhere (an op with no
    NPU kernel, float64, an API unsupported on every chip, an fp16 overflow)."""


class LayoutNotEmulatedError(NotEmulatedError, NotImplementedError):
    """A tensor layout the emulated npu device does not have (sparse COO/CSR/CSC/BSR/BSC): raised where such a
    tensor would reach or leave the device. Also a ``NotImplementedError``, what PyTorch raises for an op with
    no kernel on a backend."""


class NpuUnsupportedError(RuntimeError):
    """What no Ascend NPU can do at all (not a fidelity choice): e.g. ``nn.DataParallel`` over several ``npu``
    devices, which torch_npu does not support (use ``DistributedDataParallel``)."""


class NpuOpError(RuntimeError):
    """What a torch_npu operator raises on an NPU for arguments it rejects (a ``TORCH_CHECK`` in op-plugin or a
    CANN parameter check): a layout, shape or dtype the kernel does not take. The message names the argument."""
