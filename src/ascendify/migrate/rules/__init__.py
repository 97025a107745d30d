"""The migration rules. Importing this package registers them all in ``RULES`` (ID -> Rule), ordered by ID.

A rule's ID names its family, and the family names its files: rule ASC<d>xx is defined in ``<family>.py`` or
``<family>_<topic>.py`` (the table is :data:`~.base.FAMILIES`; a test holds every rule to it):

====== ============ ==============================================================================
IDs    family       files
====== ============ ==============================================================================
ASC0xx general      ``general`` (the engine's ``import torch_npu``, CUDA tokens no rule claimed)
ASC1xx devices      ``devices``
ASC2xx cuda_api     ``cuda_api``, ``cuda_api_graphs``
ASC3xx distributed  ``distributed``
ASC4xx backends     ``backends``
ASC5xx profiling    ``profiling``
ASC6xx kernels      ``kernels_libraries``, ``kernels_optimizers``, ``kernels_attention``, ``kernels_apex``,
                    ``kernels_imports``, ``kernels_custom``, ``kernels_guards``, ``kernels_extensions``
ASC8xx advice       ``advice``
ASC9xx api_support  ``api_support``
====== ============ ==============================================================================
"""

from __future__ import annotations

from . import (  # noqa: F401
    advice,
    api_support,
    backends,
    cuda_api,
    cuda_api_graphs,
    devices,
    distributed,
    general,
    kernels_apex,
    kernels_attention,
    kernels_custom,
    kernels_extensions,
    kernels_guards,
    kernels_imports,
    kernels_libraries,
    kernels_optimizers,
    profiling,
)
from .base import FAMILIES, REGISTRY, REPORT_ONLY, SAFE, Example, Rule

RULES: dict[str, Rule] = dict(sorted(REGISTRY.items()))

__all__ = ["FAMILIES", "RULES", "Rule", "Example", "SAFE", "REPORT_ONLY", "rules_markdown_table"]


def rules_markdown_table() -> str:
    """The rule table of docs/migrate.md (a test checks that the docs carry exactly this)."""
    rows = ["| ID | name | safety | targets | summary |", "|---|---|---|---|---|"]
    rows += [f"| `{r.id}` | {r.name} | {r.safety} | {', '.join(r.targets)} | {r.summary} |" for r in RULES.values()]
    return "\n".join(rows) + "\n"
