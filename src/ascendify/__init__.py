"""ascendify: take PyTorch code written for NVIDIA GPUs to Huawei Ascend NPUs, and prove the result is right and fast.

Importing this package is cheap and never imports torch; each capability lives in its own sub-package
(``migrate``, ``emulator``, ``auto``, ...) and is loaded on demand.
"""

__version__ = "0.2.0"
