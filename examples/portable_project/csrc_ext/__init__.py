"""Fused building blocks for the GPT trainer, written in PyTorch so they run on every device.

The CUDA project's extension (a hand-written bias+GELU kernel), its triton kernel and its flash-attn glue are
replaced by PyTorch operators that each backend already fuses or dispatches to its own kernels
(``torch.compile`` can fuse ``fused_bias_gelu``; SDPA picks the device's flash kernel).
"""
