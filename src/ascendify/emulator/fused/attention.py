"""torch_npu's attention operators: ``npu_fusion_attention`` (training, with its backward and
``npu_fusion_attention_grad``), ``npu_prompt_flash_attention``, ``npu_incre_flash_attention`` and
``npu_fused_infer_attention_score`` (inference).

The math is FlashAttentionScore's (CANN, ``pse_type`` 1 as torch_npu passes it)::

    out = Dropout(Softmax(Mask(scale * (query @ key^T + pse), atten_mask)), keep_prob) @ value

- ``atten_mask`` True (1) = masked out. Masked scores are *selected* to the most negative float before the
  softmax, so a row with every position masked averages all values uniformly (no NaN), as on the NPU.
- ``sparse_mode`` 0 (``atten_mask`` and the ``pre_tockens``/``next_tockens`` band, aligned top-left), 1 (all of
  ``atten_mask``), 2 (causal, top-left), 3 (causal, bottom-right), 4 (band, bottom-right), 5/6 (prefix: causal
  bottom-right plus the first ``prefix[b]`` keys), 7/8 (varlen outer split of a mode 3 / mode 2 problem: every
  sequence causal bottom-right / top-left, except the last / first non-empty one, which is the band of mode 4). Modes 2, 3, 4 and 6 take the optimised 2048x2048 ``triu(ones, 1)`` mask and derive the pattern from
  it; without ``atten_mask`` every mode computes full attention.
- Layouts ``BSH``, ``SBH``, ``BSND``, ``BNSD`` and ``TND`` (varlen: ``actual_seq_qlen``/``actual_seq_kvlen``
  are cumulative ends; trailing zeros drop batches); GQA when the query has a multiple of key/value's heads.
- A row with every key masked averages the values; with the invalid-row correction (``inner_precise`` 2 or 3,
  and by itself where the kernel sees such rows: sparse_mode 3/7 with Sq > Skv) it comes out as zeros.
- Returns ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``; softmax_max/sum are
  float32 ``[B, N, Sq, 8]`` (TND ``[T, N, 8]``) with the row statistics repeated over the last axis.

Two paths, the same numbers within rounding:

- the fast path (no dropout, no ``pse``, equal head dims, no row masked entirely) runs the CPU's fused
  flash-attention kernel (``aten._scaled_dot_product_flash_attention_for_cpu``), which never holds a whole score
  matrix (full and top-left causal attention need no mask tensor; other masks go in as one additive mask, as
  SDPA's own CPU path passes them). It returns the row log-sum-exp instead of max and sum: softmax_max then holds the log-sum-exp
  and softmax_sum ones (``max + log(sum)`` is exact, which is what the backward and ring-attention merges use);
- the reference path (every other case) is a custom autograd function that computes blocks of
  :data:`BLOCK` query rows at a time, forward and backward (recomputing the scores from the saved row
  statistics, as FlashAttention does), so it holds at most ``BLOCK x Skv`` scores per head.

Dropout draws from the emulated device's generator: the op returns the seed it used (offset 0), and
``npu_fusion_attention_grad`` given that seed and offset regenerates the same mask, as on the NPU (the mask
differs from an NPU's Philox stream).
"""

from __future__ import annotations

import dataclasses

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device

MAX_TOKENS = 2147483647
BLOCK = 256  # query rows per block on the reference path
COMPRESSED = 2048  # the side of the optimised causal/band mask of sparse modes 2, 3, 4 (6: 3072 x 2048)
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
_FA = "npu_fusion_attention"


# ----------------------------------------------------------------------------------------------- masks
@dataclasses.dataclass
class Mask:
    """What is masked, for one (sub-)problem of Sq queries and Skv keys.

    ``explicit``: a bool tensor broadcastable to [B, N, Sq, Skv] (True = masked) or None; ``lo``/``hi``: the
    band of key minus query index that is kept (None = unbounded); ``prefix``: per batch, keys below it are
    kept whatever the band says."""

    explicit: torch.Tensor | None = None
    lo: int | None = None
    hi: int | None = None
    prefix: list[int] | None = None

    def is_full(self, sq: int, skv: int) -> bool:
        return (self.explicit is None and self.prefix is None and (self.lo is None or self.lo <= -(sq - 1))
                and (self.hi is None or self.hi >= skv - 1))

    def is_top_left_causal(self, sq: int, skv: int) -> bool:
        return (self.explicit is None and self.prefix is None and self.hi == 0
                and (self.lo is None or self.lo <= -(sq - 1)))

    def block(self, r0: int, r1: int, skv: int, device, heads) -> torch.Tensor | None:
        """The masked positions of query rows r0..r1, as a bool tensor broadcastable to the 5-D
        [B, Nkv, G, rows, Skv] score block (``heads``: (Nkv, G))."""
        out = None
        if self.lo is not None or self.hi is not None:
            d = torch.arange(skv, device=device)[None, :] - torch.arange(r0, r1, device=device)[:, None]
            band = None
            if self.hi is not None:
                band = d > self.hi
            if self.lo is not None:
                low = d < self.lo
                band = low if band is None else band | low
            if self.prefix is not None:
                keep = torch.arange(skv, device=device)[None, :] < torch.tensor(
                    self.prefix, device=device)[:, None]  # [B, Skv]
                band = band[None] & ~keep[:, None, :]  # [B, rows, Skv]
                out = band[:, None, None]
            else:
                out = band
        if self.explicit is not None:
            e = _heads5(self.explicit[:, :, r0:r1], *heads)
            out = e if out is None else out | e
        return out


