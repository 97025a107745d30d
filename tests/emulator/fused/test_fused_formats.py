"""The storage-format registry behind npu_format_cast / get_npu_format."""

import gc

import pytest
import torch

from ascendify.emulator.fused import formats
from ascendify.emulator.fused.formats import Format, get_format, set_format


def test_base_formats_follow_torch_npu_guess():
    assert get_format(torch.ones(3)) == Format.ND == 2
    assert get_format(torch.ones(2, 3)) == 2
    assert get_format(torch.ones(1, 2, 3, 4)) == Format.NCHW
    assert get_format(torch.ones(1, 2, 3, 4, 5)) == Format.NCDHW


def test_set_format_is_per_storage_and_shared_by_views():
    t = torch.ones(4, 4, device="npu")
    other = torch.ones(4, 4, device="npu")
    set_format(t, Format.FRACTAL_NZ)
    assert get_format(t) == 29 and get_format(t[1:]) == 29 and get_format(t.t()) == 29
    assert get_format(other) == 2
    set_format(t, 2)
    assert get_format(t) == 2


def test_record_dies_with_the_storage():
    t = torch.ones(8, 8)
    set_format(t, 29)
    n = len(formats._formats)
    del t
    gc.collect()
    assert len(formats._formats) == n - 1


def test_invalid_format_is_refused():
    with pytest.raises(RuntimeError, match="acl_format 7"):
        set_format(torch.ones(2, 2), 7)
