"""Custom CUDA kernels for the GPT trainer: a fused bias+GELU extension, a triton kernel, flash-attn glue.

Nothing here is built at import time: ``fused_ops`` compiles the extension on first use.
"""
