"""torch_npu's inference attention: ``npu_prompt_flash_attention`` (prefill), ``npu_incre_flash_attention``
(decode) and ``npu_fused_infer_attention_score`` (both, chosen by the query's length).

The math is ``softmax(scale * Q K^T + pse_shift, masked) V`` with GQA by ``num_key_value_heads`` (0 = as many as
``num_heads``), ``atten_mask`` True = masked, ``sparse_mode`` and ``pre_tokens``/``next_tokens`` as in
:mod:`.attention`. Each batch is computed on its actual lengths (``actual_seq_lengths`` for the query,
``actual_seq_lengths_kv`` for key/value; the decode op's ``actual_seq_lengths`` are key/value lengths); query rows
past a batch's length come back as zeros. Paged key/value caches (``block_table`` with ``block_size``) are
gathered per batch from blocks laid out ``[num_blocks, block_size, H]`` (or ``[num_blocks, N, block_size, D]``).
Quantised arguments are not emulated (NotEmulatedError). No backward: these are inference operators.
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused._check import FLOATS, HALF, check, dtype_in, on_npu, same_device
from ascendify.emulator.fused.attention import MAX_TOKENS, _check_compressed, _mask_for, attend

_LAYOUTS = {"BSH": ("BSH", "BSH"), "BSND": ("BSND", "BSND"), "BNSD": ("BNSD", "BNSD"),
            "BNSD_BSND": ("BNSD", "BSND"), "TND": ("TND", "TND")}


def _refuse_quant(op: str, **quant) -> None:
    for arg, val in quant.items():
        if val is not None:
            raise NotEmulatedError(f"{op}: {arg} (quantised or shared-prefix attention) is not emulated by "
                                   "ascendify's emulated npu device")


def _lengths(seq, b: int) -> list[int] | None:
    if seq is None:
        return None
    vals = [int(x) for x in (seq.tolist() if isinstance(seq, torch.Tensor) else seq)]
    return vals * b if len(vals) == 1 else vals[:b]


def _split_heads(x: torch.Tensor, layout: str, n: int) -> torch.Tensor:
    """[B, N, S, D] view of a BSH / BSND / BNSD tensor."""
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    return x.view(x.shape[0], x.shape[1], n, -1).transpose(1, 2)


def _gather_pages(op, cache: torch.Tensor, block_table: torch.Tensor, block_size: int, nkv: int) -> torch.Tensor:
    """A paged cache as [B, Nkv, max_blocks * block_size, D]."""
    check(block_size > 0, op, "block_size must be positive when block_table is given")
    check(block_table.dim() == 2, op, f"block_table must be 2 dimensional [B, max_blocks], got {block_table.dim()}")
    ids = block_table.long().clamp(min=0)
    if cache.dim() == 3:  # [blocks, block_size, H]
        check(cache.shape[1] == block_size, op, f"the block axis of key/value ({cache.shape[1]}) must equal "
                                                f"block_size ({block_size})")
        pages = cache[ids]  # [B, max_blocks, block_size, H]
        b, mb = ids.shape
        return pages.reshape(b, mb * block_size, nkv, -1).transpose(1, 2)
    check(cache.dim() == 4 and cache.shape[2] == block_size, op,
          f"a paged key/value must be [blocks, block_size, H] or [blocks, N, block_size, D], got {tuple(cache.shape)}")
    pages = cache[ids]  # [B, max_blocks, N, block_size, D]
    b, mb = ids.shape
    return pages.permute(0, 2, 1, 3, 4).reshape(b, cache.shape[1], mb * block_size, cache.shape[3])


def _mask4(m: torch.Tensor, b: int, sq: int) -> torch.Tensor:
    """An inference ``atten_mask`` ((S, KV_S), (B, S, KV_S), (B, 1, S, KV_S), decode's (B, KV_S)...) as 4-D."""
    if m.dim() == 2:
        return m[:, None, None, :] if sq == 1 and m.shape[0] == b and b > 1 else m[None, None]
    if m.dim() == 3:
        return m[:, None]
    return m


def _run(op, query, key, value, *, atten_mask, pse_shift, q_lens, kv_lens, num_heads, num_key_value_heads,
         scale, pre_tokens, next_tokens, input_layout, sparse_mode, block_table=None, block_size=0, lse=False,
         max_d=512):
    """The attention of every batch on its actual lengths: (out in the output layout, row log-sum-exp)."""
    check(num_heads > 0, op, f"numHeads should be greater than 0, but got {num_heads}")
    check(input_layout in _LAYOUTS, op, f"not support layout: {input_layout} (BSH, BSND, BNSD, BNSD_BSND, TND)")
    allowed = HALF if on_npu(query) else FLOATS
    dtype_in(query, allowed, op, "query")
    for arg, t in (("key", key), ("value", value)):
        check(t.dtype == query.dtype, op, f"the dtype of {arg} ({t.dtype}) must equal that of query ({query.dtype})")
    same_device(op, query, key=key, value=value, atten_mask=atten_mask, pse_shift=pse_shift)
    if atten_mask is not None:
        check(atten_mask.dtype in (torch.bool, torch.int8, torch.uint8), op,
              f"the dtype of atten_mask must be bool, int8 or uint8, but got {atten_mask.dtype}")
    check(0 <= sparse_mode <= 4, op, f"sparse_mode must be in [0, 4], but got {sparse_mode}")
    _check_compressed(op, atten_mask, sparse_mode)
    qlay, olay = _LAYOUTS[input_layout]
    n = num_heads
    nkv = num_key_value_heads or num_heads
    check(n % nkv == 0, op, f"num_heads ({n}) must be a multiple of num_key_value_heads ({nkv})")
    if qlay == "TND":
        return _run_tnd(op, query, key, value, atten_mask, q_lens, kv_lens, n, nkv, scale, pre_tokens,
                        next_tokens, sparse_mode, lse)
    check(query.dim() == (3 if qlay == "BSH" else 4), op,
          f"query must be {3 if qlay == 'BSH' else 4} dimensional for input_layout {input_layout}, got {query.dim()}")
    if qlay == "BSH":
        check(query.shape[2] % n == 0, op, f"the hidden size of query ({query.shape[2]}) must be a multiple of "
                                           f"num_heads ({n})")
    q = _split_heads(query, qlay, n)
    b, _, sq, d = q.shape
    check(d <= max_d, op, f"the head dim D must be at most 512, but got {d}")
    if block_table is not None:
        k = _gather_pages(op, key, block_table, block_size, nkv)
        v = _gather_pages(op, value, block_table, block_size, nkv)
    else:
        k, v = _split_heads(key, qlay, nkv), _split_heads(value, qlay, nkv)
    check(k.shape[1] == nkv and k.shape[0] == b and k.shape[-1] == d, op,
          f"key {tuple(key.shape)} does not match query {tuple(query.shape)} with {nkv} key/value heads")
    skv = k.shape[2]
    qlen = _lengths(q_lens, b) or [sq] * b
    kvlen = _lengths(kv_lens, b) or [skv] * b
    check(len(qlen) == b and len(kvlen) == b, op, f"actual sequence lengths must give one value per batch ({b})")
    mask4 = _mask4(atten_mask, b, sq) if atten_mask is not None else None
    out = q.new_zeros(b, n, sq, v.shape[-1])
    lse_out = torch.zeros(b, n, sq, 1, device=q.device)
    for i in range(b):
        sq_i, skv_i = qlen[i], kvlen[i]
        check(0 <= sq_i <= sq and 0 <= skv_i <= skv, op,
              f"actual lengths ({sq_i}, {skv_i}) of batch {i} exceed the query/key sequence length ({sq}, {skv})")
        if sq_i == 0 or skv_i == 0:
            continue
        m = None
        if mask4 is not None:
            m = mask4[i if mask4.shape[0] > 1 else 0][None]
            m = m[..., :sq_i, :skv_i] if sparse_mode in (0, 1) else atten_mask
        mask = _mask_for(op, m, sparse_mode, pre_tokens, next_tokens, None, sq_i, skv_i, 1)
        pse = None
        if pse_shift is not None:
            pse = pse_shift[i if pse_shift.shape[0] > 1 else 0][None, :, :sq_i, :skv_i] / scale
        o, mx, sm = attend(q[i:i + 1, :, :sq_i], k[i:i + 1, :, :skv_i], v[i:i + 1, :, :skv_i], pse, mask,
                           float(scale), 1.0)
        out[i, :, :sq_i] = o[0]
        if lse:
            lse_out[i, :, :sq_i, 0] = (mx + torch.log(sm))[0]
    if olay == "BNSD":
        res = out
    elif olay == "BSND":
        res = out.transpose(1, 2).contiguous()
    else:
        res = out.transpose(1, 2).reshape(b, sq, -1)
    return res, lse_out


def _run_tnd(op, query, key, value, atten_mask, q_ends, kv_ends, n, nkv, scale, pre, nxt, sparse_mode, lse):
    check(q_ends is not None and kv_ends is not None, op,
          "input_layout TND needs actual_seq_lengths and actual_seq_lengths_kv (cumulative ends)")
    qe = [int(x) for x in q_ends]
    ke = [int(x) for x in kv_ends]
    check(len(qe) == len(ke), op, "actual_seq_lengths and actual_seq_lengths_kv must have the same length")
    out = query.new_zeros(query.shape[0], n, value.shape[-1])
    lse_out = torch.zeros(query.shape[0], n, 1, device=query.device)
    q0 = k0 = 0
    for q1, k1 in zip(qe, ke, strict=True):
        check(q1 >= q0 and k1 >= k0, op, "actual sequence lengths of TND must be cumulative (non-decreasing)")
        if q1 > q0 and k1 > k0:
            m = atten_mask
            if m is not None and sparse_mode in (0, 1):
                m = _mask4(m, 1, q1 - q0)[..., :q1 - q0, :k1 - k0]
            mask = _mask_for(op, m, sparse_mode, pre, nxt, None, q1 - q0, k1 - k0, 1)
            q = query[q0:q1].transpose(0, 1)[None]
            k = key[k0:k1].transpose(0, 1)[None]
            v = value[k0:k1].transpose(0, 1)[None]
            o, mx, sm = attend(q, k, v, None, mask, float(scale), 1.0)
            out[q0:q1] = o[0].transpose(0, 1)
            if lse:
                lse_out[q0:q1, :, 0] = (mx + torch.log(sm))[0].transpose(0, 1)
        q0, k0 = q1, k1
    return out, lse_out


def npu_prompt_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                               actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                               quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=MAX_TOKENS, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                               actual_seq_lengths_kv=None, sparse_mode=0):
    op = "npu_prompt_flash_attention"
    _refuse_quant(op, deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2,
                  quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    with torch.no_grad():
        return _run(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift, q_lens=actual_seq_lengths,
                    kv_lens=actual_seq_lengths_kv, num_heads=num_heads, num_key_value_heads=num_key_value_heads,
                    scale=scale_value, pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
                    sparse_mode=sparse_mode)[0]


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                              actual_seq_lengths=None, antiquant_scale=None, antiquant_offset=None, block_table=None,
                              dequant_scale1=None, quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                              quant_offset2=None, kv_padding_size=None, num_heads=1, scale_value=1.0,
                              input_layout="BSH", num_key_value_heads=0, block_size=0, inner_precise=1):
    """Decode: one query token per batch; ``actual_seq_lengths`` are the key/value lengths."""
    op = "npu_incre_flash_attention"
    _refuse_quant(op, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                  dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                  quant_scale2=quant_scale2, quant_offset2=quant_offset2, kv_padding_size=kv_padding_size)
    check(input_layout in ("BSH", "BSND", "BNSD"), op, f"input_layout must be BSH, BSND or BNSD, got {input_layout}")
    sq = query.shape[2] if input_layout == "BNSD" else query.shape[1]
    check(sq == 1, op, f"the query sequence length must be 1 (incremental decoding), but got {sq}")
    with torch.no_grad():
        return _run(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift, q_lens=None,
                    kv_lens=actual_seq_lengths, num_heads=num_heads, num_key_value_heads=num_key_value_heads,
                    scale=scale_value, pre_tokens=MAX_TOKENS, next_tokens=MAX_TOKENS, input_layout=input_layout,
                    sparse_mode=0, block_table=block_table, block_size=block_size)[0]


