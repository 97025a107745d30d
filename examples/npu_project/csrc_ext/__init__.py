"""Fused building blocks for the GPT trainer on Ascend.

The CUDA project's pieces are ported as a person would port them: the hand-written bias+GELU CUDA kernel
becomes PyTorch (the NPU graph compiler fuses it; no .cu code runs on Ascend), the triton kernel falls back to
its PyTorch reference, and flash-attn becomes ``torch_npu.npu_fusion_attention``.
"""
