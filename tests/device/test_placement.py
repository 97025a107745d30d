"""``--device`` to a torch device: the emulated NPU wherever no real accelerator is present."""

import os
import subprocess
import sys

import pytest

from ascendify.core import devices
from ascendify.device import placement


def rd(req, backward=False):
    """(device, emulated) of the one resolver, for a verb's run (training: ``backward``)."""
    r = placement.resolve(req, purpose="train" if backward else "run")
    return r.device, r.emulated


_RD = ("def rd(req, backward=False):\n"  # the same, in a child process
       "    r = placement.resolve(req, purpose='train' if backward else 'run')\n"
       "    return r.device, r.emulated\n")


def test_cpu_and_bad_requests():
    assert rd("cpu") == ("cpu", False)
    assert rd(" CPU ") == ("cpu", False)
    for bad in ("tpu", "auto:1", "npu:x", "cuda:"):
        with pytest.raises(placement.DeviceSpecError, match="unknown device") as e:
            rd(bad)
        assert e.value.exit_code == 2


def test_a_missing_accelerator_names_the_alternatives(monkeypatch):
    monkeypatch.setattr(devices, "is_cuda_available", lambda: False)
    with pytest.raises(placement.DeviceError, match="no cuda device here: use npu") as e:
        rd("cuda:1")
    assert e.value.exit_code == 3
    monkeypatch.setattr(devices, "is_cuda_available", lambda: True)
    assert rd("cuda:1") == ("cuda:1", False)
    monkeypatch.setattr(devices, "is_npu_available", lambda: False)
    assert rd("auto") == ("cuda", False)  # a real accelerator before the emulated NPU


def test_a_broken_torch_npu_is_not_papered_over_with_the_emulator(monkeypatch):
    monkeypatch.setattr(devices, "is_npu_available", lambda: False)
    monkeypatch.setattr(devices, "torch_npu_installed", lambda: True)
    with pytest.raises(placement.DeviceError, match="torch_npu is installed but no NPU is usable: run `ascendify doctor`"):
        rd("npu")


def test_no_accelerator_means_the_emulated_npu():
    code = ("from ascendify.device import placement; from ascendify.core import devices; import torch\n" + _RD +
            "print(rd('auto'), rd('npu:1'), placement.resolve('auto', purpose='bench').kind, "
            "torch.ones(1, device='npu').device)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "('npu', True) ('npu:1', True) npu npu:0"


def test_an_emulated_device_index_is_checked_before_anything_runs():
    code = ("from ascendify.device import placement\n" + _RD +
            "for req, bw in (('npu:9', False), ('npu:1', True)):\n"
            "    try:\n        rd(req, backward=bw)\n"
            "    except placement.DeviceError as e:\n        print(e)\n"
            "print(rd('npu:7'), rd('npu:0', backward=True))")
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
            + _RD + "try:\n    rd('npu')\nexcept placement.DeviceError as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("no real NPU here and the emulated NPU cannot start:"), r.stdout