def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                                    actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
                                    dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None,
                                    antiquant_offset=None, key_antiquant_scale=None, key_antiquant_offset=None,
                                    value_antiquant_scale=None, value_antiquant_offset=None, block_table=None,
                                    query_padding_size=None, kv_padding_size=None, key_shared_prefix=None,
                                    value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None,
                                    key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                                    pre_tokens=MAX_TOKENS, next_tokens=MAX_TOKENS, input_layout="BSH",
                                    num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
                                    antiquant_mode=0, key_antiquant_mode=0, value_antiquant_mode=0,
                                    softmax_lse_flag=False):
    """``(attention_out, softmax_lse)``; softmax_lse is float32 [B, N, S, 1] ([T, N, 1] for TND) when
    ``softmax_lse_flag``, else an empty [0] tensor."""
    op = "npu_fused_infer_attention_score"
    _refuse_quant(op, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                  quant_scale2=quant_scale2, quant_offset2=quant_offset2, antiquant_scale=antiquant_scale,
                  antiquant_offset=antiquant_offset, key_antiquant_scale=key_antiquant_scale,
                  key_antiquant_offset=key_antiquant_offset, value_antiquant_scale=value_antiquant_scale,
                  value_antiquant_offset=value_antiquant_offset, query_padding_size=query_padding_size,
                  kv_padding_size=kv_padding_size, key_shared_prefix=key_shared_prefix,
                  value_shared_prefix=value_shared_prefix, actual_shared_prefix_len=actual_shared_prefix_len,
                  query_rope=query_rope, key_rope=key_rope, key_rope_antiquant_scale=key_rope_antiquant_scale)
    with torch.no_grad():
        out, lse = _run(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                        q_lens=actual_seq_lengths, kv_lens=actual_seq_lengths_kv, num_heads=num_heads,
                        num_key_value_heads=num_key_value_heads, scale=scale, pre_tokens=pre_tokens,
                        next_tokens=next_tokens, input_layout=input_layout, sparse_mode=sparse_mode,
                        block_table=block_table, block_size=block_size, lse=softmax_lse_flag)
    return out, lse if softmax_lse_flag else torch.empty(0, dtype=torch.float32, device=query.device)


