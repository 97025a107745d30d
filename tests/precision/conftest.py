"""Shared fixtures for the precision tests: the planted-defect models (``models.py``) under a unique module name
(an example project's ``models.py`` may already sit in ``sys.modules`` as ``models``), and a runner for the
planted-defect suite in each setting (``planted_runner.py``)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(name: str, file: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def ref_vector(t):
    """The statistics vector of ``t`` computed in float64 by plain torch, the reference for the kernel's:
    [min, max, sum, norm, nans, infs, fingerprint (8)]."""
    import torch

    from ascendify.precision.stats import fingerprint_plan

    x = t.detach().to(torch.float64)
    nans = int(torch.isnan(x).sum())
    infs = int(torch.isinf(x).sum())
    mn = math.nan if nans else x.min().item()
    mx = math.nan if nans else x.max().item()
    flat = x.reshape(-1)
    pos, w, scale = fingerprint_plan(x.numel(), torch.device("cpu"))
    s = flat if pos is None else flat[pos]
    fp = (w.to(torch.float64).t() @ s) * scale
    return [mn, mx, x.sum().item(), x.norm().item(), nans, infs, *fp.tolist()]


planted_models = _load("ascendify_planted_models", "models.py")
planted_runner = _load("ascendify_planted_runner", "planted_runner.py")

# the test modules import this file as ``precision_conftest``: under the name ``conftest`` they would get
# tests/bench/conftest.py when both folders run in one session (pytest imports each as ``conftest``)
sys.modules["precision_conftest"] = sys.modules[__name__]
