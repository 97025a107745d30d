"""``--device`` to a torch device: the emulated NPU wherever no real accelerator is present."""

import os
import subprocess
import sys

import pytest

from ascendify.core import devices
from ascendify.device import placement


def test_cpu_and_bad_requests():
    assert placement.resolve_device("cpu") == ("cpu", False)
    assert placement.resolve_device(" CPU ") == ("cpu", False)
    for bad in ("tpu", "auto:1", "npu:x", "cuda:"):
        with pytest.raises(placement.DeviceSpecError, match="unknown device") as e:
            placement.resolve_device(bad)
        assert e.value.exit_code == 2


def test_a_missing_accelerator_names_the_alternatives(monkeypatch):
    monkeypatch.setattr(devices, "is_cuda_available", lambda: False)
    with pytest.raises(placement.DeviceError, match="no cuda device here: use npu") as e:
        placement.resolve_device("cuda:1")
    assert e.value.exit_code == 3
    monkeypatch.setattr(devices, "is_cuda_available", lambda: True)
    assert placement.resolve_device("cuda:1") == ("cuda:1", False)
    monkeypatch.setattr(devices, "is_npu_available", lambda: False)
    assert placement.resolve_device("auto") == ("cuda", False)  # a real accelerator before the emulated NPU


def test_a_broken_torch_npu_is_not_papered_over_with_the_emulator(monkeypatch):
    monkeypatch.setattr(devices, "is_npu_available", lambda: False)
    monkeypatch.setattr(devices, "torch_npu_installed", lambda: True)
    with pytest.raises(placement.DeviceError, match="torch_npu is installed but no NPU is usable: run `ascendify doctor`"):
        placement.resolve_device("npu")


def test_no_accelerator_means_the_emulated_npu():
    code = ("from ascendify.device import placement; from ascendify.core import devices; import torch; "
            "print(placement.resolve_device('auto'), placement.resolve_device('npu:1'), devices.default_device(), "
            "torch.ones(1, device='npu').device)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "('npu', True) ('npu:1', True) npu npu:0"


def test_an_emulated_device_index_is_checked_before_anything_runs():
    code = ("from ascendify.device import placement\n"
            "for req, bw in (('npu:9', False), ('npu:1', True)):\n"
            "    try:\n        placement.resolve_device(req, backward=bw)\n"
            "    except placement.DeviceError as e:\n        print(e)\n"
            "print(placement.resolve_device('npu:7'), placement.resolve_device('npu:0', backward=True))")
    env = {**os.environ, "ASCENDIFY_EMULATE_SINGLE_DEVICE": "0"}
    env.pop("LOCAL_RANK", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("npu:9: the emulated NPU has 8 device(s) (npu:0 to npu:7")
    assert lines[1].startswith("npu:1: the emulated NPU runs backward on npu:0 only")
    assert lines[2] == "('npu:7', True) ('npu:0', True)"


def test_an_emulator_that_cannot_start_says_why():
    # another backend owns PrivateUse1 (a backward before enabling no longer stops the emulator: it starts anyway)
    code = ("import torch; torch.utils.rename_privateuse1_backend('foo'); from ascendify.device import placement\n"
            "try:\n    placement.resolve_device('npu')\nexcept placement.DeviceError as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("no real NPU here and the emulated NPU cannot start:"), r.stdout
