"""The npu backward runs with the caller's intra-op thread count, also after torch.set_num_threads() changes it
once the engine's device thread exists (otherwise CPU and npu gradients stop agreeing bit for bit)."""

import torch


def _threads_seen_in_backward(device: str) -> int:
    seen = []
    x = torch.randn(8, 8, device=device, requires_grad=True)
    y = (x * 2).sum()
    x.register_hook(lambda g: seen.append(torch.get_num_threads()) or g)
    y.backward()
    return seen[0]


def test_device_thread_follows_set_num_threads():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert _threads_seen_in_backward("npu") == 2  # the engine's npu thread exists from here on
        torch.set_num_threads(1)
        assert _threads_seen_in_backward("npu") == 1
        torch.set_num_threads(2)
        assert _threads_seen_in_backward("npu") == 2
    finally:
        torch.set_num_threads(before)
