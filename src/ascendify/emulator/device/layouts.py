"""The emulated npu device holds strided (dense) tensors only: sparse layouts stop at its boundary.

The kernels hand back CPU results as ``npu`` tensors through the DLPack retag, which only dense tensors have
(a sparse tensor has no single storage). Rather than fail deep inside the retag, the emulator raises
:class:`~ascendify.emulator.errors.LayoutNotEmulatedError` (a ``NotEmulatedError`` and a
``NotImplementedError``) naming the op:

- an op on ``npu`` tensors that would produce a sparse result (``x.to_sparse()``, ``to_sparse_csr``...);
- any op that reaches the device's sparse dispatch keys (``SparsePrivateUse1``, ``SparseCsrPrivateUse1``):
  ``torch.sparse_coo_tensor(..., device="npu")``, a sparse CPU tensor moved with ``.to("npu")``,
  ``torch.sparse.mm`` on such tensors.

>>> import torch
>>> not_dense(torch.eye(2)) is None
True
>>> str(not_dense(torch.eye(2).to_sparse(), "to_sparse")).split(":")[0]
'sparse tensors are not emulated on the npu device (to_sparse would return a torch.sparse_coo tensor)'
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import LayoutNotEmulatedError
from ascendify.emulator.reporting.record import op_name

_SPARSE_KEYS = ("SparsePrivateUse1", "SparseCsrPrivateUse1")


def error(op: str | None = None, layout=None) -> LayoutNotEmulatedError:
    """The error for op ``op`` (a short name) and/or a result of layout ``layout``."""
    if op and layout is not None:
        where = f" ({op} would return a {layout} tensor)"
    elif op or layout is not None:
        where = f" ({op or f'an op returned a {layout} tensor'})"
    else:
        where = ""
    return LayoutNotEmulatedError(
        f"sparse tensors are not emulated on the npu device{where}: keep sparse work on the CPU "
        "(to_dense() before moving to npu), or run on a real NPU"
    )


def not_dense(t: torch.Tensor, op: str | None = None) -> LayoutNotEmulatedError | None:
    """The error to raise for a kernel result ``t`` that cannot become an ``npu`` tensor (None: it can)."""
    if t.layout is not torch.strided:
        return error(op, t.layout)
    return None


def _refuse(op, *args, **kwargs):
    raise error(op_name(op))


def register(libs: list) -> None:
    """Refuse every op that reaches the device's sparse dispatch keys (keeps the libraries in ``libs``)."""
    lib = torch.library.Library("_", "IMPL")
    for key in _SPARSE_KEYS:
        lib.fallback(_refuse, key)
    libs.append(lib)


def refuse_layout(t: torch.Tensor) -> None:
    """Raise the sparse error if ``t`` (a CPU result about to become an ``npu`` tensor) is not dense."""
    err = not_dense(t, None)
    if err is not None:
        raise err
