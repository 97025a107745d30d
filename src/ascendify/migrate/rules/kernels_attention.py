"""CUDA-only attention kernels (flash-attn, xformers) -> ``torch_npu.npu_fusion_attention`` (npu) or
``F.scaled_dot_product_attention`` (portable).

A call is rewritten only when every argument has a meaning on the target; otherwise it stays as it was and
is listed with the reason (never half-rewritten). The ``from flash_attn import ...`` statements whose names
are all rewritten go away with them (``kernels_imports.py``).

Layouts: flash-attn and xformers take ``(batch, seqlen, nheads, headdim)``, torch_npu's ``"BSND"``; the varlen
functions take ``(total_tokens, nheads, headdim)``, torch_npu's ``"TND"`` with the cumulative sequence ends
(``cu_seqlens[1:]``) as lists. SDPA takes ``(batch, nheads, seqlen, headdim)``: the portable spelling transposes
in and out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .. import portable
from ..model import MANUAL
from ..portable import NPU_CAUSAL_MASK as NPU_CAUSAL_MASK_HELPER
from ..portable import helper_source
from .base import NPU, PORTABLE, SAFE, Example, rule

FA = "torch_npu.npu_fusion_attention"
SDPA = "torch.nn.functional.scaled_dot_product_attention"
CAUSAL_LOWER_RIGHT = "torch.nn.attention.bias.causal_lower_right"
# torch_npu's causal modes take a 2048 x 2048 upper-triangular bool mask (True = masked out) and derive the
# real pattern from it: sparse_mode 2 = top-left aligned, 3 = bottom-right aligned (flash-attn >= 2.1's causal).
NPU_CAUSAL_MASK = "{torch}.triu({torch}.ones(2048, 2048, dtype={torch}.bool, device={dev}), diagonal=1)"

# flash-attn functions: positional parameters (beyond them every argument must be a keyword), and the kind.
FLASH_FUNCS: dict[str, tuple[str, tuple[str, ...]]] = {
    "flash_attn_func": ("bsnd", ("q", "k", "v", "dropout_p", "softmax_scale", "causal")),
    "flash_attn_kvpacked_func": ("kv", ("q", "kv", "dropout_p", "softmax_scale", "causal")),
    "flash_attn_qkvpacked_func": ("qkv", ("qkv", "dropout_p", "softmax_scale", "causal")),
    "flash_attn_varlen_func": ("tnd", ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                       "max_seqlen_k", "dropout_p", "softmax_scale", "causal")),
}
FLASH_MODULES = ("flash_attn", "flash_attn.flash_attn_interface")

# keyword -> the values that change nothing (the argument is dropped); anything else cannot be mapped
_NEUTRAL = {
    "window_size": ((-1, -1), [-1, -1]),
    "softcap": (0, 0.0),
    "alibi_slopes": (None,),
    "return_attn_probs": (False,),
    "block_table": (None,),
    "deterministic": (False, True),  # backward reproducibility only: no numerical contract to keep
    "return_softmax": (False,),  # flash-attn 1.x spelling of return_attn_probs
    "op": (None,),  # xformers: which kernel
}
_WHY = {
    "window_size": "sliding-window attention (window_size) has no exact mapping here",
    "softcap": "logit soft-capping (softcap) has no NPU or SDPA equivalent",
    "alibi_slopes": "ALiBi slopes have no NPU or SDPA equivalent in one call",
    "return_attn_probs": "return_attn_probs=True returns the attention probabilities, which neither target gives",
    "return_softmax": "return_softmax=True returns the attention probabilities, which neither target gives",
    "block_table": "a paged KV cache (block_table) needs torch_npu.npu_fused_infer_attention_score",
    "op": "a forced xformers kernel (op=...)",
}


def _literal(node: ast.AST):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def simple(node: ast.AST) -> bool:
    """An expression that may be written twice: a name, an attribute chain, a subscript of those by constants."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return simple(node.value)
    if isinstance(node, ast.Subscript):
        idx = node.slice
        parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        ok = all(isinstance(p, ast.Constant) or isinstance(p, ast.Slice) and all(
            x is None or isinstance(x, ast.Constant) for x in (p.lower, p.upper, p.step)) for p in parts)
        return ok and simple(node.value)
    return False


