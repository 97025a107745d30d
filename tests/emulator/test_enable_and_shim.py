"""Enabling (idempotent, refusals, self-test) and the torch_npu shim."""

import subprocess
import sys
import types

import pytest
import torch

import ascendify.emulator as emu
from ascendify.emulator import NotEmulatedError
from ascendify.emulator.device import backend
from ascendify.emulator.reporting import selftest


def test_enable_is_idempotent_and_applies_settings(fresh_report):
    emu.enable()
    emu.enable(float64="error")
    assert emu.is_enabled() and emu.settings.float64 == "error"
    with pytest.raises(ValueError, match="float64"):
        emu.enable(float64="sometimes")


def test_self_test_passes_and_checks_something():
    assert selftest.run()["ok"] is True
    with pytest.raises(AssertionError, match="differs"):
        selftest._expect(False, "matmul differs")


def test_refuses_an_unverified_torch(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "9.9.0+cpu")
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")
    why = backend.refusal()
    assert why and "not a version the emulator was verified with" in why
    monkeypatch.setenv(backend.UNVERIFIED_ENV, "1")
    assert backend.refusal() is None


def test_refuses_where_a_real_torch_npu_or_another_backend_owns_the_process(monkeypatch):
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    assert "real torch_npu" in backend.refusal()
    monkeypatch.delitem(sys.modules, "torch_npu")
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "openreg")
    assert "('openreg') already owns" in backend.refusal()
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "(cuda) is available" in backend.refusal()


def test_enable_raises_emulator_error_with_the_reason(monkeypatch):
    monkeypatch.setitem(emu._state, "installed", False)
    monkeypatch.setattr(backend, "refusal", lambda: "a test reason")
    with pytest.raises(emu.EmulatorError, match="cannot enable the emulated npu device: a test reason"):
        emu.enable()


def test_import_torch_npu_gives_the_shim():
    import torch_npu

    assert torch_npu.__ascendify_shim__ and torch_npu.__version__.endswith("+ascendify.emulated")
    assert torch_npu.npu is torch.npu
    import torch_npu.npu.amp

    assert torch_npu.npu.amp.GradScaler is torch.npu.amp.GradScaler
    from torch_npu.optim import NpuFusedAdamW, NpuFusedSGD

    p = torch.nn.Parameter(torch.ones(2, device="npu"))
    opt = NpuFusedAdamW([p], lr=0.1)
    assert isinstance(opt, torch.optim.AdamW) and issubclass(NpuFusedSGD, torch.optim.SGD)
    p.sum().backward()
    opt.step()
    assert p.detach().cpu().lt(1).all()


def _forget_transfer_to_npu():
    sys.modules.pop("torch_npu.contrib.transfer_to_npu", None)
    contrib = sys.modules.get("torch_npu.contrib")
    if contrib is not None:
        contrib.__dict__.pop("transfer_to_npu", None)


def test_transfer_to_npu_redirects_cuda_code():
    import ascendify.auto as auto

    try:
        from torch_npu.contrib import transfer_to_npu

        assert transfer_to_npu.__ascendify_redirection__ == "ascendify.auto.enable(target='npu')"
        assert transfer_to_npu.is_available()
        assert auto.is_enabled() and torch.ones(1).cuda().device.type == "npu"
    finally:  # the redirection is process-wide: later tests expect CUDA calls to fail as on a CPU build
        auto.disable()
        _forget_transfer_to_npu()


def test_transfer_to_npu_finds_auto_as_a_provider_in_a_process_that_never_imported_it():
    code = ("import sys, torch, ascendify.emulator as emu; emu.enable(); assert 'ascendify.auto' not in sys.modules; "
            "from torch_npu.contrib import transfer_to_npu; print(transfer_to_npu.__ascendify_redirection__, "
            "torch.ones(1).cuda().device)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ascendify.auto.enable(target='npu')", "npu:0"]


def test_transfer_to_npu_without_a_provider_does_the_minimum_and_says_why(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    monkeypatch.setattr(torch.cuda, "is_available", torch.cuda.is_available)  # put back after the shim's patch
    _forget_transfer_to_npu()
    try:
        from torch_npu.contrib import transfer_to_npu

        assert transfer_to_npu.__ascendify_redirection__.startswith("minimal: torch.cuda.is_available() -> False")
        assert "no provider installed" in transfer_to_npu.__ascendify_redirection__
        assert torch.cuda.is_available() is False and transfer_to_npu.is_available()
    finally:
        _forget_transfer_to_npu()


def test_torch_npu_names_that_are_not_emulated_say_so():
    import torch_npu

    with pytest.raises(NotEmulatedError, match="torch_npu.npu_moe_distribute_dispatch is a torch_npu custom operator"):
        torch_npu.npu_moe_distribute_dispatch(None)  # imports (libraries import it), refuses when called
    with pytest.raises(AttributeError) as e:
        _ = torch_npu.no_such_thing
    assert not isinstance(e.value, NotEmulatedError)
    with pytest.raises(ImportError, match="torch_npu.profiler.analysis exists in torch_npu but is not emulated"):
        import torch_npu.profiler.analysis  # noqa: F401  (raw-data analysis: the profiler itself is emulated)
    from torch_npu.utils import get_cann_version

    with pytest.raises(NotEmulatedError, match="not the versions of CANN's components"):
        get_cann_version("RUNTIME")


def test_torch_npus_companions_import_as_frameworks_need(emulator):
    # MindSpeed imports torchair, pyACL and get_cann_version at import time; under emulation they import, answer
    # what the emulated device knows, and refuse the rest by name
    import acl
    import torchair
    from torch_npu.utils.collect_env import get_cann_version
    from torchair import register_fx_node_ge_converter
    from torchair.ge import DataType, Tensor, TensorSpec  # noqa: F401

    from ascendify.emulator import runtime

    assert get_cann_version() == runtime.settings.cann_version == "9.1.0"
    assert acl.get_soc_name() == runtime.settings.device_name
    free, total, ret = acl.rt.get_mem_info(1)
    assert ret == 0 and total == runtime.settings.memory_capacity and 0 < free <= total

    def converter(x):
        return x

    assert register_fx_node_ge_converter(torch.ops.aten.add.Tensor)(converter) is converter
    with pytest.raises(NotEmulatedError, match="torchair.get_npu_backend is not emulated: torchair compiles"):
        torchair.get_npu_backend()
    with pytest.raises(NotEmulatedError, match="acl.rt.malloc is not emulated"):
        acl.rt.malloc(16, 0)
    with pytest.raises(NotEmulatedError):
        Tensor()
