"""The errors for tensors on different devices in one op (what a real device raises too)."""

from __future__ import annotations


def mixed_error(index: int) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, npu:{index} and cpu! "
        "(a CPU tensor was passed to an operator on the emulated NPU; move it with .npu()/.to(device))"
    )


def two_devices(a: int, b: int) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, npu:{a} and npu:{b}!"
    )