def atom(ctx, node: ast.AST) -> str:
    """``node``'s text (with edits inside it), in parentheses unless it binds tighter than ``.attr``."""
    text = ctx.hole(node)
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Tuple)) or (
            isinstance(node, ast.Constant) and not isinstance(node.value, (int, float))):
        return text
    return f"({text})"


@dataclass
class Mapped:
    """An attention call's arguments, read against the library's signature."""

    args: dict[str, ast.AST] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def bind(call: ast.Call, params: tuple[str, ...], keywords: tuple[str, ...]) -> Mapped:
    m = Mapped()
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        m.problems.append("arguments passed with * or **: their meaning is not visible here")
        return m
    if len(call.args) > len(params):
        m.problems.append(f"{len(call.args)} positional arguments: beyond `{params[-1]}` their meaning depends on "
                          "the library version")
        return m
    m.args.update(zip(params, call.args, strict=False))
    for kw in call.keywords:
        name = kw.arg
        if name in params or name in keywords:
            m.args[name] = kw.value
        elif name in _NEUTRAL:
            ok, value = _literal(kw.value)
            if not ok or value not in _NEUTRAL[name]:
                m.problems.append(_WHY.get(name, f"{name}={ctx_free_text(kw.value)}"))
        else:
            m.problems.append(f"unknown keyword `{name}`")
    return m


