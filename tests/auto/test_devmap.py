"""Device values are mapped precisely: exact device strings, device objects, ints where the API takes one."""

from __future__ import annotations

import pytest
import torch

from ascendify.auto.devmap import Mapper
from ascendify.auto.record import Recorder, UnsupportedOnTarget
from ascendify.auto.target import Target


def mapper(device_type: str = "xpu", strict: bool = False) -> Mapper:
    """``xpu`` stands in for ``npu`` (a device type stock torch parses without the emulator)."""
    return Mapper(Target(device_type), Recorder(device_type, strict), torch.device)


@pytest.mark.parametrize(
    "value, expected",
    [("cuda", "xpu"), ("cuda:0", "xpu:0"), ("cuda:3", "xpu:3"), ("cpu", "cpu"), ("xpu:1", "xpu:1"), ("meta", "meta")],
)
def test_device_strings_map_exactly(value, expected):
    assert mapper().map(value, "api") == expected


@pytest.mark.parametrize("value", ["ckpt_cuda.pt", "cuda_checkpoint", "my cuda run", "/data/cuda:0/x", "xcuda"])
def test_strings_that_only_contain_cuda_are_untouched(value):
    m = mapper()
    assert m.map(value, "api") is value
    assert not m.rec.redirected and not m.rec.unmapped


def test_cpu_target_collapses_indices():
    m = mapper("cpu")
    assert m.map("cuda:5", "api") == "cpu"
    assert m.map(torch.device("cuda", 2), "api") == torch.device("cpu")
    assert m.map(1, "api", int_is_device=True) == "cpu"


def test_device_objects_and_ints():
    m = mapper()
    assert m.map(torch.device("cuda", 1), "api") == torch.device("xpu", 1)
    assert m.map(torch.device("cpu"), "api") == torch.device("cpu")
    assert m.map(2, "api", int_is_device=True) == "xpu:2"
    assert m.map(2, "api") == 2  # an int where the API does not take a device stays an int
    assert m.map(True, "api", int_is_device=True) is True  # bool is not a device index


def test_redirections_are_counted_with_first_site():
    m = mapper()
    for _ in range(3):
        m.map("cuda:0", "torch.zeros")
    count, site, to = m.rec.redirected["torch.zeros"]
    assert count == 3 and to == "xpu:0"
    assert site.endswith(".py:" + site.rsplit(":", 1)[1]) and "test_devmap.py" in site


def test_cuda_looking_non_devices_are_recorded_as_unmapped():
    m = mapper()
    assert m.map("cuda:x", "Tensor.to") == "cuda:x"
    assert m.map("CUDA", "Tensor.to") == "CUDA"
    assert len(m.rec.unmapped) == 2
    with pytest.raises(UnsupportedOnTarget, match="could not be mapped"):
        mapper(strict=True).map("cuda:first", "Tensor.to")


def test_map_location_dicts_keep_cuda_keys_and_add_target_keys():
    m = mapper()
    out = m.map_dict({"cuda:0": "cuda:1", "cpu": "cpu"}, "torch.load")
    assert out == {"cuda:0": "xpu:1", "xpu:0": "xpu:1", "cpu": "cpu"}


def test_index_for_device_module_functions():
    m = mapper()
    assert m.index("cuda:2", "set_device") == 2
    assert m.index(3, "set_device") == 3
    assert mapper("cpu").index("cuda:2", "set_device") is None
