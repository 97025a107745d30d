"""KV caches and the ATB attention that vLLM on Ascend (vllm-ascend) serves with: ``npu_scatter_pa_kv_cache``,
``npu_gather_pa_kv_cache``, ``npu_scatter_nd_update_``, and the ATB operators ``_npu_reshape_and_cache``,
``_npu_paged_attention`` (+ ``_npu_paged_attention_get_workspace``), ``_npu_flash_attention``,
``_npu_flash_attention_unpad``, ``_npu_rotary_embedding``.

- Caches: a token's ``slot`` is ``block * block_size + offset``. ``Norm`` (ND) caches are
  ``[num_blocks, block_size, ...]``; ``PA_NZ`` caches are ``[num_blocks, H // last, block_size, last]`` (a token's
  H values spread over the second axis). ``npu_scatter_pa_kv_cache`` / ``_npu_reshape_and_cache`` write
  ``key[t]`` / ``value[t]`` at ``slot_mapping[t]`` in place (negative slots are padding: skipped);
  ``npu_gather_pa_kv_cache`` reads each batch's first ``seq_lens[i]`` tokens (from ``seq_offset[i]``) through its
  block table into ``key`` / ``value`` (blocks past the table or out of range read as zeros), as op-plugin's
  reference does.
- ``_npu_paged_attention``: per token i, ``softmax(scale * q_i K^T) V`` over the first ``context_lens[i]`` cached
  tokens reached through ``block_table[i]``, with GQA (``num_heads`` a multiple of ``num_kv_heads``), written into
  ``out``; the workspace helpers return an empty workspace (the emulator needs none).
- ``_npu_flash_attention``: prefill on unpadded tokens ``[T, N, D]`` split by ``seq_len``, with an additive
  ``mask`` (its top-left ``[L, L]`` per sequence); ``_npu_flash_attention_unpad`` the same without a mask.
- ``_npu_rotary_embedding``: vLLM's rotary embedding in place: ``cos_sin_cache[positions]`` holds cos and sin
  halves; neox style rotates halves, otherwise adjacent pairs, over the first ``rot_dim`` of every head.

The softmax runs in float32 and results are cast to the inputs' dtype. No backward (inference operators).
"""

from __future__ import annotations

import torch

from ascendify.emulator.fused._check import FLOATS, check, dtype_in, same_device


def _rows(cache: torch.Tensor, mode: str, op: str):
    """A cache as [num_blocks * block_size, per-token values] (a view for ND; None for NZ, done per token)."""
    if mode == "PA_NZ":
        return None
    return cache.view(cache.shape[0] * cache.shape[1], -1)


def _scatter(op: str, src: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor, mode: str) -> None:
    t = src.shape[0]
    flat = src.reshape(t, -1).to(cache.dtype)
    keep = slots >= 0
    s = slots[keep].long()
    flat = flat[keep]
    if mode == "PA_NZ":  # [blocks, H / last, block_size, last], or vllm-ascend's 5-D view [blocks, N, D / last, ...]
        nz = cache.view(cache.shape[0], -1, cache.shape[-2], cache.shape[-1])
        nb, groups, bs, last = nz.shape
        check(flat.shape[1] == groups * last, op, f"a token has {flat.shape[1]} values but the NZ cache holds "
                                                  f"{groups} x {last}")
        nz[s // bs, :, s % bs, :] = flat.reshape(-1, groups, last)
        return
    rows = _rows(cache, mode, op)
    check(flat.shape[1] == rows.shape[1], op, f"a token has {flat.shape[1]} values but a cache slot holds "
                                              f"{rows.shape[1]}")
    check(s.numel() == 0 or int(s.max()) < rows.shape[0], op, "slot_mapping points past the cache")
    rows[s] = flat


def npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
                            compress_seq_offsets=None, seq_lens=None, cache_mode="PA_NZ"):
    op = "npu_scatter_pa_kv_cache"
    same_device(op, key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping)
    check(key.dim() in (3, 4) and value.dim() in (3, 4), op, "key and value must be 3 or 4 dimensional")
    mode = "Norm" if cache_mode in (None, "Norm") else cache_mode
    dims = (4,) if mode == "Norm" else (4, 5)  # vllm-ascend passes its NZ caches as a 5-D view
    check(key_cache.dim() in dims and value_cache.dim() in dims, op,
          "key_cache and value_cache must be 4 dimensional")
    check(key.dtype == value.dtype == key_cache.dtype == value_cache.dtype, op,
          "key, value, key_cache and value_cache must have the same dtype")
    check(slot_mapping.dtype in (torch.int32, torch.int64), op, "the dtype of slot_mapping must be int32 or int64")
    check(mode in ("Norm", "PA_NZ"), op, f"cache_mode must be 'Norm' or 'PA_NZ', but got {cache_mode!r}")
    if compress_lens is not None or compress_seq_offsets is not None or seq_lens is not None:
        from ascendify.emulator.errors import NotEmulatedError

        raise NotEmulatedError(f"{op}: the compressed scenario (compress_lens, seq_lens) is not emulated")
    check(slot_mapping.dim() == 1 and slot_mapping.shape[0] == key.shape[0], op,
          f"slot_mapping must be 1-D with one slot per token ({key.shape[0]})")
    _scatter(op, key, key_cache, slot_mapping, mode)
    _scatter(op, value, value_cache, slot_mapping, mode)