def _fia_out(fn):
    """``fn`` with torch_npu's ``.out`` overload: the same call with ``workspace=`` and ``out=[attention_out,
    softmax_lse]`` written in place (vllm-ascend's graph-capture path)."""

    def out(*args, workspace=None, out=None, **kwargs):
        res = fn(*args, **kwargs)
        if out is not None:
            for dst, src in zip(out, res, strict=False):
                if src.numel():
                    dst.copy_(src.reshape(dst.shape) if src.numel() == dst.numel() else src)
        return tuple(out) if out is not None else res

    return out


def npu_fused_infer_attention_score_v2(query, key, value, *, query_rope=None, key_rope=None, pse_shift=None,
                                       atten_mask=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                                       block_table=None, dequant_scale_query=None, dequant_scale_key=None,
                                       dequant_offset_key=None, dequant_scale_value=None, dequant_offset_value=None,
                                       dequant_scale_key_rope=None, quant_scale_out=None, quant_offset_out=None,
                                       quant_scale_p=None, learnable_sink=None, num_query_heads=1,
                                       num_key_value_heads=0, softmax_scale=1.0, pre_tokens=MAX_TOKENS,
                                       next_tokens=MAX_TOKENS, input_layout="BSH", sparse_mode=0, block_size=0,
                                       query_quant_mode=0, key_quant_mode=0, value_quant_mode=0, inner_precise=0,
                                       return_softmax_lse=False, query_dtype=None, key_dtype=None, value_dtype=None,
                                       query_rope_dtype=None, key_rope_dtype=None, key_shared_prefix_dtype=None,
                                       value_shared_prefix_dtype=None, dequant_scale_query_dtype=None,
                                       dequant_scale_key_dtype=None, dequant_scale_value_dtype=None,
                                       dequant_scale_key_rope_dtype=None, out_dtype=None):
    """The v2 interface of :func:`npu_fused_infer_attention_score` (``num_query_heads``, ``softmax_scale``,
    ``actual_seq_qlen`` / ``actual_seq_kvlen``, ``return_softmax_lse``). ``query_rope`` / ``key_rope`` (MLA)
    extend the query and key head dim: the scores are ``q k^T + q_rope k_rope^T`` and the values stay ``value``."""
    op = "npu_fused_infer_attention_score_v2"
    _refuse_quant(op, dequant_scale_query=dequant_scale_query, dequant_scale_key=dequant_scale_key,
                  dequant_offset_key=dequant_offset_key, dequant_scale_value=dequant_scale_value,
                  dequant_offset_value=dequant_offset_value, dequant_scale_key_rope=dequant_scale_key_rope,
                  quant_scale_out=quant_scale_out, quant_offset_out=quant_offset_out, quant_scale_p=quant_scale_p,
                  learnable_sink=learnable_sink)
    check(query_quant_mode == key_quant_mode == value_quant_mode == 0, op,
          "query_quant_mode, key_quant_mode and value_quant_mode other than 0 are not emulated")
    if out_dtype is not None:
        from ascendify.emulator.fused import _dtypes

        check(_dtypes.TORCH.get(_dtypes.name(out_dtype)) == query.dtype, op,
              f"out_dtype other than the query's dtype (quantised output) is not emulated, got {out_dtype}")
    check((query_rope is None) == (key_rope is None), op, "query_rope and key_rope must be given together")
    q, k, max_d = query, key, 512
    if query_rope is not None:
        same_device(op, query, query_rope=query_rope, key_rope=key_rope)
        check(query_rope.dtype == query.dtype and key_rope.dtype == key.dtype, op,
              "query_rope and key_rope must have the dtypes of query and key")
        q, k = torch.cat((query, query_rope), -1), torch.cat((key, key_rope), -1)
        max_d = 512 + query_rope.shape[-1]
    with torch.no_grad():
        out, lse = _run(op, q, k, value, atten_mask=atten_mask, pse_shift=pse_shift, q_lens=actual_seq_qlen,
                        kv_lens=actual_seq_kvlen, num_heads=num_query_heads,
                        num_key_value_heads=num_key_value_heads, scale=softmax_scale, pre_tokens=pre_tokens,
                        next_tokens=next_tokens, input_layout=input_layout, sparse_mode=sparse_mode,
                        block_table=block_table, block_size=block_size, lse=return_softmax_lse, max_d=max_d)
    return out, lse if return_softmax_lse else torch.empty(0, dtype=torch.float32, device=query.device)


