"""npu_format_cast / npu_format_cast_ and npu_confusion_transpose."""

import pytest
import torch

from ascendify.emulator.fused.formats import Format, get_format

torch_npu = pytest.importorskip("torch_npu")


def test_format_cast_keeps_values_and_records_the_format():
    w = torch.randn(32, 16).npu()
    nz = torch_npu.npu_format_cast(w, 29)
    assert nz is not w and torch.equal(nz.cpu(), w.cpu())
    assert get_format(nz) == Format.FRACTAL_NZ and get_format(w) == Format.ND
    assert torch_npu.npu_format_cast(nz, Format.FRACTAL_NZ) is nz  # already that format: the same tensor
    back = torch_npu.npu_format_cast(nz, 2)
    assert get_format(back) == 2 and torch.equal(back.cpu(), w.cpu())
    assert torch_npu.npu_format_cast_(w, nz) is w and get_format(w) == 29
    with pytest.raises(RuntimeError, match="acl_format 5 is not a valid ACL format"):
        torch_npu.npu_format_cast(w, 5)


def test_confusion_transpose_both_orders():
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    y = torch_npu.npu_confusion_transpose(x.npu(), (0, 2, 1), (2, 12), True)
    torch.testing.assert_close(y.cpu(), x.permute(0, 2, 1).reshape(2, 12))
    z = torch_npu.npu_confusion_transpose(x.npu(), (1, 0, 2), (3, 2, 4), False)
    torch.testing.assert_close(z.cpu(), x.reshape(3, 2, 4).permute(1, 0, 2))
    xd = x.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch_npu.npu_confusion_transpose(t, (0, 2, 1), (2, 12), True), (xd,))
