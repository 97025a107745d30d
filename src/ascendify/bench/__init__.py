"""``ascendify bench``: training and inference speed, memory and MFU on the CPU, CUDA, an NPU or the emulated NPU.

- :mod:`ascendify.bench.harness`: :class:`BenchConfig`, :func:`run_one` -> :class:`Record`, :func:`sweep`,
  :func:`find_max_batch` (the batch sweep that survives OOM);
- :mod:`ascendify.bench.device`: the device under test (synchronisation, event timing, peak memory, OOM);
- :mod:`ascendify.bench.loader`: the data pipeline bench (DataLoader settings, CPU vs device augmentation);
- :mod:`ascendify.bench.output`: terminal table, JSON, CSV, plots, and ``bench compare``.

See ``docs/bench.md``.
"""

from ascendify.bench.device import EMULATED_LABEL, BenchDevice, DeviceError, resolve
from ascendify.bench.harness import BenchConfig, Record, find_max_batch, run_one, sweep

__all__ = ["EMULATED_LABEL", "BenchConfig", "BenchDevice", "DeviceError", "Record", "find_max_batch",
           "resolve", "run_one", "sweep"]
