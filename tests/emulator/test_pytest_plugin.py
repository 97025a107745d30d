"""The pytest plugin (entry point ``pytest11``): ``pytest --emulate-npu`` runs a project's tests on the emulated
npu; without it the plugin is inert and torch-free."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = """\
import pytest
import torch


@pytest.mark.npu
def test_torch_npu_code():
    import torch_npu

    x = torch.ones(2, 3).npu()
    assert x.device.type == "npu" and torch.npu.is_available()
    assert torch_npu.npu.device_count() >= 1
    assert (x * 2).sum().item() == 12.0


def test_fixture(npu_device):
    assert torch.zeros(1, device=npu_device).device == torch.device("npu:0")


def test_plain_cpu_test_still_runs():
    assert torch.ones(1).device.type == "cpu"
"""

HEADER_PROBE = """\
import sys


def pytest_report_header(config):
    return [f"torch imported before collection: {'torch' in sys.modules}"]
"""

LGAMMA = """\
import torch


def test_op_that_falls_back_to_the_cpu_on_an_npu():
    torch.lgamma(torch.ones(2, device="npu"))
"""


@pytest.fixture
def clean(monkeypatch):
    for var in ("ASCENDIFY_EMULATE", "ASCENDIFY_EMULATE_FIDELITY", "TORCH_NPU_FALLBACK_CPU_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_emulate_npu_option_runs_torch_npu_tests(pytester, clean):
    pytester.makepyfile(test_user=USER_TESTS)
    r = pytester.runpytest_subprocess("--emulate-npu", "-p", "no:cacheprovider", timeout=300)
    r.assert_outcomes(passed=3)
    r.stdout.fnmatch_lines(["ascendify: emulated npu (host CPU), * device(s) named *, fidelity=warn*"])


def test_without_the_option_the_plugin_is_inert_and_torch_free(pytester, clean):
    pytester.makeconftest(HEADER_PROBE)
    pytester.makepyfile(test_user=USER_TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", timeout=300)
    r.stdout.fnmatch_lines(["torch imported before collection: False"])  # the plugin itself imports no torch
    assert "ascendify:" not in r.stdout.str()
    r.assert_outcomes(passed=1, skipped=2)  # the npu-marked test and the fixture's test skip: no NPU here
    r.stdout.fnmatch_lines(["*needs an NPU: none here (run with --emulate-npu*"])


def test_environment_variable_and_fidelity_error(pytester, clean, monkeypatch):
    monkeypatch.setenv("ASCENDIFY_EMULATE", "npu")
    pytester.makepyfile(test_lgamma=LGAMMA)
    r = pytester.runpytest_subprocess("--emulate-npu-fidelity=error", "-p", "no:cacheprovider", timeout=300)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fidelity=error*", "*NpuFidelityError*aten::lgamma*"])
