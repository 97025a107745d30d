"""``ascendify doctor``: is this machine ready to run PyTorch on an Ascend NPU, and if not, what exactly to fix.

- :mod:`~ascendify.doctor.runner` runs it all (:func:`run_checks`): facts, checks, device checks, one report.
- :mod:`~ascendify.doctor.probe` gathers facts (OS, Python, packages, CANN, driver, npu-smi, environment,
  libraries, an ``import torch_npu`` child process) without importing torch, with timeouts.
- :mod:`~ascendify.doctor.checks` turns facts into check results (ok / warn / fail / skip, what was found, the
  fix), one documented unit per check; :mod:`~ascendify.doctor.matrix` holds the version-matrix verdicts.
- :mod:`~ascendify.doctor.device` runs smoke ops against the CPU and measures TFLOP/s and GB/s on each device.
- :mod:`~ascendify.doctor.explain` matches logs against the known-error knowledge base.
- :mod:`~ascendify.doctor.render` writes the terminal table, JSON, and the bug-report block.

>>> from ascendify.doctor import run_checks
>>> res = run_checks(device=False)
>>> {r["status"] for r in res["checks"]} <= {"ok", "warn", "fail", "skip"}
True
"""

from __future__ import annotations

from ascendify.doctor.model import REGISTRY, CheckResult
from ascendify.doctor.probe import Host, gather
from ascendify.doctor.runner import SCHEMA, run_checks

__all__ = ["REGISTRY", "SCHEMA", "CheckResult", "Host", "gather", "run_checks"]
