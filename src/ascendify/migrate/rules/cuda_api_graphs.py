"""Graph mode: ``torch.compile`` backends and options that name CUDA graphs or Triton.

``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` / ``torch.cuda.make_graphed_callables`` are rewritten by
ASC203 (``torch.npu.NPUGraph`` / ``torch.npu.graph`` / ``torch.npu.make_graphed_callables``); these rules
handle what ASC203 cannot see: strings given to ``torch.compile``.
"""

from __future__ import annotations

import ast

from ..model import MANUAL, Edit
from .base import NPU, REPORT_ONLY, Example, rule

# torch_npu registers the dynamo backends ``npu``, ``npugraph_ex`` and ``npugraphs``.
BACKENDS = {"cudagraphs": "npugraphs"}

# torch.compile modes with no NPU meaning, and why.
MODES = {
    "max-autotune": "autotunes Triton GPU kernels and records CUDA graphs; on Ascend the default inductor "
                    "(or backend=\"npugraph_ex\") is the equivalent",
    "max-autotune-no-cudagraphs": "autotunes Triton GPU kernels; on Ascend the default inductor is the equivalent",
    "reduce-overhead": "records CUDA graphs (inductor's cudagraph trees); on Ascend use backend=\"npugraphs\" "
                       "(or torch.npu.NPUGraph) for graph replay",
}
# dynamo backends of other vendors' compilers, which torch_npu's process does not run on the NPU, and why
FOREIGN_BACKENDS = {
    "tensorrt": "compiles with NVIDIA TensorRT (CUDA only)",
    "torch_tensorrt": "compiles with NVIDIA TensorRT (CUDA only)",
    "openxla": "compiles with XLA for TPUs/GPUs (torch_xla)",
    "ipex": "compiles with Intel Extension for PyTorch (Intel CPUs/GPUs)",
}
# prefixes of inductor ``options`` keys that only mean something for CUDA/Triton
OPTION_PREFIXES = ("triton.", "cuda.", "max_autotune", "coordinate_descent_tuning")


def _is_compile(ctx, call: ast.Call) -> bool:
    return isinstance(call, ast.Call) and ctx.qname(call.func) in ("torch.compile", "torch._dynamo.optimize")


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@rule(
    "ASC207",
    "compile-cudagraphs-backend",
    "`torch.compile(..., backend=\"cudagraphs\")`",
    targets=(NPU,),
    hooks=("call",),
    tokens=('compile', 'optimize'),
    doc="""
    ## What it does
    Rewrites the dynamo backend `"cudagraphs"` given to `torch.compile` (or `torch._dynamo.optimize`) to
    torch_npu's `"npugraphs"` for `--to npu`.

    ## Why
    The `cudagraphs` backend records and replays CUDA graphs; torch_npu registers the dynamo backends `npu`,
    `npugraph_ex` and `npugraphs`, the last being the NPU graph equivalent (`torch.npu.NPUGraph` underneath).
    `torch.cuda.CUDAGraph`, `torch.cuda.graph` and `torch.cuda.make_graphed_callables` themselves are rewritten by
    ASC203 (`torch.npu.NPUGraph`, `torch.npu.graph`, `torch.npu.make_graphed_callables`).

    ## Example
    `model = torch.compile(model, backend="cudagraphs")`

    ## Use instead
    `model = torch.compile(model, backend="npugraphs")`

    ## Fix safety
    Safe: the backend name is a string literal; a backend computed at run time is left alone.
    """,
    examples=[
        Example('import torch\nm = torch.compile(m, backend="cudagraphs")\n',
                'import torch\nimport torch_npu\nm = torch.compile(m, backend="npugraphs")\n'),
        Example('import torch\nm = torch._dynamo.optimize("cudagraphs")(m)\n',
                'import torch\nimport torch_npu\nm = torch._dynamo.optimize("npugraphs")(m)\n'),
        Example('import torch\nm = torch.compile(m, backend="inductor")\n', None),
        Example('import torch\nm = torch.compile(m, backend=name)\n', None),
    ],
)
def compile_backend(ctx, call: ast.AST) -> None:
    if not _is_compile(ctx, call):
        return
    node = _kw(call, "backend")
    if node is None and ctx.qname(call.func) == "torch._dynamo.optimize" and call.args:
        node = call.args[0]
    name = _str(node)
    if name not in BACKENDS or not ctx.claim(node):
        return
    a, b = ctx.span(node)
    new = BACKENDS[name]
    ctx.change(node, [Edit(a, b, ctx.src.text[a:b].replace(name, new))], api=f"torch.compile(backend={name!r})",
               message=f"backend {name!r} -> {new!r}")


