"""CPU stand-ins for CUDA-only kernel libraries (flash_attn, xformers, apex), written from their documented
semantics in plain math (loops and einsum, not SDPA), so that code calling them runs on the CPU and the
migrated code can be compared with it.

``installed()`` puts them in ``sys.modules`` for the duration of a ``with`` block; ``blocked()`` makes the
packages unimportable (the migrated code must not need them).
"""

from __future__ import annotations

import contextlib
import math
import sys
import types

import torch

PACKAGES = ("flash_attn", "flash_attn.flash_attn_interface", "xformers", "xformers.ops", "xformers.ops.fmha",
            "xformers.ops.fmha.attn_bias", "apex", "apex.normalization", "apex.amp")


def attention_bsnd(q, k, v, *, scale=None, causal=None, bias=None, dropout_p=0.0):
    """softmax(q k^T * scale + mask/bias) v on (batch, seq, heads, dim) inputs, in float64; ``causal`` is
    "top-left" or "bottom-right" (key j visible to query i when j <= i, or j <= i + Sk - Sq)."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    rep = hq // hk
    kk = k.double().repeat_interleave(rep, dim=2)
    vv = v.double().repeat_interleave(rep, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), kk) * scale
    if bias is not None:
        s = s + bias.double()
    if causal:
        shift = sk - sq if causal == "bottom-right" else 0
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + shift, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if dropout_p:
        p = torch.nn.functional.dropout(p, dropout_p)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv).to(q.dtype).contiguous()


# -- flash_attn (2.x signatures) -------------------------------------------------------------------------
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    assert tuple(window_size) == (-1, -1) and not softcap and alibi_slopes is None and not return_attn_probs
    return attention_bsnd(q, k, v, scale=softmax_scale, causal="bottom-right" if causal else None,
                          dropout_p=dropout_p)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, **kw):
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, **kw)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, **kw):
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, **kw)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, **kw):
    outs = []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(cq) - 1):
        qs, ks, vs = q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]]
        outs.append(flash_attn_func(qs[None], ks[None], vs[None], dropout_p, softmax_scale, causal, **kw)[0])
    return torch.cat(outs)


# -- xformers ----------------------------------------------------------------------------------------------
class LowerTriangularMask:
    align = "top-left"


class LowerTriangularFromBottomRightMask:
    align = "bottom-right"


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None):
    if isinstance(attn_bias, (LowerTriangularMask, LowerTriangularFromBottomRightMask)):
        return attention_bsnd(query, key, value, scale=scale, causal=attn_bias.align, dropout_p=p)
    return attention_bsnd(query, key, value, scale=scale, bias=attn_bias, dropout_p=p)


# -- apex ----------------------------------------------------------------------------------------------------
class FusedLayerNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        self.shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(self.shape)) if elementwise_affine else None
        self.bias = torch.nn.Parameter(torch.zeros(self.shape)) if elementwise_affine else None

    def forward(self, x):
        dims = tuple(range(-len(self.shape), 0))
        mu = x.mean(dims, keepdim=True)
        var = ((x - mu) ** 2).mean(dims, keepdim=True)
        y = (x - mu) / torch.sqrt(var + self.eps)
        return y * self.weight + self.bias if self.weight is not None else y


class FusedRMSNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        self.shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(self.shape)) if elementwise_affine else None

    def forward(self, x):
        dims = tuple(range(-len(self.shape), 0))
        y = x / torch.sqrt((x * x).mean(dims, keepdim=True) + self.eps)
        return y * self.weight if self.weight is not None else y


def amp_initialize(models, optimizers=None, opt_level="O1", **kw):
    return models if optimizers is None else (models, optimizers)


@contextlib.contextmanager
def amp_scale_loss(loss, optimizers, **kw):
    yield loss  # the fp32 case: apex's scale is then 1 and unscales nothing


def amp_master_params(optimizer):
    for g in optimizer.param_groups:
        yield from g["params"]


def _modules() -> dict[str, types.ModuleType]:
    m = {name: types.ModuleType(name) for name in PACKAGES}
    for name in ("flash_attn", "flash_attn.flash_attn_interface"):
        for fn in (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func):
            setattr(m[name], fn.__name__, fn)
    m["flash_attn"].flash_attn_interface = m["flash_attn.flash_attn_interface"]
    for name in ("xformers.ops", "xformers.ops.fmha"):
        m[name].memory_efficient_attention = memory_efficient_attention
        m[name].LowerTriangularMask = LowerTriangularMask
    bias = m["xformers.ops.fmha.attn_bias"]
    bias.LowerTriangularMask, bias.LowerTriangularFromBottomRightMask = (LowerTriangularMask,
                                                                        LowerTriangularFromBottomRightMask)
    m["xformers"].ops, m["xformers.ops"].fmha, m["xformers.ops.fmha"].attn_bias = (
        m["xformers.ops"], m["xformers.ops.fmha"], bias)
    norm = m["apex.normalization"]
    norm.FusedLayerNorm, norm.FusedRMSNorm = FusedLayerNorm, FusedRMSNorm
    amp = m["apex.amp"]
    amp.initialize, amp.scale_loss, amp.master_params = amp_initialize, amp_scale_loss, amp_master_params
    m["apex"].normalization, m["apex"].amp = norm, amp
    return m


@contextlib.contextmanager
def _swap(entries: dict):
    saved = {name: sys.modules.get(name, _MISSING) for name in entries}
    sys.modules.update(entries)
    try:
        yield
    finally:
        for name, mod in saved.items():
            if mod is _MISSING:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


_MISSING = object()


def installed():
    """The stand-ins importable as flash_attn, xformers.ops, apex."""
    return _swap(_modules())


def blocked():
    """flash_attn, xformers and apex unimportable (``None`` in ``sys.modules`` makes ``import`` raise)."""
    return _swap(dict.fromkeys(PACKAGES))


# -- programs that call the kernels: each makes `out` from inputs on `device` (a name set before it runs) ------
_INPUTS = """
import torch
g = torch.Generator().manual_seed(0)
def rand(*shape):
    return torch.randn(*shape, generator=g).to(device)