def _heads5(t: torch.Tensor, nkv: int, g: int) -> torch.Tensor:
    """A 4-D [b, n, ...] tensor (n = 1 or Nkv * G) as 5-D [b, Nkv or 1, G or 1, ...]."""
    if t.shape[1] == 1:
        return t.unsqueeze(2)
    return t.reshape(t.shape[0], nkv, g, *t.shape[2:])


# ----------------------------------------------------------------------------------------------- dropout
def _draw_seed(device: torch.device) -> int:
    """A fresh dropout seed from ``device``'s generator (the emulated npu's, or the CPU's)."""
    if device.type == "npu":
        from ascendify.emulator.device import rng

        g = rng.generator(device.index or 0)
    else:
        g = torch.default_generator
    return int(torch.randint(1, 2**62, (1,), generator=g))


def _keep_blocks(seed: int, offset: int):
    """The generator whose stream gives the dropout keep-masks of (seed, offset), block after block."""
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + offset) & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def _keep(g: torch.Generator, shape, keep_prob: float, device) -> torch.Tensor:
    return (torch.rand(shape, generator=g) < keep_prob).to(device)


# ----------------------------------------------------------------------------------------------- kernels
def _block_scores(qb, k5, pse, r0, r1, scale, mask: Mask, heads):
    """Scores of query rows r0..r1 (5-D, compute dtype) with the mask selected to the most negative value,
    and the masked positions (or None)."""
    s = torch.matmul(qb, k5.transpose(-1, -2))
    if pse is not None:
        s = s + _heads5(pse[:, :, r0:r1] if pse.shape[2] != 1 else pse, *heads).to(s.dtype)
    s = s * scale
    masked = mask.block(r0, r1, s.shape[-1], s.device, heads)
    if masked is not None:
        s = s.masked_fill(masked, torch.finfo(s.dtype).min)
    return s, masked


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _forward(q, k, v, pse, mask: Mask, scale: float, keep_prob: float, seed: int, offset: int, keeps=None):
    """Reference forward on BNSD tensors: (out in q's dtype, row max, row sum), statistics [B, N, Sq] float.
    With dropout, ``keeps`` (a list) receives each block's keep-mask (bool) for the backward."""
    b, n, sq, _ = q.shape
    nkv = k.shape[1]
    g = n // nkv
    heads = (nkv, g)
    ct = _compute_dtype(q)
    q5 = q.to(ct).reshape(b, nkv, g, sq, q.shape[-1])
    k5 = k.to(ct).unsqueeze(2)
    v5 = v.to(ct).unsqueeze(2)
    gen = _keep_blocks(seed, offset) if keep_prob < 1 else None
    outs, maxes, sums = [], [], []
    for r0 in range(0, sq, BLOCK):
        r1 = min(r0 + BLOCK, sq)
        s, _ = _block_scores(q5[:, :, :, r0:r1], k5, pse, r0, r1, scale, mask, heads)
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - m)
        l_ = p.sum(-1, keepdim=True)
        if gen is not None:
            keep = _keep(gen, p.shape, keep_prob, p.device)
            if keeps is not None:
                keeps.append(keep)
            p = p * keep / keep_prob
        outs.append(torch.matmul(p, v5) / l_)
        maxes.append(m)
        sums.append(l_)
    out = torch.cat(outs, 3).reshape(b, n, sq, v.shape[-1]).to(q.dtype)
    return out, torch.cat(maxes, 3).reshape(b, n, sq), torch.cat(sums, 3).reshape(b, n, sq)


def _reduce_to(grad: torch.Tensor, shape) -> torch.Tensor:
    """Sum ``grad`` over the axes that were broadcast from ``shape``."""
    dims = [i for i, (a, s) in enumerate(zip(grad.shape, shape, strict=True)) if s == 1 and a != 1]
    return grad.sum(dims, keepdim=True) if dims else grad


