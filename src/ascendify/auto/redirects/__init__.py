"""One module per concern; each has ``install(session)`` that patches through ``session.patches``.

Order matters only in one place: :mod:`.devices` runs first so the others capture the real ``torch.device``.
"""

from __future__ import annotations

MODULES = (
    "devices",
    "factories",
    "tensors",
    "data_parallel",
    "cuda_api",
    "accelerator",
    "amp",
    "distributed",
    "backends",
    "profiler",
    "compile",
    "spawn",
)
