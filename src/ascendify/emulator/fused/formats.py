"""The NPU's private storage formats (``torch_npu.Format``), as bookkeeping on the emulated device.

On an Ascend NPU every storage carries an ACL format (``NPUStorageDesc``): ND, NCHW, FRACTAL_NZ... Values do
not change with the format (only the private memory layout does), so the emulator keeps the data as it is and
remembers the format per storage: :func:`set_format` (what ``npu_format_cast`` does), :func:`get_format` (what
``torch_npu.get_npu_format`` answers). Views share their base's format, as on hardware, because the record is
keyed by the storage object (PyTorch keeps one Python object per storage) and dropped when it dies.

A storage that was never cast reports its base format the way torch_npu guesses it from the shape
(``InferFormat::GuessBaseFormat``): NCDHW for 5-D, NCHW for 4-D, ND otherwise.
"""

from __future__ import annotations

import enum
import weakref

import torch


class Format(enum.IntEnum):
    """``torch_npu.Format``: the ``aclFormat`` values (CANN ``acl_base.h``)."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47


ACL_FORMAT_ND = int(Format.ND)
#: the formats a storage may be cast to (UNDEFINED is not one)
VALID = frozenset(int(f) for f in Format if f is not Format.UNDEFINED)

_formats: dict[int, tuple[weakref.ref, int]] = {}  # id(storage) -> (weak reference, format)


def base_format(t: torch.Tensor) -> int:
    """The format torch_npu gives a fresh storage of ``t``'s shape (``GuessBaseFormat``)."""
    return int(Format.NCDHW if t.dim() == 5 else Format.NCHW if t.dim() == 4 else Format.ND)


def _drop(ref, key: int) -> None:
    entry = _formats.get(key)
    if entry is not None and entry[0] is ref:
        del _formats[key]


def set_format(t: torch.Tensor, fmt: int) -> torch.Tensor:
    """Record ``fmt`` (an int or :class:`Format`) as the format of ``t``'s storage; returns ``t``.

    Raises ``RuntimeError`` (what torch_npu raises) for a value that is not an ACL format."""
    fmt = int(fmt)
    if fmt not in VALID:
        raise RuntimeError(f"npu_format_cast: acl_format {fmt} is not a valid ACL format "
                           f"(one of {sorted(VALID)}, see torch_npu.Format)")
    st = t.untyped_storage()
    key = id(st)
    if fmt == base_format(t):
        _formats.pop(key, None)
        return t
    ref = weakref.ref(st, lambda r, k=key: _drop(r, k))
    _formats[key] = (ref, fmt)
    return t


def get_format(t: torch.Tensor) -> int:
    """The ACL format of ``t``'s storage: the recorded one, else the base format of its shape (ND = 2 for
    everything but 4-D and 5-D tensors)."""
    try:
        entry = _formats.get(id(t.untyped_storage()))
    except (RuntimeError, NotImplementedError):  # no storage (sparse, fake)
        entry = None
    if entry is not None and entry[0]() is not None:
        return entry[1]
    return base_format(t)
