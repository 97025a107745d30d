"""Python side of the fused bias+GELU CUDA extension.

The extension is JIT-compiled with ``torch.utils.cpp_extension.load`` the first time ``fused_bias_gelu`` is
called (importing this module builds nothing). If an ahead-of-time build (``setup.py``) is installed, it is
used instead.
"""

from __future__ import annotations

import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_ext = None


def _load_extension():
    global _ext
    if _ext is None:
        try:
            import fused_bias_gelu_cuda as ext  # built by setup.py
        except ImportError:
            from torch.utils.cpp_extension import load

            ext = load(
                name="fused_bias_gelu_cuda",
                sources=[os.path.join(_HERE, "csrc", "fused_bias_gelu.cpp"),
                         os.path.join(_HERE, "csrc", "fused_bias_gelu_kernel.cu")],
                extra_cuda_cflags=["-O3", "--use_fast_math"],
                verbose=False,
            )
        _ext = ext
    return _ext


class FusedBiasGeLU(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return _load_extension().forward(x.contiguous(), bias.contiguous())

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        dx = _load_extension().backward(grad.contiguous(), x, bias)
        return dx, dx.reshape(-1, dx.size(-1)).sum(0)


def fused_bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``gelu(x + bias)`` (tanh approximation) in one CUDA kernel; falls back to PyTorch off the GPU."""
    if not x.is_cuda:
        return torch.nn.functional.gelu(x + bias, approximate="tanh")
    return FusedBiasGeLU.apply(x, bias)