@rule(
    "ASC208",
    "compile-cuda-option",
    "`torch.compile` modes and options with no NPU meaning (Triton, CUDA graphs)",
    safety=REPORT_ONLY,
    targets=(NPU,),
    hooks=("call", "chain"),
    tokens=("compile", "optimize", "inductor"),
    doc="""
    ## What it does
    Lists `torch.compile(..., mode=...)` with `"max-autotune"`, `"max-autotune-no-cudagraphs"` or
    `"reduce-overhead"`, `options={...}` keys for Triton/CUDA (`"triton.cudagraphs"`, `"triton.*"`,
    `"cuda.*"`, `"max_autotune*"`, `"coordinate_descent_tuning"`), the same settings made on
    `torch._inductor.config` (`torch._inductor.config.triton.cudagraphs = True`), and backends of other vendors'
    compilers (`"tensorrt"`, `"torch_tensorrt"`, `"openxla"`, `"ipex"`), each with the reason.

    ## Why
    These modes and options tune Triton GPU kernels or record CUDA graphs. On Ascend inductor generates NPU code
    through torch_npu and graph replay is `npugraphs` / `torch.npu.NPUGraph`; the CUDA settings do nothing or fail.

    ## Example
    `torch.compile(model, mode="max-autotune")`, `torch.compile(model, options={"triton.cudagraphs": True})`

    ## Use instead
    The default mode (or `backend="npugraph_ex"`); `backend="npugraphs"` for graph replay.

    ## Fix safety
    Report only.
    """,
    examples=[
        Example('import torch\nm = torch.compile(m, mode="max-autotune")\n', None),
        Example('import torch\nm = torch.compile(m, options={"triton.cudagraphs": True})\n', None),
        Example('import torch\nm = torch.compile(m, backend="tensorrt")\n', None),
        Example('import torch._inductor.config\ntorch._inductor.config.coordinate_descent_tuning = True\n', None),
    ],
)
def compile_option(ctx, call: ast.AST) -> None:
    if isinstance(call, ast.Attribute):
        _config_setting(ctx, call)
        return
    if not _is_compile(ctx, call):
        return
    backend = _str(_kw(call, "backend"))
    if backend in FOREIGN_BACKENDS:
        ctx.report(call, api=f"torch.compile(backend={backend!r})", severity=MANUAL,
                   reason=f"backend {backend!r} {FOREIGN_BACKENDS[backend]}: not on Ascend",
                   tip="use the default inductor or backend=\"npugraph_ex\" (torch_npu)")
    mode = _str(_kw(call, "mode"))
    if mode in MODES:
        ctx.report(call, api=f"torch.compile(mode={mode!r})", severity=MANUAL,
                   reason=f"mode {mode!r} {MODES[mode]}", tip="drop the mode on Ascend")
    opts = _kw(call, "options")
    if isinstance(opts, ast.Dict):
        for k in opts.keys:
            key = _str(k)
            if key and key.startswith(OPTION_PREFIXES):
                ctx.report(call, api=f"torch.compile(options={{{key!r}: ...}})", severity=MANUAL,
                           reason=f"inductor option {key!r} configures Triton/CUDA code generation: "
                                  "no meaning on Ascend",
                           tip="drop it; use backend=\"npugraphs\" for graph replay")


def _config_setting(ctx, node: ast.Attribute) -> None:
    q = ctx.qname(node) or ""
    prefix = "torch._inductor.config."
    if not q.startswith(prefix) or not q[len(prefix):].startswith(OPTION_PREFIXES) or not ctx.claim(node):
        return
    key = q[len(prefix):]
    ctx.report(node, api=q, severity=MANUAL,
               reason=f"inductor setting {key!r} configures Triton/CUDA code generation: no meaning on Ascend",
               tip="drop it on Ascend; use backend=\"npugraphs\" for graph replay")
