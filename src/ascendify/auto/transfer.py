"""``from torch_npu.contrib import transfer_to_npu`` on the emulated NPU: automatic migration to ``npu``.

On a real NPU that import patches CUDA calls to go to the NPU; under the emulator it does the same through
:mod:`ascendify.auto`. The emulator's torch_npu shim does not import this package (auto imports the emulator, to
turn it on for ``--to npu``): it finds :func:`transfer_to_npu` through the entry point
``torch_npu.contrib.transfer_to_npu`` of the group ``ascendify.torch_npu_shim`` declared in ``pyproject.toml``.
"""

from __future__ import annotations

from typing import Any


def transfer_to_npu() -> dict[str, Any]:
    """Redirect CUDA to ``npu`` in this process; returns the attributes of the ``transfer_to_npu`` module."""
    from ascendify.auto import enable

    enable(target="npu")
    return {"__ascendify_redirection__": "ascendify.auto.enable(target='npu')"}