def ctx_free_text(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every parsed node
        return "..."


def is_const(node: ast.AST | None, *values) -> bool:
    return node is None or isinstance(node, ast.Constant) and node.value in values and type(node.value) is not str


class Unmappable(Exception):
    """A call whose arguments the target cannot express: listed with this reason, never half-rewritten."""


@dataclass
class Attention:
    """What one attention call computes, as the text of its parts.

    ``q``/``k``/``v``: BSND (or TND) expressions; ``kv``/``qkv``: a packed input split by ``unbind`` (npu) or
    ``permute`` (portable); ``causal``: None, True, or the text of a simple boolean; ``align``: "top-left" or
    "bottom-right"; ``bias``: an additive float bias tensor (xformers).
    """

    kind: str  # bsnd | kv | qkv | tnd
    q: ast.AST | None = None
    k: ast.AST | None = None
    v: ast.AST | None = None
    packed: ast.AST | None = None  # kv or qkv
    dropout: ast.AST | None = None
    scale: ast.AST | None = None
    causal: ast.AST | bool | None = None
    align: str = "bottom-right"
    bias: ast.AST | None = None
    cu_q: ast.AST | None = None
    cu_k: ast.AST | None = None
    gqa: bool = True  # key/value heads may be fewer than query heads (flash-attn; xformers' 4-D inputs: never)


def _causal(node: ast.AST | None) -> ast.AST | bool | None:
    if node is None or is_const(node, False, 0):
        return None
    if is_const(node, True, 1):
        return True
    if simple(node):
        return node
    raise Unmappable("causal is an expression: assign it to a name first")


def _need_simple(node: ast.AST, what: str) -> None:
    if not simple(node):
        raise Unmappable(f"`{what}` is an expression that the rewrite needs more than once: assign it to a "
                         "name first")


# -- npu: torch_npu.npu_fusion_attention -------------------------------------------------------------------
def npu_text(ctx, a: Attention) -> str:
    torch = ctx.ref("torch")
    kw: list[str] = []
    if a.kind == "qkv":
        _need_simple(a.packed, "qkv")
        qkv = ctx.hole(a.packed)
        inputs = [f"*{atom(ctx, a.packed)}.unbind(2)"]
        heads, dim, dev = f"{qkv}.shape[3]", f"{qkv}.shape[-1]", f"{qkv}.device"
    else:
        _need_simple(a.q, "q")
        q = ctx.hole(a.q)
        if a.kind == "kv":
            inputs = [q, f"*{atom(ctx, a.packed)}.unbind(2)"]
        else:
            inputs = [q, ctx.hole(a.k), ctx.hole(a.v)]
        heads = f"{q}.shape[1]" if a.kind == "tnd" else f"{q}.shape[2]"
        dim, dev = f"{q}.shape[-1]", f"{q}.device"
    layout = '"TND"' if a.kind == "tnd" else '"BSND"'
    if a.bias is not None:
        raise Unmappable("an additive attention bias")  # handled by the caller (SDPA spelling)
    if a.causal is not None:
        helper = ctx.helper(portable.NPU_CAUSAL_MASK)  # made once per device, not at every call
        mask = f"{helper}({dev})" if helper else NPU_CAUSAL_MASK.format(torch=torch, dev=dev)
        mode = "3" if a.align == "bottom-right" else "2"
        if a.causal is True:
            kw += [f"atten_mask={mask}"]
            sparse = f"sparse_mode={mode}"
        else:
            c = ctx.hole(a.causal)
            kw += [f"atten_mask={mask} if {c} else None"]
            sparse = f"sparse_mode={mode} if {c} else 0"
    else:
        sparse = ""
    kw.append(f"scale={_npu_scale(ctx, a.scale, dim)}")
    if not is_const(a.dropout, 0, 0.0):
        kw.append(f"keep_prob=1 - {_minus_operand(ctx, a.dropout)}")
    if a.kind == "tnd":
        kw.append(f"actual_seq_qlen={atom(ctx, a.cu_q)}[1:].tolist()")
        kw.append(f"actual_seq_kvlen={atom(ctx, a.cu_k)}[1:].tolist()")
    if sparse:
        kw.append(sparse)
    return f"{ctx.ref(FA)}({', '.join(inputs + [heads, layout] + kw)})[0]"


def _npu_scale(ctx, scale: ast.AST | None, dim: str) -> str:
    """torch_npu's scale defaults to 1.0, flash-attn's and xformers' (None) to 1/sqrt(head dim)."""
    default = f"{dim} ** -0.5"
    if scale is None or is_const(scale, None):
        return default
    if isinstance(scale, ast.Constant) and isinstance(scale.value, (int, float)):
        return ctx.hole(scale)
    return f"{atom(ctx, scale)} or {default}"  # None (and only None: a scale of 0 means nothing) -> default


def _minus_operand(ctx, node: ast.AST) -> str:
    """``node`` as the right operand of ``1 - ...``."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) or (
            isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value >= 0):
        return ctx.hole(node)
    return f"({ctx.hole(node)})"


# -- portable: F.scaled_dot_product_attention --------------------------------------------------------------
def sdpa_text(ctx, a: Attention) -> str:
    """SDPA on (B, N, S, D) views; the result transposed back to (B, S, N, D) and made contiguous (as
    flash-attn's is: code reshapes it with ``view``)."""
    if a.kind == "tnd":
        return varlen_text(ctx, a)
    kw: list[str] = []
    t12 = ".transpose(1, 2)"
    if a.kind == "qkv":
        inputs = [f"*{atom(ctx, a.packed)}.permute(2, 0, 3, 1, 4)"]
        q_len = k_len = None
        gqa = None
    else:
        q = atom(ctx, a.q)
        if a.kind == "kv":
            inputs = [q + t12, f"*{atom(ctx, a.packed)}.permute(2, 0, 3, 1, 4)"]
            k_node, k_heads = a.packed, "shape[3]"
        else:
            inputs = [q + t12, atom(ctx, a.k) + t12, atom(ctx, a.v) + t12]
            k_node, k_heads = a.k, "shape[2]"
        q_len, k_len = (a.q, "shape[1]"), (k_node, "shape[1]")
        gqa = (a.q, k_node, k_heads)
    if a.bias is not None:
        kw.append(f"attn_mask={ctx.hole(a.bias)}")
    elif a.causal is not None:
        if a.align == "top-left" or a.kind == "qkv":  # SDPA's is_causal is top-left aligned
            kw.append("is_causal=True" if a.causal is True else f"is_causal={ctx.hole(a.causal)}")
        else:  # flash-attn >= 2.1: the last query sees every key (differs from top-left when Sq != Sk)
            _need_simple(q_len[0], "q")
            _need_simple(k_len[0], "k")
            mask = (f"{_causal_lower_right(ctx)}({ctx.hole(q_len[0])}.{q_len[1]}, "
                    f"{ctx.hole(k_len[0])}.{k_len[1]})")
            kw.append(f"attn_mask={mask}" if a.causal is True else f"attn_mask={mask} if {ctx.hole(a.causal)} "
                      "else None")
    if not is_const(a.dropout, 0, 0.0):
        kw.append(f"dropout_p={ctx.hole(a.dropout)}")
    if a.scale is not None and not is_const(a.scale, None):
        kw.append(f"scale={ctx.hole(a.scale)}")  # None means 1/sqrt(head dim) in SDPA too
    if gqa is not None and a.gqa:
        qn, kn, kh = gqa
        _need_simple(qn, "q")
        _need_simple(kn, "k")
        kw.append(f"enable_gqa={ctx.hole(kn)}.{kh} != {ctx.hole(qn)}.shape[2]")
    return f"{ctx.ref(SDPA)}({', '.join(inputs + kw)}){t12}.contiguous()"


def varlen_text(ctx, a: Attention) -> str:
    """torch has no packed variable-length attention on every device: the portable output defines
    ``varlen_attention`` once (an SDPA call per sequence) and calls it."""
    name = ctx.helper(portable.VARLEN_ATTENTION)
    if name is None:
        raise Unmappable(f"the file uses the name {portable.VARLEN_ATTENTION} itself (the portable rewrite "
                         "defines a helper of that name): use --to npu, or rename it")
    args = [ctx.hole(n) for n in (a.q, a.k, a.v, a.cu_q, a.cu_k)]
    if not is_const(a.dropout, 0, 0.0):
        args.append(f"dropout_p={ctx.hole(a.dropout)}")
    if a.scale is not None and not is_const(a.scale, None):
        args.append(f"scale={ctx.hole(a.scale)}")
    if a.causal is not None:
        args.append("causal=True" if a.causal is True else f"causal={ctx.hole(a.causal)}")
    return f"{name}({', '.join(args)})"


def _causal_lower_right(ctx) -> str:
    """``torch.nn.attention.bias.causal_lower_right``: ``import torch`` does not load that module."""
    if not any(q == "torch.nn.attention.bias" or q.startswith("torch.nn.attention.bias.")
               for q in ctx.imports.names.values()) and "torch.nn.attention.bias" not in ctx.need_imports:
        ctx.need_imports.append("torch.nn.attention.bias")
    return ctx.imports.local_for(CAUSAL_LOWER_RIGHT) or CAUSAL_LOWER_RIGHT


def rewrite(ctx, call: ast.Call, a: Attention, api: str, *, sdpa_on_npu: bool = False) -> None:
    """Record the rewrite of ``call``, or list it with the reason it cannot be rewritten."""
    try:
        if ctx.target == NPU and not sdpa_on_npu:
            text = npu_text(ctx, a)
            target = FA
        else:
            text = sdpa_text(ctx, a)
            target = SDPA
    except Unmappable as e:
        unmappable(ctx, call, api, str(e))
        return
    ctx.change(call, [ctx.replace(call, text)], api=api, message=f"{api} -> {target}")


def unmappable(ctx, call: ast.Call, api: str, reason: str) -> None:
    ctx.report(call, api=api, severity=MANUAL, reason=f"left as it was: {reason}",
               tip="rewrite by hand with torch_npu.npu_fusion_attention (npu) or "
                   "torch.nn.functional.scaled_dot_product_attention")


@rule(
    "ASC608",
    "flash-attn-call",
    "`flash_attn_func` / `flash_attn_varlen_func` / packed variants: flash-attn's CUDA attention kernels",
    safety=SAFE,
    hooks=("call",),
    tokens=("flash_attn",),
    doc="""
    ## What it does
    Rewrites `flash_attn.flash_attn_func`, `flash_attn_kvpacked_func`, `flash_attn_qkvpacked_func` and
    `flash_attn_varlen_func` calls:
    - `--to npu`: `torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", ...)[0]` (varlen: layout
      `"TND"`, `head_num=q.shape[1]`, `actual_seq_qlen=cu_seqlens_q[1:].tolist()`, `actual_seq_kvlen=...`;
      `max_seqlen_*` are not needed). `softmax_scale` becomes `scale` (torch_npu's default is 1.0, so the
      default 1/sqrt(head dim) is written out: `q.shape[-1] ** -0.5`); `dropout_p` becomes `keep_prob=1 - p`;
      `causal=True` becomes `atten_mask=` a 2048x2048 upper-triangular bool mask with `sparse_mode=3`
      (bottom-right aligned, as flash-attn >= 2.1 aligns it; torch_npu derives the real mask from it);
      the mask comes from `npu_causal_mask(q.device)`, a small function the output defines once after its
      imports, which makes it once per device (not at every call of every layer).
      The packed inputs are split with `unbind(2)`; GQA (fewer key/value heads) is native.
    - `--to portable`: `F.scaled_dot_product_attention` on `(B, N, S, D)` views (`transpose(1, 2)` in and
      out, `.contiguous()` like flash-attn's output), `enable_gqa` where the key heads differ,
      causal as `torch.nn.attention.bias.causal_lower_right(Sq, Sk)` (bottom-right, like flash-attn; the
      qkv-packed function has Sq == Sk and gets `is_causal=True`). torch has no packed variable-length
      attention on every device: a varlen call becomes a call of `varlen_attention(q, k, v, cu_seqlens_q,
      cu_seqlens_k, ...)`, a small function the output defines once after its imports (one SDPA call per
      sequence; a file that uses that name itself gets the call listed).
    `flash_attn_with_kvcache` (decoding against an in-place, possibly paged cache) is listed with
    `torch_npu.npu_fused_infer_attention_score` as the way.
    Calls with arguments that have no meaning on the target (`window_size` other than `(-1, -1)`,
    `alibi_slopes`, `softcap`, `return_attn_probs=True`, `block_table`, an unknown keyword, `*args`, more
    positional arguments than `q, k, v, dropout_p, softmax_scale, causal`) are left as they were and listed
    with the reason, never half-rewritten. `deterministic=` is dropped (backward reproducibility only).

    ## Why
    flash-attn ships CUDA kernels only; it does not install on Ascend. `npu_fusion_attention` is the NPU's
    FlashAttention (what transformers calls for `flash_attention_2` on an NPU); SDPA is torch's own fused
    attention on every device.

    ## Example
    `out = flash_attn_func(q, k, v, dropout_p=0.1, causal=True)`

    ## Use instead
    `out = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", atten_mask=npu_causal_mask(q.device),
    scale=q.shape[-1] ** -0.5, keep_prob=1 - 0.1, sparse_mode=3)[0]`

    ## Fix safety
    Safe: same shapes, same values within the dtype's rounding (the tests run both). Inputs that the rewrite
    repeats (`q` for its shape and device) must be names or attribute chains; other calls are listed.
    """,
    examples=[
        Example(
            "from flash_attn import flash_attn_func\nimport torch\nout = flash_attn_func(q, k, v, causal=True)\n",
            "import torch\nimport torch_npu\n\n\n" + helper_source(NPU_CAUSAL_MASK_HELPER) + "\n\n"
            "out = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\",\n"
            "                                     atten_mask=npu_causal_mask(q.device),\n"
            "                                     scale=q.shape[-1] ** -0.5,\n"
            "                                     sparse_mode=3)[0]\n",
        ),
        Example(
            "from flash_attn import flash_attn_func\nimport torch.nn.functional as F\n"
            "o = flash_attn_func(q, k, v, 0.1, softmax_scale=0.125)\n",
            "import torch.nn.functional as F\no = F.scaled_dot_product_attention(q.transpose(1, 2), "
            "k.transpose(1, 2), v.transpose(1, 2), dropout_p=0.1, scale=0.125, "
            "enable_gqa=k.shape[2] != q.shape[2]).transpose(1, 2).contiguous()\n",
            target=PORTABLE,
        ),
        Example(
            "import flash_attn\nimport torch\nout = flash_attn.flash_attn_varlen_func(q, k, v, cu, cu, m, m)\n",
            "import torch\nimport torch_npu\nout = torch_npu.npu_fusion_attention(q, k, v, q.shape[1], \"TND\",\n"
            "                                     scale=q.shape[-1] ** -0.5,\n"
            "                                     actual_seq_qlen=cu[1:].tolist(),\n"
            "                                     actual_seq_kvlen=cu[1:].tolist())[0]\n",
        ),
        Example("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, window_size=(128, 0))\n",
                None),
        Example("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, return_attn_probs=True)\n",
                None, target=PORTABLE),
    ],
    emits_npu=(FA,),
)
def flash_attn_call(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)  # the rule only runs on files that mention flash_attn
    if q is None:
        return
    module, _, name = q.rpartition(".")
    if name == "flash_attn_with_kvcache" and module in FLASH_MODULES and ctx.claim(call.func):
        ctx.report(call, api=q, severity=MANUAL, reason="left as it was: decoding against a KV cache (updated in "
                   "place, paged with block_table) is torch_npu.npu_fused_infer_attention_score's job, with its "
                   "own cache layout", tip="torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, "
                   "num_heads=..., input_layout=\"BSND\", actual_seq_lengths_kv=..., block_table=...)")
        return
    if name not in FLASH_FUNCS or module not in FLASH_MODULES or not ctx.claim(call.func):
        return
    kind, params = FLASH_FUNCS[name]
    m = bind(call, params, ())
    if m.problems:
        unmappable(ctx, call, q, "; ".join(m.problems))
        return
    args = m.args
    missing = [p for p in params[: {"bsnd": 3, "kv": 2, "qkv": 1, "tnd": 7}[kind]] if p not in args]
    if missing:
        unmappable(ctx, call, q, f"missing argument {missing[0]}")
        return
    try:
        a = Attention(kind, q=args.get("q"), k=args.get("k"), v=args.get("v"),
                      packed=args.get("kv", args.get("qkv")), dropout=args.get("dropout_p"),
                      scale=args.get("softmax_scale"), causal=_causal(args.get("causal")),
                      cu_q=args.get("cu_seqlens_q"), cu_k=args.get("cu_seqlens_k"))
    except Unmappable as e:
        unmappable(ctx, call, q, str(e))
        return
    rewrite(ctx, call, a, q)


XFORMERS_FUNCS = ("xformers.ops.memory_efficient_attention", "xformers.ops.fmha.memory_efficient_attention")
_XF_PARAMS = ("query", "key", "value", "attn_bias", "p", "scale")
_XF_CAUSAL = {"LowerTriangularMask": "top-left", "LowerTriangularFromBottomRightMask": "bottom-right"}


def _xformers_bias(ctx, node: ast.AST | None) -> tuple[str | None, ast.AST | None]:
    """("causal", None) with an alignment, ("tensor", node), or (None, None); raises Unmappable."""
    if node is None or is_const(node, None):
        return None, None
    if isinstance(node, ast.Call):
        q = ctx.qname(node.func) or ""
        if q.startswith("xformers."):
            kind = q.rpartition(".")[2]
            if kind in _XF_CAUSAL and not node.args and not node.keywords:
                return _XF_CAUSAL[kind], None
            raise Unmappable(f"attention bias `{kind}` has no mapping (only LowerTriangularMask(), "
                             "LowerTriangularFromBottomRightMask() and tensors)")
    if _builds_xformers_bias(ctx):
        raise Unmappable("attn_bias may be an xformers bias object built elsewhere: pass it inline, or a tensor")
    return "tensor", node


def _builds_xformers_bias(ctx) -> bool:
    cached = getattr(ctx, "_xf_bias_objects", None)
    if cached is None:
        cached = False
        for c in ctx.index.calls:
            q = ctx.qname(c.func) or ""
            if q.startswith("xformers.") and any(part.endswith(("Mask", "Bias")) or part == "attn_bias"
                                                 for part in q.split(".")):
                cached = True
                break
        ctx._xf_bias_objects = cached
    return cached


@rule(
    "ASC609",
    "xformers-attention",
    "`xformers.ops.memory_efficient_attention`: xformers' CUDA attention kernels",
    safety=SAFE,
    hooks=("call",),
    tokens=("xformers",),
    doc="""
    ## What it does
    Rewrites `xformers.ops.memory_efficient_attention(q, k, v, attn_bias, p, scale)` (inputs
    `(batch, seqlen, heads, dim)`, xformers' BMHK = torch_npu's BSND):
    - `--to npu`: `torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", scale=..., keep_prob=1 - p)[0]`;
      `attn_bias=LowerTriangularMask()` becomes the 2048x2048 causal mask with `sparse_mode=2` (top-left, as
      xformers aligns it), `LowerTriangularFromBottomRightMask()` `sparse_mode=3`. An additive bias tensor
      becomes SDPA's float `attn_mask` (torch_npu runs SDPA natively; `npu_fusion_attention`'s `pse` is scaled
      with the scores, a different formula).
    - `--to portable`: `F.scaled_dot_product_attention` on transposed views, `is_causal=True` for
      `LowerTriangularMask()`, `attn_mask=` the bias tensor.
    Other bias kinds (block-diagonal, paged, a bias object built elsewhere), `op=` and `output_dtype=` are
    left as they were and listed.

    ## Why
    xformers has no NPU build (`NotImplementedError: No operator found for this attention` on `npu`).

    ## Example
    `out = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())`

    ## Use instead
    `out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
    is_causal=True).transpose(1, 2).contiguous()`

    ## Fix safety
    Safe: same shapes and values within the dtype's rounding. A bias held in a variable is taken for a tensor
    unless the file builds xformers bias objects (then the call is listed). 5-D (grouped, BMGHK) inputs are
    not recognised.
    """,
    examples=[
        Example(
            "import torch\nimport xformers.ops as xops\n"
            "out = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())\n",
            "import torch\nout = torch.nn.functional.scaled_dot_product_attention("
            "q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)"
            ".contiguous()\n",
            target=PORTABLE,
        ),
        Example(
            "import torch\nfrom xformers.ops import memory_efficient_attention\n"
            "out = memory_efficient_attention(q, k, v, p=0.1, scale=s)\n",
            "import torch\nimport torch_npu\nout = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\",\n"
            "                                     scale=s or q.shape[-1] ** -0.5,\n"
            "                                     keep_prob=1 - 0.1)[0]\n",
        ),
        Example("import xformers.ops as xops\nb = xops.fmha.BlockDiagonalMask.from_seqlens([3, 4])\n"
                "out = xops.memory_efficient_attention(q, k, v, attn_bias=b)\n", None),
    ],
    emits_npu=(FA,),
)
def xformers_attention(ctx, call: ast.Call) -> None:
    q = ctx.qname(call.func)  # the rule only runs on files that mention xformers
    if q not in XFORMERS_FUNCS or not ctx.claim(call.func):
        return
    m = bind(call, _XF_PARAMS, ())
    if m.problems:
        unmappable(ctx, call, q, "; ".join(m.problems))
        return
    args = m.args
    if not all(p in args for p in ("query", "key", "value")):
        unmappable(ctx, call, q, "missing query, key or value")
        return
    try:
        kind, bias = _xformers_bias(ctx, args.get("attn_bias"))
    except Unmappable as e:
        unmappable(ctx, call, q, str(e))
        return
    if kind in _XF_CAUSAL.values():  # the mask object goes with the call (ASC604 must not list it)
        for n in ast.walk(args["attn_bias"]):
            ctx.claim(n)
    a = Attention("bsnd", q=args["query"], k=args["key"], v=args["value"], dropout=args.get("p"),
                  scale=args.get("scale"), causal=True if kind in ("top-left", "bottom-right") else None,
                  align=kind if kind in ("top-left", "bottom-right") else "bottom-right", bias=bias)
    a.gqa = False
    rewrite(ctx, call, a, q, sdpa_on_npu=bias is not None)

