"""PyTorch's device-generic APIs on the emulated npu: every torch.accelerator function, torch.Stream,
torch.Event and torch.get_device_module answer as they would on a real torch_npu device."""

from __future__ import annotations

import inspect
import time

import pytest

torch = pytest.importorskip("torch")
A = torch.accelerator

# every public function of torch.accelerator (and its memory module) in this torch, with how to call it
CALLS = {
    "current_accelerator": lambda: A.current_accelerator(),
    "is_available": lambda: A.is_available(),
    "device_count": lambda: A.device_count(),
    "current_device_index": lambda: A.current_device_index(),
    "current_device_idx": lambda: A.current_device_idx(),
    "set_device_index": lambda: A.set_device_index(0),
    "set_device_idx": lambda: A.set_device_idx(0),
    "device_index": lambda: A.device_index(0).__enter__(),
    "current_stream": lambda: A.current_stream(),
    "set_stream": lambda: A.set_stream(A.current_stream()),
    "synchronize": lambda: A.synchronize(),
    "empty_cache": lambda: A.empty_cache(),
    "empty_host_cache": lambda: A.empty_host_cache(),
    "get_memory_info": lambda: A.get_memory_info(),
    "memory_allocated": lambda: A.memory_allocated(),
    "max_memory_allocated": lambda: A.max_memory_allocated(),
    "memory_reserved": lambda: A.memory_reserved(),
    "max_memory_reserved": lambda: A.max_memory_reserved(),
    "memory_stats": lambda: A.memory_stats(),
    "reset_peak_memory_stats": lambda: A.reset_peak_memory_stats(),
    "reset_accumulated_memory_stats": lambda: A.reset_accumulated_memory_stats(),
    "get_device_capability": lambda: A.get_device_capability(),
}
NOT_EMULATED = {"Graph"}  # device graphs: torch.npu.graph is not emulated either


@pytest.fixture(autouse=True)
def _device_zero(emulator):
    yield
    torch.npu.set_device(0)
    torch.npu.set_stream(torch.npu.default_stream(0))


@pytest.mark.filterwarnings("ignore:Use `:FutureWarning")
def test_every_public_accelerator_function_is_covered_and_works():
    public = {n for n, v in vars(A).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
              and getattr(v, "__module__", "").startswith("torch.accelerator")}
    assert len(public) >= 20 and "synchronize" in public and "memory_allocated" in public
    assert public - NOT_EMULATED - set(CALLS) == set(), "a torch.accelerator function this test does not call"
    for call in CALLS.values():
        call()  # none raises (synchronize, empty_cache, memory_* used to)
    assert A.current_accelerator() == torch.device("npu")
    assert A.device_count() == torch.npu.device_count()
    assert torch.get_device_module("npu") is torch.npu and torch.get_device_module() is torch.npu


def test_memory_functions_follow_the_emulated_allocator():
    A.reset_peak_memory_stats()
    before = A.memory_allocated()
    x = torch.empty(4096, dtype=torch.float32, device="npu")
    assert A.memory_allocated() == before + 4096 * 4 == torch.npu.memory_allocated()
    assert A.max_memory_allocated() >= before + 4096 * 4
    assert A.memory_reserved() == torch.npu.memory_reserved()
    free, total = A.get_memory_info()
    assert (free, total) == torch.npu.mem_get_info() and total == torch.npu.get_device_properties().total_memory
    stats = A.memory_stats()
    assert stats["allocated_bytes.all.current"] == A.memory_allocated()
    assert list(stats) == sorted(stats)
    del x
    assert A.memory_allocated() == before
    A.reset_peak_memory_stats()
    assert A.max_memory_allocated() == before
    A.reset_accumulated_memory_stats()
    assert A.memory_stats()["allocation.all.allocated"] == 0


def test_device_index_moves_the_current_npu_device():
    A.set_device_index(1)
    assert A.current_device_index() == torch.npu.current_device() == 1
    assert torch.empty(1, device="npu").device == torch.device("npu", 1)
    with A.device_index(3):
        assert torch.npu.current_device() == 3
    assert A.current_device_index() == 1
    torch.npu.set_device(2)
    assert A.current_device_index() == 2
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        A.set_device_index(99)


def test_streams_are_the_npu_streams():
    s = torch.npu.Stream()
    assert isinstance(s, torch.Stream) and isinstance(A.current_stream(), torch.Stream)
    assert A.current_stream() is torch.npu.current_stream()
    with torch.npu.stream(s):
        assert A.current_stream() is s
    A.set_stream(s)
    assert torch.npu.current_stream() is s
    generic = torch.Stream("npu:1")
    assert generic.device == torch.device("npu", 1) and generic.query() and generic.synchronize() is None
    assert A.current_stream(1).device_index == 1
    other = torch.Stream()
    other.wait_stream(s)
    torch.ones(2, device="npu").record_stream(other)


def test_events_time_the_host():
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    assert isinstance(start, torch.Event) and isinstance(torch.npu.Event(), torch.Event)
    start.record()
    time.sleep(0.02)
    end.record()
    A.synchronize()
    assert 15 <= start.elapsed_time(end) < 2000
    ev = A.current_stream().record_event()
    assert ev.query() and ev.synchronize() is None
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.Event().elapsed_time(torch.Event())


def test_device_capability_lists_dtypes():
    caps = A.get_device_capability()
    assert {torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool} <= caps["supported_dtypes"]


def test_inactive_emulator_gives_pytorch_its_functions_back(emulator):
    torch.npu.set_device(2)
    assert torch._C._accelerator_getDeviceIndex() == 2  # the emulator's answer
    emulator._set_active(False)
    try:
        assert not A.is_available()
        assert torch._C._accelerator_getDeviceIndex() == 0  # PyTorch's own (the Python device guard's)
    finally:
        emulator._set_active(True)
    assert A.is_available() and A.current_device_index() == 2


def test_the_default_backend_of_the_accelerator_is_hccl():
    import torch.distributed as dist

    acc = A.current_accelerator()
    assert dist.get_default_backend_for_device(acc) == "hccl"
    assert dist.get_default_backend_for_device(torch.device(f"{acc}:1")) == "hccl"
    assert dist.get_default_backend_for_device("npu") == dist.Backend.default_device_backend_map["npu"]
