"""The device-generic API (``torch.accelerator``, ``torch.get_device_module``,
``get_default_backend_for_device``) redirected to the CPU, in process: the user's code hears that the CPU is the
accelerator (as ``torch.cuda.is_available()`` says True), libraries hear the truth."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from ascendify.auto.record import UnsupportedOnTarget

A = torch.accelerator


def _library(src: str, name: str = "probe"):
    """A function compiled as if it were torch's own code (a library: it hears the truth)."""
    ns: dict = {"torch": torch, "dist": dist}
    exec(compile(src, os.path.join(os.path.dirname(torch.__file__), "_ascendify_fake_lib.py"), "exec"), ns)
    return ns[name]


def test_the_accelerator_is_the_cpu_for_user_code(auto_cpu, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert A.is_available() is True
    acc = A.current_accelerator()
    assert acc == torch.device("cpu") and isinstance(acc, torch.device)
    assert A.current_accelerator(check_available=True) == acc
    assert A.device_count() == 2  # the local ranks, as torch.cuda.device_count() answers
    x = torch.ones(2).to(acc)
    assert x.device.type == acc.type and torch.device(f"{acc}:1") == x.device  # cpu:1 is the one cpu
    rec = auto_cpu.rec
    assert {"torch.accelerator.is_available", "torch.accelerator.current_accelerator",
            "torch.accelerator.device_count", "torch.device"} <= set(rec.redirected)
    assert rec.redirected["torch.accelerator.current_accelerator"][1].endswith("test_accelerator.py:28")


def _truth() -> tuple:
    """What torch answers without redirection (no accelerator here; in the whole suite the emulated npu, made
    inactive, is the compiled-in one)."""
    # torch.get_device_module() caches its answer: asked here it would keep this one for later tests
    return (A.is_available(), A.current_accelerator(), A.device_count(),
            getattr(torch, torch._C._get_accelerator().type))


def test_libraries_hear_the_truth(auto_cpu):
    import ascendify.auto

    probe = _library("def probe():\n    return (torch.accelerator.is_available(), "
                     "torch.accelerator.current_accelerator(), torch.accelerator.device_count(), "
                     "torch.get_device_module(), torch.device('cpu:1'))\n")
    got = probe()
    assert got[4] == auto_cpu.Device("cpu", 1)  # cpu:1 is left alone outside the user's code
    assert "torch.accelerator.is_available" not in auto_cpu.rec.redirected
    ascendify.auto.disable()
    assert got[:4] == _truth() and got[0] is False
    assert "torch.accelerator.is_available" not in auto_cpu.rec.redirected


def test_device_index_set_and_switched_then_restored(auto_cpu):
    A.set_device_index(1)
    assert A.current_device_index() == 1 == torch.cuda.current_device()  # one index, as torch.cuda's
    with A.device_index(0):
        assert A.current_device_index() == 0
    assert A.current_device_index() == 1
    A.set_device_index("cuda:0")
    assert A.current_device_index() == 0
    A.set_device_index(auto_cpu.Device("cpu", 1))
    assert A.current_device_index() == 1
    A.set_device_index(torch.device("cuda:0"))  # the one cpu (no index): nothing moves, as on torch.cuda
    A.set_device_index("cpu")
    assert A.current_device_index() == 1
    with pytest.raises(ValueError, match="specified index"):
        A.set_device_index(None)
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        A.set_device_index("meta:0")
    A.set_device_index(0)
    assert isinstance(A.device_index(0), A.device_index)
    assert {"torch.accelerator.set_device_index", "torch.accelerator.device_index"} <= set(auto_cpu.rec.no_effect)


def test_synchronize_streams_memory_and_capability(auto_cpu):
    from torch.accelerator.memory import memory_allocated as imported_early

    assert A.synchronize() is None and A.synchronize(0) is None and A.synchronize("cuda:0") is None
    s = A.current_stream()
    assert s is torch.cuda.current_stream()
    A.set_stream(s)
    assert A.memory_allocated() == 0 == A.max_memory_allocated() == A.memory_reserved() == imported_early()
    assert A.memory_stats() == {}
    assert A.reset_peak_memory_stats() is None and A.empty_cache() is None and A.empty_host_cache() is None
    free, total = A.get_memory_info()
    assert 0 < free <= total
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= \
        A.get_device_capability()["supported_dtypes"]
    rec = auto_cpu.rec
    assert {"torch.accelerator.synchronize", "torch.accelerator.get_memory_info"} <= set(rec.redirected)
    assert {"torch.accelerator.memory_allocated", "torch.accelerator.set_stream"} <= set(rec.no_effect)


def test_device_graphs_are_unsupported_on_the_cpu(auto_cpu):
    with pytest.raises(UnsupportedOnTarget, match=r"torch.accelerator.Graph .* \(called at .*test_accelerator.py:"):
        A.Graph()


def test_the_device_module_is_the_redirected_torch_cuda(auto_cpu):
    assert torch.get_device_module() is torch.cuda
    assert torch.get_device_module("cuda") is torch.cuda
    assert torch.get_device_module(A.current_accelerator()) is torch.cuda
    mod = torch.get_device_module(A.current_accelerator())
    mod.manual_seed(3)  # torch.cpu has no manual_seed: the accelerator's module must
    assert torch.get_device_module("mps") is torch.mps
    assert auto_cpu.rec.redirected["torch.get_device_module"][0] == 4


def test_the_default_backend_of_cuda_and_of_the_accelerator(auto_cpu):
    assert dist.get_default_backend_for_device("cuda") == "gloo"
    assert dist.get_default_backend_for_device(torch.device("cuda", 1)) == "gloo"
    assert dist.get_default_backend_for_device(A.current_accelerator()) == "gloo"
    assert auto_cpu.rec.redirected["dist.get_default_backend_for_device"][2] == "gloo"


def test_disable_forgets_answers_cached_under_redirection():
    import ascendify.auto

    before = {n: getattr(A, n) for n in A.__all__}
    truth = _truth()
    ascendify.auto.enable("cpu")
    try:
        # torch caches get_device_module; torch's own call for "cuda" meets the redirected torch.device (cpu)
        assert _library("def probe():\n    return torch.get_device_module('cuda')\n")() is torch.cpu
    finally:
        ascendify.auto.disable()
    assert torch.get_device_module("cuda") is torch.cuda
    assert {n: getattr(A, n) for n in A.__all__} == before
    assert _truth() == truth


def test_device_generic_timing_events_time_the_host(auto_cpu):
    import time

    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    assert isinstance(start, torch.Event)
    start.record()
    time.sleep(0.02)
    end.record()
    A.synchronize()
    assert 15 <= start.elapsed_time(end) < 2000  # torch's cpu event raises "cpu backend doesn't support events"
    assert end.query() and end.synchronize() is None
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.Event().elapsed_time(torch.Event())
    assert auto_cpu.rec.redirected["torch.Event"][0] == 4
