"""The migration rules. Importing this package registers them all in ``RULES`` (ID -> Rule), ordered by ID.

Modules: ``devices`` (ASC1xx), ``cuda_api`` and ``graphs`` (ASC2xx), ``distributed`` (ASC3xx), ``backends`` (ASC4xx),
``tooling`` / ``optimizers`` / ``extensions`` (ASC5xx-6xx: profiler, custom CUDA code, CUDA-only libraries and
compiled extensions), ``kernels_*`` (ASC608-ASC614: CUDA-only kernels rewritten to their NPU / portable equals,
or described), ``advice`` (ASC8xx),
``api_support`` (ASC9xx), ``leftovers`` (ASC099). ASC001 is the engine's ``import torch_npu`` insertion.
"""

from __future__ import annotations

from . import (  # noqa: F401
    advice,
    api_support,
    backends,
    cuda_api,
    devices,
    distributed,
    extensions,
    graphs,
    kernels_apex,
    kernels_attention,
    kernels_custom,
    kernels_guards,
    kernels_imports,
    leftovers,
    optimizers,
    tooling,
)
from .base import REGISTRY, REPORT_ONLY, SAFE, Example, Rule, rule


@rule(
    "ASC001",
    "add-torch-npu-import",
    "`import torch_npu` added once where the converted file needs it",
    hooks=(),
    doc="""
    ## What it does
    Adds `import torch_npu` once to every file that the `--to npu` conversion changed (unless ASC001 is
    ignored), right after the first `torch` import (else after `from __future__` imports or the module
    docstring). A file that already imports torch_npu gets nothing; a second run adds nothing. For
    `--to portable`, `import torch` is added the same way when a converted name needs it.

    ## Why
    `import torch_npu` registers the `npu` device, `torch.npu`, `Tensor.npu()` and the `hccl` backend (recent
    torch versions autoload it, the explicit import keeps the code clear and works on all versions).

    ## Example
    `import torch` followed by `x.cuda()`

    ## Use instead
    `import torch` / `import torch_npu` / `x.npu()`

    ## Fix safety
    Safe.
    """,
    examples=[
        Example('"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\nx.cuda()\n',
                '"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\nimport torch_npu\nx.npu()\n'),
        Example("import torch\nimport torch_npu\nx.cuda()\n", "import torch\nimport torch_npu\nx.npu()\n",
                fires=False),
    ],
)
def _add_import(ctx, node) -> None:  # pragma: no cover - the engine inserts the import
    return None


RULES: dict[str, Rule] = dict(sorted(REGISTRY.items()))

__all__ = ["RULES", "Rule", "Example", "SAFE", "REPORT_ONLY", "rules_markdown_table"]


def rules_markdown_table() -> str:
    """The rule table of docs/migrate.md (a test checks that the docs carry exactly this)."""
    rows = ["| ID | name | safety | targets | summary |", "|---|---|---|---|---|"]
    rows += [f"| `{r.id}` | {r.name} | {r.safety} | {', '.join(r.targets)} | {r.summary} |" for r in RULES.values()]
    return "\n".join(rows) + "\n"
