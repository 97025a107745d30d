"""The torch_npu utility layer that tools and checkpoints touch: ``get_npu_format``/``Format``/``npu_format_cast``
with ND formats, and ``torch_npu.utils.storage._rebuild_npu_tensor`` (the pickled global of torch_npu
checkpoints, which msprobe registers as a safe global)."""

from __future__ import annotations

import io
from collections import OrderedDict

import pytest
import torch

torch_npu = pytest.importorskip("torch_npu")


class _LegacyNpuTensor:
    """Pickles like an NPU tensor saved by torch_npu's legacy serialization (``_reduce_ex`` in
    ``torch_npu/utils/storage.py``): the CPU storage and the storage format, rebuilt by ``_rebuild_npu_tensor``."""

    def __init__(self, cpu: torch.Tensor, npu_format):
        self.cpu, self.npu_format = cpu, npu_format

    def __reduce_ex__(self, proto):
        t = self.cpu
        return torch_npu.utils.storage._rebuild_npu_tensor, (
            t._typed_storage(), t.storage_offset(), tuple(t.size()), t.stride(), t.requires_grad, OrderedDict(),
            self.npu_format)


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_get_npu_format_and_format_cast_with_nd_formats():
    x = torch.randn(4, 6, device="npu")
    assert torch_npu.get_npu_format(x) == torch_npu.Format.ND == 2
    assert torch_npu.get_npu_format(torch.randn(1, 2, 3, 4, device="npu")) == torch_npu.Format.NCHW
    nz = torch_npu.npu_format_cast(x, torch_npu.Format.FRACTAL_NZ)
    assert torch_npu.get_npu_format(nz) == 29 and torch_npu.get_npu_format(x) == 2  # a copy, values the same
    assert torch.equal(nz.cpu(), x.cpu())
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(nz, 2)) == 2
    with pytest.raises(NotImplementedError, match="get_npu_format.*'CPU' backend"):
        torch_npu.get_npu_format(x.cpu())  # an npu-only kernel, as on hardware


def test_a_torch_npu_checkpoint_loads_on_the_emulated_npu():
    w = torch.randn(3, 5)
    blob = _saved({"w": _LegacyNpuTensor(w, 29), "b": _LegacyNpuTensor(w[1], True)})
    state = torch.load(io.BytesIO(blob), weights_only=False)
    assert state["w"].device.type == "npu" and torch.equal(state["w"].cpu(), w)
    assert torch_npu.get_npu_format(state["w"]) == 29  # the format recorded in the checkpoint
    assert torch_npu.get_npu_format(state["b"]) == 2 and torch.equal(state["b"].cpu(), w[1])
    rebuild = torch_npu.utils.storage._rebuild_npu_tensor
    before = torch.serialization.get_safe_globals()
    try:
        # not a safe global until registered (an earlier test in this process, msprobe's import, may have)
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals([g for g in before if g is not rebuild])
        with pytest.raises(Exception, match="_rebuild_npu_tensor"):
            torch.load(io.BytesIO(blob), weights_only=True)
        torch.serialization.add_safe_globals([rebuild])  # what msprobe does
        safe = torch.load(io.BytesIO(blob), weights_only=True)
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)
    assert torch.equal(safe["w"].cpu(), w) and safe["w"].device.type == "npu"


def test_re_map_cpu_keeps_legacy_tensors_on_the_cpu(monkeypatch):
    from torch_npu.utils import serialization

    monkeypatch.setattr(serialization, "RE_MAP_CPU", True)
    t = torch.load(io.BytesIO(_saved(_LegacyNpuTensor(torch.arange(4.0), 29))), weights_only=False)
    assert t.device.type == "cpu" and t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_import_torch_npu_brings_the_modules_tools_read():
    """A bare ``import torch_npu`` carries ``torch_npu.utils.storage``/``serialization`` (msprobe reads them as
    attributes) and a ``__file__`` (DeepSpeed's NPU op builder derives paths from it), as the real package."""
    import os

    assert callable(torch_npu.utils.storage._rebuild_npu_tensor)
    assert torch_npu.utils.serialization.RE_MAP_CPU is False
    assert os.path.isfile(torch_npu.__file__)