def _backward(q, k, v, pse, mask: Mask, scale, keep_prob, seed, offset, dout, out, rmax, rsum, keeps=None):
    """Reference backward on BNSD tensors from the saved row max and sum [B, N, Sq] (kept apart: a fully masked
    row's max is the most negative float, which swallows a log-sum-exp): (dq, dk, dv, dpse or None), each in its
    input's dtype. Dropout keep-masks come from ``keeps`` (the forward's) or are regenerated from seed/offset."""
    b, n, sq, d = q.shape
    nkv, skv, dv_ = k.shape[1], k.shape[2], v.shape[-1]
    g = n // nkv
    heads = (nkv, g)
    ct = _compute_dtype(q)
    q5 = q.to(ct).reshape(b, nkv, g, sq, d)
    k5 = k.to(ct).unsqueeze(2)
    v5 = v.to(ct).unsqueeze(2)
    do5 = dout.to(ct).reshape(b, nkv, g, sq, dv_)
    max5 = rmax.to(ct).reshape(b, nkv, g, sq, 1)
    sum5 = rsum.to(ct).reshape(b, nkv, g, sq, 1)
    delta = (do5 * out.to(ct).reshape(b, nkv, g, sq, dv_)).sum(-1, keepdim=True)
    gen = _keep_blocks(seed, offset) if keep_prob < 1 and not keeps else None
    dq = []
    dk = torch.zeros(b, nkv, g, skv, d, dtype=ct, device=q.device)
    dv = torch.zeros(b, nkv, g, skv, dv_, dtype=ct, device=q.device)
    dpse = [] if pse is not None and pse.requires_grad else None
    for r0 in range(0, sq, BLOCK):
        r1 = min(r0 + BLOCK, sq)
        qb = q5[:, :, :, r0:r1]
        s, masked = _block_scores(qb, k5, pse, r0, r1, scale, mask, heads)
        p = torch.exp(s - max5[:, :, :, r0:r1]) / sum5[:, :, :, r0:r1]
        dob = do5[:, :, :, r0:r1]
        dp = torch.matmul(dob, v5.transpose(-1, -2))
        if keep_prob < 1:
            keep = (keeps[r0 // BLOCK] if keeps else _keep(gen, p.shape, keep_prob, p.device)) / keep_prob
            dv += torch.matmul((p * keep).transpose(-1, -2), dob)
            dp = dp * keep
        else:
            dv += torch.matmul(p.transpose(-1, -2), dob)
        ds = p * (dp - delta[:, :, :, r0:r1])
        if masked is not None:
            ds = ds.masked_fill(masked, 0.0)
        ds = ds * scale
        dq.append(torch.matmul(ds, k5))
        dk += torch.matmul(ds.transpose(-1, -2), qb)
        if dpse is not None:
            dpse.append(ds)
    dq_ = torch.cat(dq, 3).reshape(b, n, sq, d).to(q.dtype)
    dk_ = dk.sum(2).to(k.dtype)
    dv_t = dv.sum(2).to(v.dtype)
    dpse_ = None
    if dpse is not None:
        full = torch.cat(dpse, 3).reshape(b, n, sq, skv)
        dpse_ = _reduce_to(full, pse.shape).to(pse.dtype)
    return dq_, dk_, dv_t, dpse_


class _Attention(torch.autograd.Function):
    """The reference path with autograd (blockwise forward and recomputing backward)."""

    @staticmethod
    def forward(ctx, q, k, v, pse, mask, scale, keep_prob, seed, offset):
        keeps = [] if keep_prob < 1 else None  # bool, a quarter of the probabilities SDPA's math path keeps
        out, m, l_ = _forward(q, k, v, pse, mask, scale, keep_prob, seed, offset, keeps)
        ctx.save_for_backward(q, k, v, pse, out, m, l_)
        ctx.args = (mask, scale, keep_prob, seed, offset, keeps)
        ctx.mark_non_differentiable(m, l_)
        return out, m, l_

    @staticmethod
    def backward(ctx, dout, _dm, _dl):
        q, k, v, pse, out, m, l_ = ctx.saved_tensors
        mask, scale, keep_prob, seed, offset, keeps = ctx.args
        dq, dk, dv, dpse = _backward(q, k, v, pse, mask, scale, keep_prob, seed, offset, dout, out, m, l_, keeps)
        return dq, dk, dv, dpse, None, None, None, None, None


def _dense_mask(mask: Mask, sq: int, skv: int, device) -> torch.Tensor | None:
    """Every masked position as one 4-D bool tensor broadcastable to [B, N, Sq, Skv] (None: nothing masked)."""
    out = None
    if mask.lo is not None or mask.hi is not None:
        d = torch.arange(skv, device=device)[None, :] - torch.arange(sq, device=device)[:, None]
        band = torch.zeros(sq, skv, dtype=torch.bool, device=device)
        if mask.hi is not None:
            band |= d > mask.hi
        if mask.lo is not None:
            band |= d < mask.lo
        if mask.prefix is not None:
            keep = torch.arange(skv, device=device)[None, :] < torch.tensor(mask.prefix, device=device)[:, None]
            out = (band[None] & ~keep[:, None, :])[:, None]
        else:
            out = band[None, None]
    if mask.explicit is not None:
        out = mask.explicit if out is None else out | mask.explicit
    return out


def _fast(q, k, v, pse, mask: Mask, keep_prob):
    """``(is_causal, float attn_mask)`` for the CPU flash kernel when it computes exactly this problem, else None.

    The kernel takes an additive mask; it agrees with the NPU's select-to-minimum as long as no row is masked
    entirely (such a row is uniform on the NPU, NaN-free here only on the reference path)."""
    sq, skv = q.shape[2], k.shape[2]
    if keep_prob < 1 or pse is not None or q.shape[-1] != v.shape[-1] or q.dtype == torch.float64:
        return None
    if mask.is_full(sq, skv):
        return False, None
    if mask.is_top_left_causal(sq, skv):
        return True, None
    dense = _dense_mask(mask, sq, skv, q.device)
    if bool(dense.all(-1).any()):
        return None
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    return False, torch.where(dense, float("-inf"), zero)


def empty_rows(mask: Mask, sq: int, skv: int, device) -> torch.Tensor | None:
    """The query rows whose every key is masked, broadcastable to [B, N, Sq, 1] (None: there are none)."""
    dense = _dense_mask(mask, sq, skv, device)
    if dense is None:
        return None
    rows = dense.all(-1, keepdim=True)
    return rows if bool(rows.any()) else None


def _zero_empty(inner_precise: int, sparse_mode: int, sq: int, skv: int) -> bool:
    """Invalid-row correction: rows masked entirely come out as zeros. ``inner_precise`` 2 and 3 ask for it;
    the kernel turns it on by itself where it sees such rows, e.g. sparse_mode 3 with Sq > Skv."""
    return inner_precise in (2, 3) or (sparse_mode in (3, 7) and sq > skv)


def attend(q, k, v, pse, mask: Mask, scale: float, keep_prob: float, seed: int = 0, offset: int = 0,
           zero_empty: bool = False):
    """Attention on BNSD tensors (GQA by head count): (out, row max, row sum) with autograd through ``out``.
    ``zero_empty``: rows masked entirely give zeros (else the average of the values, as the NPU without its
    invalid-row correction)."""
    fast = _fast(q, k, v, pse, mask, keep_prob)
    if fast is not None:
        causal, float_mask = fast
        g = q.shape[1] // k.shape[1]
        if g > 1:
            k = k.repeat_interleave(g, 1)
            v = v.repeat_interleave(g, 1)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=float_mask, scale=scale)
        lse = lse.detach().float()
        return out, lse, torch.ones_like(lse)
    out, m, l_ = _Attention.apply(q, k, v, pse, mask, scale, keep_prob, seed, offset)
    if zero_empty and (rows := empty_rows(mask, q.shape[2], k.shape[2], q.device)) is not None:
        out = out.masked_fill(rows, 0.0)
    return out, m, l_


# ----------------------------------------------------------------------------------------------- layouts
@dataclasses.dataclass
class Shapes:
    b: int
    n: int
    nkv: int
    sq: int
    skv: int
    d: int
    dv: int


def _to_bnsd(x: torch.Tensor, layout: str, n: int) -> torch.Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        return x.view(x.shape[0], x.shape[1], n, -1).transpose(1, 2)
    return x.view(x.shape[0], x.shape[1], n, -1).permute(1, 2, 0, 3)  # SBH


def _from_bnsd(o: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return o.contiguous()
    if layout == "BSND":
        return o.transpose(1, 2).contiguous()
    if layout == "BSH":
        return o.transpose(1, 2).reshape(o.shape[0], o.shape[2], -1)
    return o.permute(2, 0, 1, 3).reshape(o.shape[2], o.shape[0], -1)  # SBH


def _shapes(op, query, key, value, head_num: int, layout: str) -> Shapes:
    check(head_num > 0, op, f"head_num must > 0, but got {head_num}")
    rank = 3 if layout in ("BSH", "SBH", "TND") else 4
    for arg, t in (("query", query), ("key", key), ("value", value)):
        check(t.dim() == rank, op, f"The shapes of the input {arg} should be {rank} dimensional for input_layout "
                                   f"{layout}, but got {t.dim()}-dimensional")
    if layout in ("BSH", "SBH"):
        bi, si = (0, 1) if layout == "BSH" else (1, 0)
        h = query.shape[2]
        check(h % head_num == 0, op, f"the hidden size of query ({h}) must be a multiple of head_num ({head_num})")
        d = h // head_num
        check(key.shape[2] % d == 0, op, f"the hidden size of key ({key.shape[2]}) must be a multiple of the head "
                                         f"dim {d} (query hidden {h} / head_num {head_num})")
        nkv = key.shape[2] // d
        check(nkv > 0 and value.shape[2] % nkv == 0, op,
              f"the hidden size of value ({value.shape[2]}) must be a multiple of key's head number {nkv}")
        sh = Shapes(query.shape[bi], head_num, nkv, query.shape[si], key.shape[si], d, value.shape[2] // nkv)
        kb, vb, ks, vs = key.shape[bi], value.shape[bi], key.shape[si], value.shape[si]
    elif layout in ("BSND", "BNSD"):
        ni, si = (2, 1) if layout == "BSND" else (1, 2)
        check(query.shape[ni] == head_num, op, f"head_num ({head_num}) must equal the N axis of query "
                                               f"({query.shape[ni]}) for input_layout {layout}")
        sh = Shapes(query.shape[0], head_num, key.shape[ni], query.shape[si], key.shape[si], query.shape[3],
                    value.shape[3])
        check(value.shape[ni] == sh.nkv, op, f"key and value must have the same head number, but got "
                                             f"{sh.nkv} and {value.shape[ni]}")
        check(key.shape[3] == sh.d, op, f"the head dim of query ({sh.d}) and key ({key.shape[3]}) must be equal")
        kb, vb, ks, vs = key.shape[0], value.shape[0], key.shape[si], value.shape[si]
    else:  # TND
        check(query.shape[1] == head_num, op, f"head_num ({head_num}) must equal the N axis of query "
                                              f"({query.shape[1]}) for input_layout TND")
        sh = Shapes(1, head_num, key.shape[1], query.shape[0], key.shape[0], query.shape[2], value.shape[2])
        check(value.shape[1] == sh.nkv and value.shape[0] == key.shape[0], op,
              f"key {tuple(key.shape)} and value {tuple(value.shape)} must agree on T and N")
        check(key.shape[2] == sh.d, op, f"the head dim of query ({sh.d}) and key ({key.shape[2]}) must be equal")
        kb = vb = 1
        ks = vs = key.shape[0]
    check(kb == sh.b and vb == sh.b, op, f"query, key and value must have the same batch size, but got "
                                         f"{sh.b}, {kb} and {vb}")
    check(ks == vs, op, f"key and value must have the same sequence length, but got {ks} and {vs}")
    check(1 <= sh.d <= 768, op, f"the head dim D of query and key must be in [1, 768], but got {sh.d}")
    check(sh.dv <= sh.d, op, f"the head dim of value ({sh.dv}) must not exceed that of query and key ({sh.d})")
    check(sh.nkv > 0 and sh.n % sh.nkv == 0, op,
          f"the head number of query ({sh.n}) must be a multiple of that of key and value ({sh.nkv})")
    check(sh.n <= 256, op, f"the head number of query must be in [1, 256], but got {sh.n}")
    return sh


def _cumulative(op: str, arg: str, seq, total: int) -> list[int]:
    """``actual_seq_qlen``-style cumulative ends, trailing zeros (skipped batches) removed."""
    check(seq is not None and len(seq) > 0, op, f"input_layout TND needs {arg} (cumulative sequence ends)")
    ends = [int(x.item() if isinstance(x, torch.Tensor) else x) for x in (seq.tolist() if isinstance(
        seq, torch.Tensor) else seq)]
    while len(ends) > 1 and ends[-1] == 0:
        ends.pop()
    prev = 0
    for e in ends:
        check(e >= prev, op, f"{arg} must be cumulative (non-decreasing) sequence ends, but got {ends}")
        prev = e
    check(ends[-1] <= total, op, f"the last value of {arg} ({ends[-1]}) exceeds the T axis ({total})")
    return ends


def _mask_for(op, atten_mask, sparse_mode, pre, nxt, prefix, sq, skv, b) -> Mask:
    """The :class:`Mask` of one problem (a batch, or one varlen sequence) of Sq x Skv."""
    if atten_mask is None:
        return Mask()
    shift = skv - sq
    if sparse_mode == 0:
        return Mask(_explicit(op, atten_mask, sq, skv, b),
                    None if pre >= MAX_TOKENS else -pre, None if nxt >= MAX_TOKENS else nxt)
    if sparse_mode == 1:
        return Mask(_explicit(op, atten_mask, sq, skv, b))
    if sparse_mode in (2, 8):  # 8 (varlen outer split): its first sequence is a band, chosen by the caller
        return Mask(hi=0)
    if sparse_mode in (3, 7):  # 7: its last sequence is a band
        return Mask(hi=shift)
    if sparse_mode == 4:
        return Mask(lo=None if pre >= MAX_TOKENS else shift - pre, hi=None if nxt >= MAX_TOKENS else shift + nxt)
    # 5 and 6: prefix
    check(prefix is not None and len(prefix) == b, op,
          f"sparse_mode {sparse_mode} needs prefix with one value per batch ({b}), but got {prefix}")
    return Mask(hi=shift, prefix=[int(p) for p in prefix])


def _explicit(op, m: torch.Tensor, sq: int, skv: int, b: int) -> torch.Tensor:
    """A full ``atten_mask`` (BNSS, B1SS, 11SS or SS) as a 4-D bool tensor."""
    if m.dim() == 2:
        m = m[None, None]
    check(m.dim() == 4 and m.shape[-2:] == (sq, skv) and m.shape[0] in (1, b), op,
          f"atten_mask must be of shape BNSS, B1SS, 11SS or SS with S = ({sq}, {skv}) and B = {b}, but got "
          f"{tuple(m.shape)}")
    return m if m.dtype == torch.bool else m.bool()


def _check_compressed(op: str, atten_mask, sparse_mode: int) -> None:
    if atten_mask is None or sparse_mode not in (2, 3, 4, 6, 7, 8):
        return
    want = (3072, 2048) if sparse_mode == 6 else (COMPRESSED, COMPRESSED)
    check(tuple(atten_mask.shape[-2:]) == want and atten_mask.numel() == want[0] * want[1], op,
          f"sparse_mode {sparse_mode} takes the optimised atten_mask of shape {list(want)} (triu(ones, 1)), "
          f"but got {list(atten_mask.shape)}")


def _check_common(op, query, key, value, pse, atten_mask, keep_prob, layout, sparse_mode):
    check(isinstance(layout, str) and layout.upper() in LAYOUTS, op,
          f"The input_layout should be BSH/SBH/BNSD/BSND/TND(case-insensitive), but got {layout}")
    check(0 < keep_prob <= 1, op, f"The keep_prob value must be in range of (0, 1], but got {keep_prob}")
    if layout.upper() == "TND":
        check(0 <= sparse_mode <= 8 and sparse_mode != 5, op,
              f"The sparse_mode value must be in range of [0,4] or [6,8] for input_layout TND, but got {sparse_mode}")
    else:
        check(0 <= sparse_mode <= 6, op, f"The sparse_mode value must be in range of [0,6], but got {sparse_mode}")
    dtype_in(query, FLOATS, op, "query")
    for arg, t in (("key", key), ("value", value), ("pse", pse)):
        if t is not None:
            check(t.dtype == query.dtype, op, f"the dtype of {arg} ({t.dtype}) must equal that of query "
                                              f"({query.dtype})")
    if atten_mask is not None:
        check(atten_mask.dtype in (torch.bool, torch.uint8), op,
              f"the dtype of atten_mask must be bool or uint8, but got {atten_mask.dtype}")
    same_device(op, query, key=key, value=value, pse=pse, atten_mask=atten_mask)


def _stats(x: torch.Tensor) -> torch.Tensor:
    """Row statistics [..., S] as torch_npu's float32 [..., S, 8]."""
    return x.float().unsqueeze(-1).expand(*x.shape, 8).contiguous()


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1., keep_prob=1., pre_tockens=MAX_TOKENS,
                         next_tockens=MAX_TOKENS, inner_precise=0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                         softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    op = _FA
    _check_common(op, query, key, value, pse, atten_mask, keep_prob, input_layout, sparse_mode)
    layout = input_layout.upper()
    check(padding_mask is None, op, "padding_mask is not supported yet (it must be None)")
    check(softmax_layout in ("", "TND"), op, "only supported softmax_layout=TND")
    check(not (softmax_layout == "TND" and layout != "TND"), op,
          "softmax_layout=TND only supported when input_layout_str=TND")
    if sink is not None or dropout_mask is not None:
        raise NotEmulatedError(f"{op}: the {'sink' if sink is not None else 'dropout_mask'} argument is not "
                               "emulated by ascendify's emulated npu device")
    sh = _shapes(op, query, key, value, head_num, layout)
    _check_compressed(op, atten_mask, sparse_mode)
    if keep_prob < 1:
        seed, offset = (int(seed), int(offset)) if seed else (_draw_seed(query.device), 0)
    else:
        seed, offset = 0, 0
    if layout == "TND":
        return _varlen(query, key, value, pse, atten_mask, scale, keep_prob, pre_tockens, next_tockens,
                       prefix, actual_seq_qlen, actual_seq_kvlen, sparse_mode, sh, seed, offset, softmax_layout,
                       inner_precise)
    q = _to_bnsd(query, layout, sh.n)
    k = _to_bnsd(key, layout, sh.nkv)
    v = _to_bnsd(value, layout, sh.nkv)
    if pse is not None:
        check(pse.dim() == 4 and pse.shape[0] in (1, sh.b) and pse.shape[1] == sh.n
              and pse.shape[2] in (1, sh.sq) and pse.shape[3] == sh.skv, op,
              f"pse must be of shape BNSS, BN1S or 1NSS ({sh.b}, {sh.n}, {sh.sq}, {sh.skv}), but got "
              f"{tuple(pse.shape)}")
    mask = _mask_for(op, atten_mask, sparse_mode, pre_tockens, next_tockens, prefix, sh.sq, sh.skv, sh.b)
    out, m, l_ = attend(q, k, v, pse, mask, float(scale), float(keep_prob), seed, offset,
                        _zero_empty(inner_precise, sparse_mode, sh.sq, sh.skv))
    numels = sh.b * sh.n * sh.sq * sh.skv
    return (_from_bnsd(out, layout), _stats(m), _stats(l_), query.new_empty(0), seed, offset, numels)


def _varlen(query, key, value, pse, atten_mask, scale, keep_prob, pre, nxt, prefix, seq_q, seq_kv,
            sparse_mode, sh: Shapes, seed, offset, softmax_layout, inner_precise=0):
    op = _FA
    check(pse is None, op, "pse is not emulated for input_layout TND")
    qe = _cumulative(op, "actual_seq_qlen", seq_q, sh.sq)
    ke = _cumulative(op, "actual_seq_kvlen", seq_kv, sh.skv)
    check(len(qe) == len(ke), op, "the size of actual_seq_qlen and actual_seq_kvlen must be the same and cannot "
                                  "be empty.")
    outs, maxes, sums = [], [], []
    numels = 0
    band_at = [i for i, (a, b) in enumerate(zip([0, *qe[:-1]], qe, strict=True)) if b > a] or [0]
    q0 = k0 = 0
    for i, (q1, k1) in enumerate(zip(qe, ke, strict=True)):
        sq, skv = q1 - q0, k1 - k0
        if sq > 0:
            q = query[q0:q1].transpose(0, 1).unsqueeze(0)  # [1, N, sq, D]
            k = key[k0:k1].transpose(0, 1).unsqueeze(0)
            v = value[k0:k1].transpose(0, 1).unsqueeze(0)
            m_ = atten_mask
            if m_ is not None and sparse_mode in (0, 1):
                m_ = m_[..., :sq, :skv]
            mode = sparse_mode
            if (sparse_mode == 7 and i == band_at[-1]) or (sparse_mode == 8 and i == band_at[0]):
                mode = 4  # the sequence cut by the outer split: a band from the bottom-right corner
            mask = _mask_for(op, m_, mode, pre, nxt, prefix and [prefix[i]], sq, skv, 1)
            if skv == 0:
                o = query.new_zeros(1, sh.n, sq, sh.dv)
                m = l_ = torch.zeros(1, sh.n, sq, device=query.device)
            else:
                o, m, l_ = attend(q, k, v, None, mask, float(scale), float(keep_prob), seed, offset + i,
                                  _zero_empty(inner_precise, mode, sq, skv))
            outs.append(o[0].transpose(0, 1))
            maxes.append(m[0].transpose(0, 1))
            sums.append(l_[0].transpose(0, 1))
        numels += sh.n * sq * skv
        q0, k0 = q1, k1
    tail = sh.sq - q0  # rows past the last sequence: left as zeros
    if tail:
        outs.append(query.new_zeros(tail, sh.n, sh.dv))
        maxes.append(torch.zeros(tail, sh.n, device=query.device))
        sums.append(torch.zeros(tail, sh.n, device=query.device))
    out = torch.cat(outs, 0)
    return out, _stats(torch.cat(maxes, 0)), _stats(torch.cat(sums, 0)), query.new_empty(0), seed, offset, numels


def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1., keep_prob=1., pre_tockens=MAX_TOKENS,
                              next_tockens=MAX_TOKENS, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                              actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                              sync=False, softmax_layout="", sink=None):
    """The backward of :func:`npu_fusion_attention`: ``(dq, dk, dv, dpse, dsink)`` (dpse/dsink empty when
    there is no ``pse``/``sink``). Uses ``softmax_max``/``softmax_sum``/``attention_in`` when given (as the NPU
    does), else recomputes them; ``seed``/``offset`` give the forward's dropout mask."""
    op = "npu_fusion_attention_grad"
    _check_common(op, query, key, value, pse, atten_mask, keep_prob, input_layout, sparse_mode)
    layout = input_layout.upper()
    check(padding_mask is None, op, "padding_mask is not supported yet (it must be None)")
    if sink is not None:
        raise NotEmulatedError(f"{op}: the sink argument is not emulated by ascendify's emulated npu device")
    sh = _shapes(op, query, key, value, head_num, layout)
    _check_compressed(op, atten_mask, sparse_mode)
    check(dy.shape == _out_shape(query, layout, sh), op,
          f"dy must have the shape of attention_out {tuple(_out_shape(query, layout, sh))}, but got {tuple(dy.shape)}")
    seed, offset = int(seed), int(offset)
    empty = query.new_empty(0)
    with torch.enable_grad():
        if layout == "TND":
            q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
            out = _varlen(q, k, v, None, atten_mask, scale_value, keep_prob, pre_tockens, next_tockens, prefix,
                          actual_seq_qlen, actual_seq_kvlen, sparse_mode, sh, seed, offset, softmax_layout,
                          inner_precise)[0]
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), dy)
            return dq, dk, dv, empty, empty
    q = _to_bnsd(query, layout, sh.n)
    k = _to_bnsd(key, layout, sh.nkv)
    v = _to_bnsd(value, layout, sh.nkv)
    mask = _mask_for(op, atten_mask, sparse_mode, pre_tockens, next_tockens, prefix, sh.sq, sh.skv, sh.b)
    if softmax_max is not None and softmax_sum is not None:
        m, l_ = softmax_max[..., 0], softmax_sum[..., 0]
        if attention_in is not None:
            out = _to_bnsd(attention_in, layout, sh.n)
        else:
            out = _forward(q, k, v, pse, mask, float(scale_value), float(keep_prob), seed, offset)[0]
    else:
        out, m, l_ = _forward(q, k, v, pse, mask, float(scale_value), float(keep_prob), seed, offset)
    dout = _to_bnsd(dy, layout, sh.n)
    if _zero_empty(inner_precise, sparse_mode, sh.sq, sh.skv):
        rows = empty_rows(mask, sh.sq, sh.skv, q.device)
        if rows is not None:  # rows the forward gave as zeros carry no gradient
            dout = dout.masked_fill(rows, 0.0)
    p = pse.detach().requires_grad_() if pse is not None else None
    dq, dk, dv, dpse = _backward(q, k, v, p, mask, float(scale_value), float(keep_prob), seed, offset, dout,
                                 out, m, l_)
    return (_from_bnsd(dq, layout), _from_bnsd(dk, layout), _from_bnsd(dv, layout),
            dpse if dpse is not None else empty, empty)


