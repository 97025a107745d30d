"""The torch_npu surface: what torch_npu code calls.

- :mod:`.npu`: the module registered as ``torch.npu`` (and ``torch_npu.npu``): devices, memory, RNG, streams,
  events, AMP, flags;
- :mod:`.shim`: a ``torch_npu`` package that exists only while emulating (no real torch_npu installed);
- :mod:`.unsupported`: reports calls of APIs that the official support list marks unsupported on every chip.
"""