def _workspace(query):
    """The size of workspace the operator needs: none under emulation (an empty uint8 tensor)."""
    return torch.empty(0, dtype=torch.uint8, device=query.device)


def _npu_fused_infer_attention_score_get_max_workspace(query, key, value, *, pse_shift=None, atten_mask=None,
                                                       actual_seq_lengths=None, actual_seq_lengths_kv=None,
                                                       dequant_scale1=None, quant_scale1=None,
                                                       dequant_scale2=None, quant_scale2=None,
                                                       quant_offset2=None, antiquant_scale=None,
                                                       antiquant_offset=None, key_antiquant_scale=None,
                                                       key_antiquant_offset=None, value_antiquant_scale=None,
                                                       value_antiquant_offset=None, block_table=None,
                                                       query_padding_size=None, kv_padding_size=None,
                                                       key_shared_prefix=None, value_shared_prefix=None,
                                                       actual_shared_prefix_len=None, query_rope=None,
                                                       key_rope=None, key_rope_antiquant_scale=None,
                                                       num_heads=1, scale=1.0, pre_tokens=MAX_TOKENS,
                                                       next_tokens=MAX_TOKENS, input_layout="BSH",
                                                       num_key_value_heads=0, sparse_mode=0, inner_precise=0,
                                                       block_size=0, antiquant_mode=0, key_antiquant_mode=0,
                                                       value_antiquant_mode=0, softmax_lse_flag=False):
    return _workspace(query)


