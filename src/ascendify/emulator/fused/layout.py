"""The layout family of fused operators: ``npu_format_cast`` / ``npu_format_cast_`` (values unchanged, the
storage's ACL format recorded in :mod:`.formats`) and ``npu_confusion_transpose`` (a fused reshape + transpose)."""

from __future__ import annotations

import torch

from ascendify.emulator.fused import formats
from ascendify.emulator.fused._check import check


def _fmt(acl_format) -> int:
    return formats.get_format(acl_format) if isinstance(acl_format, torch.Tensor) else int(acl_format)


def npu_format_cast(self, acl_format, *, customize_dtype=None, input_dtype=None):
    """A copy of ``self`` whose storage has ``acl_format`` (an int, ``torch_npu.Format`` or a tensor whose format
    to take); ``self`` itself when it already has that format, as torch_npu does."""
    fmt = _fmt(acl_format)
    if fmt not in formats.VALID:
        formats.set_format(self, fmt)  # raises the NPU's error
    if formats.get_format(self) == fmt:
        return self
    return formats.set_format(self.clone(), fmt)


def npu_format_cast_(self, src):
    """In place: ``self``'s storage takes ``src``'s format (an int, ``torch_npu.Format`` or a tensor)."""
    formats.set_format(self, _fmt(src))
    return self


def npu_confusion_transpose(self, perm, shape, transpose_first):
    op = "npu_confusion_transpose"
    if transpose_first:
        check(sorted(perm) == list(range(self.dim())), op,
              f"perm {list(perm)} must be a permutation of the {self.dim()} dims of self")
        return self.permute(*perm).contiguous().view(*shape)
    y = self.reshape(*shape)
    check(sorted(perm) == list(range(y.dim())), op, f"perm {list(perm)} must be a permutation of the {y.dim()} "
                                                    "dims of the reshaped tensor")
    return y.permute(*perm).contiguous()
