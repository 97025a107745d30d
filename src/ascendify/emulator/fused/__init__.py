"""torch_npu's fused operators on the emulated npu device, with the NPU's semantics (plain PyTorch math).

One module per operator family; :mod:`.formats` holds the storage-format bookkeeping (``npu_format_cast``,
``get_npu_format``).
"""
