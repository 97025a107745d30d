"""``ascendify bench``: training and inference speed, memory and MFU on the CPU, CUDA, an NPU or the emulated NPU.

- :mod:`ascendify.bench.harness`: :class:`BenchConfig`, :func:`run_one` -> :class:`Record`, :func:`sweep`,
  :func:`find_max_batch` (the batch sweep that survives OOM); :func:`bench_module`: any ``nn.Module`` object on
  one batch of any nesting (``model(*args, **kwargs)``), with a loss function or :func:`default_loss`;
- :mod:`ascendify.bench.device`: the device under test (:meth:`BenchDevice.open`; synchronisation, event timing,
  peak memory, OOM);
- :mod:`ascendify.bench.loader`: the data pipeline bench (DataLoader settings, CPU vs device augmentation);
- :mod:`ascendify.bench.render`: terminal table, JSON, CSV, plots, and ``bench compare``.

See ``docs/bench.md``.
"""

from ascendify.bench.device import EMULATED_LABEL, BenchDevice, DeviceError
from ascendify.bench.harness import (
    BenchConfig,
    Record,
    bench_module,
    default_loss,
    find_max_batch,
    first_float_tensor,
    run_one,
    sweep,
)

__all__ = ["EMULATED_LABEL", "BenchConfig", "BenchDevice", "DeviceError", "Record", "bench_module", "default_loss",
           "find_max_batch", "first_float_tensor", "run_one", "sweep"]
