"""torch.npu under emulation: only real torch_npu names, each working without hardware; others raise."""

import inspect
import types

import pytest
import torch

from ascendify.core import knowledge
from ascendify.emulator import NotEmulatedError

TORCH_NPU_ONLY_PRIVATE = {"_utils", "_is_in_bad_fork", "_lazy_init", "_lazy_call", "_initialized"}


def _public(module) -> list[str]:
    """Public names of ``module``, less the modules it imports (torch, sys) and ``from __future__``."""
    out = []
    for n, v in vars(module).items():
        if n.startswith("_") or n == "annotations":
            continue
        if isinstance(v, types.ModuleType) and not v.__name__.startswith(("torch.npu", "ascendify.emulator.api.npu")):
            continue
        out.append(n)
    return out


def test_every_emulated_name_exists_in_torch_npu():
    names = knowledge.npu_names()
    public = _public(torch.npu)
    assert len(public) > 60
    missing = sorted(n for n in public if f"torch.npu.{n}" not in names)
    assert missing == []
    for sub in ("memory", "random", "utils", "streams", "amp"):
        mod = getattr(torch.npu, sub)
        for n in dir(mod):
            if not n.startswith("_") and inspect.isfunction(getattr(mod, n)) or inspect.isclass(getattr(mod, n)):
                assert f"torch.npu.{sub}.{n}" in names, f"torch.npu.{sub}.{n}"


def test_names_torch_internals_need_are_private():
    for n in TORCH_NPU_ONLY_PRIVATE:
        assert hasattr(torch.npu, n)


@pytest.mark.parametrize("name", ["utilization", "graph_task_group_begin", "get_soc_version", "caching_allocator_alloc"])
def test_a_torch_npu_name_that_is_not_emulated_raises_naming_it(name):
    assert f"torch.npu.{name}" in knowledge.npu_names()
    with pytest.raises(NotEmulatedError, match=f"torch.npu.{name} exists in torch_npu but is not emulated"):
        getattr(torch.npu, name)
    with pytest.raises(AttributeError):  # NotEmulatedError is an AttributeError: hasattr() answers False
        getattr(torch.npu, name)


def test_a_name_torch_npu_does_not_have_is_a_plain_attribute_error():
    with pytest.raises(AttributeError) as e:
        _ = torch.npu.nvtx
    assert not isinstance(e.value, NotEmulatedError)
    with pytest.raises(NotEmulatedError, match="torch.npu.memory._snapshot"):
        _ = torch.npu.memory._snapshot


def test_devices():
    assert torch.npu.is_available() and torch.npu.is_initialized()
    assert torch.npu.device_count() >= 2
    assert torch.npu.get_device_name(0) == "Ascend910B3"
    props = torch.npu.get_device_properties("npu:0")
    assert props.total_memory == torch.npu.mem_get_info()[1]
    assert torch.npu.is_bf16_supported()
    torch.npu.synchronize()
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.npu.synchronize(99)
    with torch.npu.device_of(torch.ones(1, device="npu:1")):
        assert torch.npu.current_device() == 1
    assert torch.npu.current_device() == 0


def test_streams_and_events_time_the_host():
    s = torch.npu.Stream()
    assert s.query() and torch.npu.current_stream() == torch.npu.default_stream()
    with torch.npu.stream(s):
        assert torch.npu.current_stream() == s
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        torch.ones(64, 64, device="npu").matmul(torch.ones(64, 64, device="npu"))
        end.record()
        end.synchronize()
    assert torch.npu.current_stream() == torch.npu.default_stream()
    assert start.elapsed_time(end) >= 0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.npu.Event().elapsed_time(torch.npu.Event())
    torch.ones(2, device="npu").record_stream(s)