def _npu_fused_infer_attention_score_v2_get_max_workspace(query, key, value, *, query_rope=None,
                                                          key_rope=None, pse_shift=None, atten_mask=None,
                                                          actual_seq_qlen=None, actual_seq_kvlen=None,
                                                          block_table=None, dequant_scale_query=None,
                                                          dequant_scale_key=None, dequant_offset_key=None,
                                                          dequant_scale_value=None, dequant_offset_value=None,
                                                          dequant_scale_key_rope=None, quant_scale_out=None,
                                                          quant_offset_out=None, quant_scale_p=None,
                                                          learnable_sink=None, num_query_heads=1,
                                                          num_key_value_heads=0, softmax_scale=1.0,
                                                          pre_tokens=MAX_TOKENS, next_tokens=MAX_TOKENS,
                                                          input_layout="BSH", sparse_mode=0, block_size=0,
                                                          query_quant_mode=0, key_quant_mode=0,
                                                          value_quant_mode=0, inner_precise=0,
                                                          return_softmax_lse=False, query_dtype=None,
                                                          key_dtype=None, value_dtype=None,
                                                          query_rope_dtype=None, key_rope_dtype=None,
                                                          key_shared_prefix_dtype=None,
                                                          value_shared_prefix_dtype=None,
                                                          dequant_scale_query_dtype=None,
                                                          dequant_scale_key_dtype=None,
                                                          dequant_scale_value_dtype=None,
                                                          dequant_scale_key_rope_dtype=None, out_dtype=None):
    return _workspace(query)


