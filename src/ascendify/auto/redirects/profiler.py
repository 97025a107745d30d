"""The profiler's CUDA activity.

``ProfilerActivity.CUDA`` in ``activities`` becomes the target's activity (``PrivateUse1`` for the NPU)
when this torch supports it, otherwise it is dropped (recorded as *no effect*): profiling the CPU side
still works. ``use_cuda=True`` of ``torch.autograd.profiler.profile`` is handled the same way.
"""

from __future__ import annotations

import functools
from typing import Any


def install(s) -> None:
    import torch.autograd.profiler as ap
    import torch.profiler as tp

    _patch_profile(s, tp, _activity_fixer(s, tp))
    _patch_autograd_profile(s, ap)


def _activity_fixer(s, tp):
    """``activities`` -> the same list with ``CUDA`` replaced by the target's activity (or dropped)."""
    rec, t = s.rec, s.target
    CUDA = tp.ProfilerActivity.CUDA
    try:
        supported = set(tp.supported_activities())
    except Exception:
        supported = set()
    repl = tp.ProfilerActivity.PrivateUse1 if t.device_type == "npu" else getattr(
        tp.ProfilerActivity, t.device_type.upper(), None)
    if repl not in supported:
        repl = None

    def fix_activities(acts: Any) -> Any:
        if acts is None:
            return None
        acts = list(acts)
        if CUDA not in acts:
            return acts
        out = [a for a in acts if a != CUDA]
        if repl is not None:
            rec.hit("torch.profiler.ProfilerActivity.CUDA", str(repl))
            if repl not in out:
                out.append(repl)
        else:
            rec.noop("torch.profiler.ProfilerActivity.CUDA", f"no profiler activity for {t.name}: dropped")
        return out

    return fix_activities


def _patch_profile(s, tp, fix_activities) -> None:
    rec, t = s.rec, s.target
    prof = tp.profile
    init = prof.__init__

    @functools.wraps(init)
    def profile_init(self, *args: Any, **kwargs: Any):
        if "activities" in kwargs:
            kwargs["activities"] = fix_activities(kwargs["activities"])
        if kwargs.get("use_cuda"):
            kwargs["use_cuda"] = None
            rec.noop("torch.profiler.profile(use_cuda)", f"no CUDA on {t.name}: dropped")
        return init(self, *args, **kwargs)

    s.patches.set(prof, "__init__", profile_init)


def _patch_autograd_profile(s, ap) -> None:
    rec, t = s.rec, s.target
    aprof = ap.profile
    ainit = aprof.__init__

    @functools.wraps(ainit)
    def aprofile_init(self, *args: Any, **kwargs: Any):
        if kwargs.get("use_cuda"):
            kwargs["use_cuda"] = False
            rec.noop("torch.autograd.profiler.profile(use_cuda)", f"no CUDA on {t.name}: dropped")
        return ainit(self, *args, **kwargs)

    s.patches.set(aprof, "__init__", aprofile_init)
