"""torch.npu's memory figures agree with what the npu tensors hold: ``memory_allocated`` equals the sum of the
distinct storages' ``nbytes()``, per device, through every way a tensor comes to exist (factories, copies, ops,
``out=``, in-place resizes, views, modules, gradients, optimizer state); the peak, its reset, ``memory_reserved``,
``memory_stats`` and ``memory_summary`` say the same. Per rank: each rank is its own process with its own counters
(``desync_worker.py``, run by ``test_desync.py``, checks each rank's figures the same way)."""

import gc

import pytest
import torch

import ascendify.emulator as emu


def storage_bytes(tensors, index: int) -> int:
    """The bytes held by the distinct storages of ``tensors`` on npu:``index``."""
    seen = {}
    for t in tensors:
        if t.device == torch.device("npu", index):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


@pytest.fixture
def two_devices(fresh_report):
    if torch.npu.device_count() < 2:
        pytest.skip("needs 2 emulated devices")
    emu.settings.single_device = False
    gc.collect()
    yield


def _made(device: str) -> list:
    a = torch.randn(257, 3, device=device)
    b = torch.ones(1000, dtype=torch.float16).to(device)
    c = a.t().contiguous()  # a copy
    d = a[1:50]  # a view: no new memory
    e = torch.empty_strided((4, 5), (1, 4), device=device, dtype=torch.int64)
    f = torch.empty(0, device=device)
    f.resize_(333)  # grown in place: a new storage
    g = torch.empty(7, device=device)
    torch.add(a[:7, 0], 1, out=g)
    h = torch.cat([a, c.t()])
    lin = torch.nn.Linear(16, 8).to(device)
    x = torch.randn(5, 16, device=device)
    lin(x).sum().backward()
    opt = torch.optim.Adam(lin.parameters())
    opt.step()
    state = [s for st in opt.state.values() for s in st.values() if isinstance(s, torch.Tensor)]
    return [a, b, c, d, e, f, g, h, x, *lin.parameters(), *(p.grad for p in lin.parameters()), *state]


def test_memory_allocated_is_the_sum_of_the_storages_per_device(two_devices):
    torch.npu.reset_peak_memory_stats(0)
    torch.npu.reset_peak_memory_stats(1)
    base = [torch.npu.memory_allocated(i) for i in (0, 1)]
    on0 = _made("npu:0")
    gc.collect()
    held0 = storage_bytes(on0, 0)
    assert held0 > 0
    assert torch.npu.memory_allocated(0) - base[0] == held0
    assert torch.npu.memory_allocated(1) == base[1]  # nothing on npu:1 yet
    on1 = _made("npu:1")
    gc.collect()
    held1 = storage_bytes(on1, 1)
    assert torch.npu.memory_allocated(1) - base[1] == held1
    assert torch.npu.memory_allocated(0) - base[0] == held0  # npu:1's tensors are npu:1's alone
    for i, held in ((0, held0), (1, held1)):
        assert torch.npu.memory_reserved(i) >= torch.npu.memory_allocated(i)
        assert torch.npu.max_memory_allocated(i) >= base[i] + held
        stats = torch.npu.memory_stats(i)
        assert stats["allocated_bytes.all.current"] == torch.npu.memory_allocated(i)
        assert stats["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated(i)
        assert f"npu:{i}" in torch.npu.memory_summary(i)
        assert f"({torch.npu.memory_allocated(i)} bytes;" in torch.npu.memory_summary(i)
    del on0
    gc.collect()
    assert torch.npu.memory_allocated(0) == base[0]  # every storage released
    assert torch.npu.max_memory_allocated(0) >= base[0] + held0  # the peak stays...
    torch.npu.reset_peak_memory_stats(0)
    assert torch.npu.max_memory_allocated(0) == torch.npu.memory_allocated(0) == base[0]  # ...until reset
    assert torch.npu.memory_allocated(1) - base[1] == held1


def test_peak_is_the_highest_sum_of_live_storages():
    gc.collect()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    big = torch.empty(1 << 18, device="npu")  # 1 MiB
    small = torch.empty(1 << 16, device="npu")  # 256 KiB
    del big
    gc.collect()
    also = torch.empty(1 << 17, device="npu")  # 512 KiB: 768 KiB live, below the 1.25 MiB peak
    assert torch.npu.memory_allocated() - base == storage_bytes([small, also], 0)
    assert torch.npu.max_memory_allocated() - base == (1 << 20) + (1 << 18)
    text = torch.npu.memory_summary()
    assert f"({torch.npu.memory_allocated()} bytes;" in text and f"{torch.npu.max_memory_allocated()} bytes)" in text