def _out_shape(query, layout, sh: Shapes) -> torch.Size:
    if layout == "BSH":
        return torch.Size((sh.b, sh.sq, sh.n * sh.dv))
    if layout == "SBH":
        return torch.Size((sh.sq, sh.b, sh.n * sh.dv))
    if layout == "BSND":
        return torch.Size((sh.b, sh.sq, sh.n, sh.dv))
    if layout == "BNSD":
        return torch.Size((sh.b, sh.n, sh.sq, sh.dv))
    return torch.Size((sh.sq, sh.n, sh.dv))




def npu_fusion_attention_v2(query, key, value, head_num, input_layout, *, pse=None, padding_mask=None,
                            atten_mask=None, query_rope=None, key_rope=None, scale=1., keep_prob=1.,
                            pre_tokens=MAX_TOKENS, next_tokens=MAX_TOKENS, inner_precise=0, prefix=None,
                            actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                            sync=False, pse_type=1, q_start_idx=None, kv_start_idx=None, softmax_layout="",
                            sink=None, dropout_mask=None, seed=0, offset=0):
    """:func:`npu_fusion_attention` with keyword-only options, ``pre_tokens``/``next_tokens`` spelt right, and
    ``query_rope``/``key_rope`` (MLA: concatenated to the query and key head dims, so the scores are
    ``q k^T + q_rope k_rope^T``). ``pse_type`` 1 (``scale * (qk + pse)``) only; gradients by autograd (through
    the rope halves too)."""
    op = "npu_fusion_attention_v2"
    check(pse_type in (0, 1, 2, 3), op, f"pse_type must be in [0, 3], but got {pse_type}")
    if pse_type != 1 and (pse is not None or pse_type in (2, 3)):
        raise NotEmulatedError(f"{op}: pse_type {pse_type} (an added or generated ALiBi pse) is not emulated by "
                               "ascendify's emulated npu device")
    check(q_start_idx is None and kv_start_idx is None or pse_type in (2, 3), op,
          "q_start_idx and kv_start_idx apply to pse_type 2 and 3 only")
    check((query_rope is None) == (key_rope is None), op, "query_rope and key_rope must be given together")
    if query_rope is not None:
        same_device(op, query, query_rope=query_rope, key_rope=key_rope)
        check(query_rope.dtype == query.dtype and key_rope.dtype == key.dtype, op,
              "query_rope and key_rope must have the dtypes of query and key")
        lay = input_layout.upper()
        if lay in ("BSH", "SBH"):
            n = head_num
            nkv = n * key.shape[-1] // query.shape[-1]
            cat = lambda a, b, h: torch.cat(  # noqa: E731
                (a.unflatten(-1, (h, -1)), b.unflatten(-1, (h, -1))), -1).flatten(-2)
            query, key = cat(query, query_rope, n), cat(key, key_rope, nkv)
        else:
            query, key = torch.cat((query, query_rope), -1), torch.cat((key, key_rope), -1)
    return npu_fusion_attention(query, key, value, head_num, input_layout, pse=pse, padding_mask=padding_mask,
                                atten_mask=atten_mask, scale=scale, keep_prob=keep_prob, pre_tockens=pre_tokens,
                                next_tockens=next_tokens, inner_precise=inner_precise, prefix=prefix,
                                actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen,
                                sparse_mode=sparse_mode, gen_mask_parallel=gen_mask_parallel, sync=sync,
                                softmax_layout=softmax_layout, sink=sink, dropout_mask=dropout_mask, seed=seed,
                                offset=offset)