"""

RUN_CASES: dict[str, str] = {
    # GQA (4 query heads, 2 key heads) and Sq != Sk: flash-attn aligns causal to the bottom right
    "flash_causal_gqa": """
from flash_attn import flash_attn_func
q, k, v = rand(2, 5, 4, 8), rand(2, 7, 2, 8), rand(2, 7, 2, 8)
out = flash_attn_func(q, k, v, causal=True)
""",
    # positional dropout_p / softmax_scale; the result reshaped with view (it must be contiguous)
    "flash_positional_scale_view": """
import flash_attn
q, k, v = rand(2, 6, 4, 8), rand(2, 6, 4, 8), rand(2, 6, 4, 8)
out = flash_attn.flash_attn_func(q, k, v, 0.0, 0.3).view(2, 6, 32)
""",
    "flash_qkvpacked_causal": """
from flash_attn.flash_attn_interface import flash_attn_qkvpacked_func
qkv = rand(2, 6, 3, 4, 8)
out = flash_attn_qkvpacked_func(qkv, causal=True, deterministic=True)
""",
    # one decoding step against a cache: causal bottom-right lets the single query see every key
    "flash_kvpacked_decode": """
from flash_attn import flash_attn_kvpacked_func
q, kv = rand(2, 1, 4, 8), rand(2, 9, 2, 2, 8)
out = flash_attn_kvpacked_func(q, kv, softmax_scale=None, causal=True)
""",
    "flash_causal_flag_variable": """
from flash_attn import flash_attn_func
is_causal = False
q, k, v = rand(1, 4, 2, 16), rand(1, 4, 2, 16), rand(1, 4, 2, 16)
out = flash_attn_func(q, k, v, causal=is_causal)
""",
    "flash_varlen_causal": """
from flash_attn import flash_attn_varlen_func
cu = torch.tensor([0, 4, 9], dtype=torch.int32, device=device)
q, k, v = rand(9, 4, 8), rand(9, 2, 8), rand(9, 2, 8)
out = flash_attn_varlen_func(q, k, v, cu, cu, 5, 5, causal=True)
""",
    # half precision: the kernels take bf16 and return bf16 (compared within bf16's rounding)
    "flash_bf16_dropout_zero": """
from flash_attn import flash_attn_func
q, k, v = (rand(2, 8, 4, 16).bfloat16() for _ in range(3))
out = flash_attn_func(q, k, v, dropout_p=0.0, causal=True)
assert out.dtype == torch.bfloat16
out = out.float()
""",
    # xformers aligns LowerTriangularMask to the top left
    "xformers_lower_triangular": """
import xformers.ops as xops
q, k, v = rand(2, 5, 4, 8), rand(2, 7, 4, 8), rand(2, 7, 4, 8)
out = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())
""",
    "xformers_bottom_right_scale": """
from xformers.ops import fmha
q, k, v = rand(2, 3, 4, 8), rand(2, 6, 4, 8), rand(2, 6, 4, 8)
out = fmha.memory_efficient_attention(q, k, v, fmha.attn_bias.LowerTriangularFromBottomRightMask(), scale=0.2)
""",
    "xformers_tensor_bias": """
from xformers.ops import memory_efficient_attention
q, k, v = rand(2, 5, 4, 8), rand(2, 5, 4, 8), rand(2, 5, 4, 8)
bias = rand(2, 4, 5, 5)
out = memory_efficient_attention(q, k, v, bias)
""",
    "apex_norms": """
from apex.normalization import FusedLayerNorm, FusedRMSNorm
torch.manual_seed(0)
ln, rms = FusedLayerNorm(8, eps=1e-6).to(device), FusedRMSNorm([4, 8]).to(device)
with torch.no_grad():
    for p in (*ln.parameters(), *rms.parameters()):
        p.copy_(rand(*p.shape))
x = rand(3, 4, 8)
out = rms(ln(x))
""",
    "apex_amp_step": """
from apex import amp
torch.manual_seed(0)
model = torch.nn.Linear(8, 4).to(device)
with torch.no_grad():
    model.weight.copy_(rand(4, 8))
    model.bias.copy_(rand(4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = amp.initialize(model, opt, opt_level="O1")
x, y = rand(16, 8), rand(16, 4)
for _ in range(3):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    with amp.scale_loss(loss, opt) as scaled_loss:
        scaled_loss.backward()
    torch.nn.utils.clip_grad_norm_(amp.master_params(opt), 0.5)
    opt.step()
out = model.weight.detach()
""",
}
# comparison tolerances other than float32's
TOLERANCE = {"flash_bf16_dropout_zero": {"atol": 1.6e-2, "rtol": 1.6e-2}}
# cases the portable target lists instead of rewriting
NOT_PORTABLE: tuple[str, ...] = ()


def program(name: str) -> str:
    return _INPUTS + RUN_CASES[name]


def run(code: str, device: str = "cpu"):
    """Execute ``code`` (a program above, or its migration) and return its ``out`` on the CPU."""
    ns = {"device": device, "__name__": "kernel_case"}
    exec(compile(code, "<kernel-case>", "exec"), ns)
    return ns["out"].detach().cpu()