def _npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices):
    op = "_npu_reshape_and_cache"
    same_device(op, key, value=value, key_cache=key_cache, value_cache=value_cache, slot_indices=slot_indices)
    check(key.dtype == key_cache.dtype and value.dtype == value_cache.dtype, op,
          "key and key_cache (value and value_cache) must have the same dtype")
    check(slot_indices.dtype == torch.int32, op, f"the dtype of slot_indices must be int32, got {slot_indices.dtype}")
    _scatter(op, key, key_cache, slot_indices, "Norm")
    _scatter(op, value, value_cache, slot_indices, "Norm")


def _token_ids(block_table_row: torch.Tensor, start: int, length: int, block_size: int, num_blocks: int):
    """(block, offset, valid) of tokens start..start+length of a sequence through its block table."""
    pos = torch.arange(start, start + length, device=block_table_row.device)
    idx = pos // block_size
    inside = idx < block_table_row.shape[0]
    blocks = block_table_row.long()[idx.clamp(max=max(block_table_row.shape[0] - 1, 0))]
    valid = inside & (blocks >= 0) & (blocks < num_blocks)
    return blocks.clamp(0, num_blocks - 1), pos % block_size, valid


def npu_gather_pa_kv_cache(key_cache, value_cache, block_tables, seq_lens, key, value, *, seq_offset=None,
                           is_seq_lens_cumsum=False):
    op = "npu_gather_pa_kv_cache"
    same_device(op, key_cache, value_cache=value_cache, block_tables=block_tables, seq_lens=seq_lens, key=key,
                value=value, seq_offset=seq_offset)
    check(key_cache.dim() == 4 and value_cache.dim() == 4, op, "key_cache and value_cache must be 4 dimensional")
    lens = [int(x) for x in seq_lens.tolist()]
    if is_seq_lens_cumsum:
        lens = [b - a for a, b in zip(lens[:-1], lens[1:], strict=True)]
    nz = key.dim() == 3 and key_cache.shape[-1] * key_cache.shape[1] == key.shape[1] * key.shape[2] \
        and key_cache.shape[2] != key.shape[1]
    num_blocks = key_cache.shape[0]
    block_size = key_cache.shape[2] if nz else key_cache.shape[1]
    k_rows, v_rows = key.reshape(key.shape[0], -1), value.reshape(value.shape[0], -1)
    at = 0
    for i, n in enumerate(lens):
        n = min(n, k_rows.shape[0] - at)
        if n <= 0:
            break
        start = (int(seq_offset[i]) // block_size) * block_size if seq_offset is not None else 0
        blocks, offs, valid = _token_ids(block_tables[i], start, n, block_size, num_blocks)
        for cache, rows in ((key_cache, k_rows), (value_cache, v_rows)):
            got = cache[blocks, :, offs, :] if nz else cache[blocks, offs]
            got = got.reshape(n, -1) * valid[:, None].to(cache.dtype)
            rows[at:at + n] = got
        at += n


def npu_scatter_nd_update_(self, indices, updates):
    """``self[indices[i]] = updates[i]`` in place (indices' last axis indexes self's leading axes)."""
    op = "npu_scatter_nd_update_"
    same_device(op, self, indices=indices, updates=updates)
    check(indices.dtype in (torch.int32, torch.int64), op, "the dtype of indices must be int32 or int64")
    check(updates.dtype == self.dtype, op, f"updates ({updates.dtype}) must have self's dtype ({self.dtype})")
    depth = indices.shape[-1]
    check(1 <= depth <= self.dim(), op, f"indices' last dim ({depth}) must be in [1, {self.dim()}]")
    check(tuple(updates.shape) == tuple(indices.shape[:-1]) + tuple(self.shape[depth:]), op,
          f"updates must have shape indices.shape[:-1] + self.shape[{depth}:], got {tuple(updates.shape)}")
    idx = indices.long().reshape(-1, depth)
    with torch.no_grad():
        self[tuple(idx.t())] = updates.reshape(-1, *self.shape[depth:])
    return self


def _attend(q, k, v, scale, mask=None):
    """q [Sq, N, D], k/v [Skv, Nkv, D]: softmax(scale q k^T + mask) v in float32 -> [Sq, N, Dv]."""
    n, nkv = q.shape[1], k.shape[1]
    if nkv != n:
        k = k.repeat_interleave(n // nkv, 1)
        v = v.repeat_interleave(n // nkv, 1)
    s = torch.einsum("qnd,knd->nqk", q.float(), k.float()) * scale
    if mask is not None:
        s = s + mask.float()
    p = torch.softmax(s, -1)
    return torch.einsum("nqk,knd->qnd", p, v.float())


def _heads(op, num_heads, num_kv_heads):
    check(num_heads > 0 and num_kv_heads > 0 and num_heads % num_kv_heads == 0, op,
          f"num_heads ({num_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads})")


def _npu_paged_attention(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table,
                         context_lens, out, *, workspace=None):
    op = "_npu_paged_attention"
    dtype_in(query, FLOATS, op, "query")
    same_device(op, query, key_cache=key_cache, value_cache=value_cache, block_table=block_table, out=out)
    _heads(op, num_heads, num_kv_heads)
    check(query.dim() == 3 and query.shape[1] == num_heads, op,
          f"query must be [num_tokens, num_heads ({num_heads}), head_size], got {tuple(query.shape)}")
    check(key_cache.dim() == 4 and key_cache.shape[2] == num_kv_heads, op,
          "key_cache must be [num_blocks, block_size, num_kv_heads, head_size]")
    num_blocks, block_size = key_cache.shape[:2]
    lens = [int(x) for x in context_lens.tolist()]
    check(len(lens) == query.shape[0], op, "context_lens must give one length per query token")
    with torch.no_grad():
        for i, n in enumerate(lens):
            blocks, offs, _ = _token_ids(block_table[i], 0, n, block_size, num_blocks)
            o = _attend(query[i:i + 1], key_cache[blocks, offs], value_cache[blocks, offs], float(scale_value))
            out[i] = o[0].to(out.dtype)


def _npu_paged_attention_get_workspace(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value,
                                       block_table, context_lens, out):
    return torch.empty(0, dtype=torch.uint8, device=query.device)


def _unpadded(op, query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out, mask):
    dtype_in(query, FLOATS, op, "query")
    same_device(op, query, key=key, value=value, out=out, mask=mask)
    _heads(op, num_heads, num_kv_heads)
    q = query.reshape(query.shape[0], num_heads, -1)
    k = key.reshape(key.shape[0], num_kv_heads, -1)
    v = value.reshape(value.shape[0], num_kv_heads, -1)
    lens = [int(x) for x in seq_len.tolist()]
    check(sum(lens) <= q.shape[0], op, f"seq_len sums to {sum(lens)} but there are {q.shape[0]} tokens")
    rows = out.view(out.shape[0], num_heads, -1)
    at = 0
    with torch.no_grad():
        for n in lens:
            m = None
            if mask is not None:
                mm = mask if mask.dim() == 2 else mask[0]
                m = mm[:n, :n].unsqueeze(0)
            rows[at:at + n] = _attend(q[at:at + n], k[at:at + n], v[at:at + n], float(scale_value), m).to(out.dtype)
            at += n


def _npu_flash_attention(query, key, value, mask, seq_len, scale_value, num_heads, num_kv_heads, out):
    _unpadded("_npu_flash_attention", query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out, mask)


def _npu_flash_attention_unpad(query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out):
    _unpadded("_npu_flash_attention_unpad", query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out,
              None)


def _npu_rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox_style):
    op = "_npu_rotary_embedding"
    dtype_in(query, FLOATS, op, "query")
    same_device(op, positions, query=query, key=key, cos_sin_cache=cos_sin_cache)
    pos = positions.reshape(-1).long()
    cos, sin = cos_sin_cache.float()[pos].chunk(2, -1)  # [T, rot/2]
    rot = cos.shape[-1] * 2
    check(rot <= head_size, op, f"the rotary dim ({rot}) must not exceed head_size ({head_size})")
    with torch.no_grad():
        for t in (query, key):
            x = t.view(pos.shape[0], -1, head_size)
            r = x[..., :rot].float()
            c, s = cos[:, None, :], sin[:, None, :]
            if is_neox_style:
                x1, x2 = r[..., :rot // 2], r[..., rot // 2:]
                new = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
            else:
                x1, x2 = r[..., 0::2], r[..., 1::2]
                new = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
            x[..., :rot] = new.to(t.dtype)


def _npu_flash_attention_unpad_v2(query, key, value, seq_len, scale_value, num_heads, num_kv_heads, *,
                                  kernel_type=0, out=None):
    """:func:`_npu_flash_attention_unpad` with ATB's ``kernel_type`` (0 default, 1 high precision, 2 the
    approximate 310P kernel): the same math here, in float32."""
    op = "_npu_flash_attention_unpad_v2"
    check(kernel_type in (None, 0, 1, 2), op, f"kernel_type must be 0, 1 or 2, but got {kernel_type}")
    check(out is not None, op, "out (the tensor written) is required")
    _unpadded(op, query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out, None)


def npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
                              c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None, epsilon=1e-5,
                              cache_mode="Norm", is_output_kv=False):
    """DeepSeek MLA's cache update (op-plugin's test_npu_kv_rms_norm_rope_cache.py): ``kv`` [B, 1, S, 576] splits
    into 512 values RMS-normalised with ``gamma`` (``c_kv``) and 64 rotated by the interleaved RoPE of
    :func:`ascendify.emulator.fused.rope.npu_interleave_rope` (``k_rope``); both are written into
    ``ckv_cache`` / ``k_cache`` in place (quantised to int8 with ``*_scale`` (+ offset) for int8 caches) at
    ``index``: ``Norm`` caches [B, 1, L, D] with index [B, S] (positions), ``PA``/``PA_BNSD`` caches
    [blocks, block_size, 1, D] with index [B * S] (slots; negative skipped). Returns
    ``(k_cache, ckv_cache, k_rope, c_kv)``; the last two only with ``is_output_kv`` (else empty)."""
    op = "npu_kv_rmsnorm_rope_cache"
    dtype_in(kv, (torch.float16, torch.bfloat16), op, "kv")
    same_device(op, kv, gamma=gamma, cos=cos, sin=sin, index=index, k_cache=k_cache, ckv_cache=ckv_cache)
    check(kv.dim() == 4 and kv.shape[1] == 1, op, f"kv must be 4 dimensional [B, 1, S, H], got {tuple(kv.shape)}")
    check(gamma.dim() == 1 and cos.dim() == 4 and sin.dim() == 4, op, "gamma must be 1-D, cos and sin 4-D")
    if v is not None:
        from ascendify.emulator.errors import NotEmulatedError

        raise NotEmulatedError(f"{op}: the v input (the 192-wide variant) is not emulated")
    rms = gamma.shape[0]
    rope = cos.shape[-1]
    check(kv.shape[-1] == rms + rope, op, f"kv's last dim ({kv.shape[-1]}) must be gamma's ({rms}) plus the "
                                          f"rope dim ({rope})")
    check(cache_mode in ("Norm", "PA", "PA_BNSD"), op, f"cache_mode {cache_mode!r} is not emulated "
                                                       "(Norm, PA, PA_BNSD)")
    b, _, s, _ = kv.shape
    x = kv.float()
    rms_in, rope_in = x[..., :rms], x[..., rms:]
    y = rms_in * torch.rsqrt(rms_in.pow(2).mean(-1, keepdim=True) + epsilon) * gamma.float()
    k = rope_in.reshape(b, 1, s, rope // 2, 2).transpose(-1, -2).reshape(b, 1, s, rope)
    k1, k2 = k.chunk(2, -1)
    k_embed = k * cos.float() + torch.cat((-k2, k1), -1) * sin.float()

    def to_cache(t, cache, scale, offset):
        if cache.dtype == torch.int8:
            check(scale is not None, op, "int8 caches need k_rope_scale and c_kv_scale")
            t = t * scale.float() + (offset.float() if offset is not None else 0)
            return torch.round(t).clamp(-128, 127).to(torch.int8)
        return t.to(cache.dtype)

    kq, yq = to_cache(k_embed, k_cache, k_rope_scale, k_rope_offset), to_cache(y, ckv_cache, c_kv_scale, c_kv_offset)
    with torch.no_grad():
        if cache_mode == "Norm":
            pos = index.long().reshape(b, s)
            for i in range(b):
                keep = pos[i] >= 0
                k_cache[i, 0, pos[i][keep]] = kq[i, 0][keep]
                ckv_cache[i, 0, pos[i][keep]] = yq[i, 0][keep]
        else:
            slots = index.long().reshape(-1)
            keep = slots >= 0
            k_cache.view(-1, k_cache.shape[-1])[slots[keep]] = kq.reshape(-1, rope)[keep]
            ckv_cache.view(-1, ckv_cache.shape[-1])[slots[keep]] = yq.reshape(-1, rms)[keep]
    if is_output_kv:
        return k_cache, ckv_cache, k_embed.to(kv.dtype), y.to(kv.dtype)
    empty = kv.new_empty(0)
    return k_cache, ckv_cache, empty, empty