def test_memory_statistics_follow_allocations():
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    x = torch.empty(1024, 1024, device="npu")  # 4 MiB
    assert torch.npu.memory_allocated() - base == 4 << 20
    view = x[10:20]
    assert torch.npu.memory_allocated() - base == 4 << 20  # views allocate nothing
    y = x * 2
    assert torch.npu.max_memory_allocated() - base == 8 << 20
    del x, view, y
    assert torch.npu.memory_allocated() == base
    assert torch.npu.max_memory_allocated() - base == 8 << 20
    stats = torch.npu.memory_stats()
    assert stats["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated()
    assert torch.npu.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["current"] == base
    assert "allocated" in torch.npu.memory_summary()
    free, total = torch.npu.mem_get_info()
    assert free == total - base


def test_out_of_memory_at_the_emulated_capacity(fresh_report):
    fresh_report.settings.memory_capacity = torch.npu.memory_allocated() + (8 << 20)
    keep = torch.empty(1 << 20, device="npu")  # 4 MiB fits
    with pytest.raises(torch.OutOfMemoryError, match="NPU out of memory"):
        torch.empty(2 << 20, device="npu")  # 8 MiB more does not
    with pytest.raises(torch.OutOfMemoryError):
        torch.ones(4 << 20).npu()
    del keep
    torch.npu.set_per_process_memory_fraction(0.5)
    try:
        assert torch.npu.get_per_process_memory_fraction() == 0.5
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty((1 << 20) + 1024, device="npu")  # just over half the capacity
    finally:
        torch.npu.set_per_process_memory_fraction(1.0)
    assert fresh_report.report()["memory"][0]["ooms"] >= 2


def test_rng_state_and_seeding_are_per_device_and_leave_the_cpu_alone():
    torch.npu.manual_seed(123)
    cpu_state = torch.get_rng_state()
    a = torch.rand(4, device="npu")
    assert torch.equal(torch.get_rng_state(), cpu_state)
    torch.npu.manual_seed(123)
    assert torch.equal(torch.rand(4, device="npu").cpu(), a.cpu())
    state = torch.npu.get_rng_state()
    b = torch.randn(3, device="npu")
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.randn(3, device="npu").cpu(), b.cpu())
    assert torch.npu.initial_seed() == 123
    torch.manual_seed(7)  # seeds every device too, like on hardware
    assert torch.npu.initial_seed() == 7
    assert len(torch.npu.get_rng_state_all()) == torch.npu.device_count()
    with pytest.raises(TypeError):
        torch.npu.set_rng_state([1, 2])


def test_amp_namespace_and_flags():
    assert torch.npu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert torch.npu.is_autocast_enabled()
        assert torch.npu.get_autocast_dtype() == torch.bfloat16
    assert not torch.npu.is_autocast_enabled()
    with torch.autocast("npu"):
        y = torch.mm(torch.ones(2, 2, device="npu"), torch.ones(2, 2, device="npu"))
    assert y.dtype == torch.float16
    assert isinstance(torch.npu.amp.GradScaler(), torch.amp.GradScaler)

    class F(torch.autograd.Function):
        @staticmethod
        @torch.npu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @torch.npu.amp.custom_bwd
        def backward(ctx, g):
            return g * 2

    with torch.npu.amp.autocast():
        assert F.apply(torch.ones(2, device="npu", dtype=torch.float16)).dtype == torch.float32
    assert torch.npu.matmul.allow_hf32 is False and torch.npu.conv.allow_hf32 is True
    torch.npu.matmul.allow_hf32 = True
    torch.npu.matmul.allow_hf32 = False
    torch.npu.set_compile_mode(jit_compile=False)
    assert torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=True)


def test_host_memory_tuning_is_applied_once_and_can_be_refused():
    import os
    import sys

    from ascendify.emulator.device import hostmem

    assert hostmem.wanted({}) is True
    assert hostmem.wanted({hostmem.ENV: "0"}) is False
    assert hostmem.wanted({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False  # the user's own tuning wins
    if sys.platform.startswith("linux") and hostmem.wanted(os.environ):
        assert hostmem.tune() is True  # glibc: set when the emulator was enabled (same answer again)


def test_legacy_typed_tensors_build_convert_and_check_on_the_npu():
    # code migrated from torch.cuda.FloatTensor (PyTorch-GAN's `Tensor = torch.cuda.FloatTensor if cuda else ...`)
    T = torch.npu.FloatTensor
    x = T(2, 3)
    assert x.device.type == "npu" and x.dtype == torch.float32 and tuple(x.shape) == (2, 3)
    assert isinstance(x, T) and not isinstance(x, torch.npu.HalfTensor) and not isinstance(torch.ones(1), T)
    assert T([1.0, 2.0]).tolist() == [1.0, 2.0]
    y = torch.arange(4).type(T)
    assert y.device.type == "npu" and y.dtype == torch.float32 and y.type() == "torch.npu.FloatTensor"
    assert torch.ones(2).type("torch.npu.LongTensor").dtype == torch.int64
    assert torch.ones(2).type() == "torch.FloatTensor"  # CPU tensors as before
    assert torch.ones(2).type(torch.float16).dtype == torch.float16
    with pytest.raises(RuntimeError, match="invalid type"):
        torch.ones(1).type("torch.npu.NoSuchTensor")