def npu_attention_update(lse, local_out, update_type):
    """Merge the partial attention of SP ranks: ``lse_m = max_i lse_i + log(sum_i exp(lse_i - max))``,
    ``out = sum_i out_i * exp(lse_i - lse_m)`` (float32; ``out`` in local_out's dtype). Returns
    ``(out, lse_m)``; ``lse_m`` is meaningful when ``update_type`` is 1."""
    op = "npu_attention_update"
    check(isinstance(lse, list | tuple) and isinstance(local_out, list | tuple) and len(lse) == len(local_out), op,
          "lse and local_out must be lists of the same length")
    check(1 <= len(lse) <= 16, op, f"the sequence-parallel degree (list length) must be in [1, 16], got {len(lse)}")
    check(update_type in (0, 1), op, f"update_type must be 0 or 1, but got {update_type}")
    for t in lse:
        check(t.dtype == torch.float32, op, f"the dtype of lse must be float32, but got {t.dtype}")
    for t in local_out:
        dtype_in(t, FLOATS, op, "local_out")
        check(t.dim() == 2 and 8 <= t.shape[-1] <= 512 and t.shape[-1] % 8 == 0, op,
              f"local_out must be [N, head_dim] with head_dim a multiple of 8 in [8, 512], got {tuple(t.shape)}")
    same_device(op, local_out[0], **{f"lse{i}": t for i, t in enumerate(lse)})
    ls = torch.stack([t.float() for t in lse])  # [SP, N]
    mx = ls.amax(0)
    lse_m = mx + torch.log(torch.exp(ls - mx).sum(0))
    w = torch.exp(ls - lse_m)  # [SP, N]
    out = (torch.stack([o.float() for o in local_out]) * w[..., None]).sum(0)
    return out.to(local_out[0].dtype), lse_m
