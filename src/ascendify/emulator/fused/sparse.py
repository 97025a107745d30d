"""DeepSeek sparse attention (DSA) for long-context inference: ``npu_lightning_indexer`` picks each query token's
most relevant key tokens, ``npu_sparse_flash_attention`` attends to those only.

- ``npu_lightning_indexer``: for query token t of a batch,
  ``score[s] = sum_g weights[t, g] * relu(q[t, g] . k[s])`` over the key tokens s allowed (the batch's actual
  key length; ``sparse_mode`` 3 adds the bottom-right causal limit ``s <= (Lk - Lq) + t``); the
  ``sparse_count`` best positions by score (ties: the lower index first), -1 where fewer are allowed; with
  ``return_value`` the scores too.
- ``npu_sparse_flash_attention``: ``softmax(scale * Q K~^T) V~`` with ``K~``, ``V~`` the key/value tokens
  ``sparse_indices`` name (index b: tokens ``b * sparse_block_size`` onward, -1 ends the list), limited by the
  actual key length and, for ``sparse_mode`` 3, the causal limit above; ``attention_mode`` 2 (MLA absorb)
  concatenates ``query_rope``/``key_rope`` to query/key for the scores.

Layouts: query ``BSND`` or ``TND`` (cumulative ``actual_seq_lengths_query``), key ``BSND``, ``TND`` or
``PA_BSND`` (paged: ``[blocks, block_size, N2, D]`` through ``block_table``). Scores in float32. The head-dim limits
only CANN's kernels enforce (D 128 for the indexer; 512 + 64 rope for SFA) follow the ``fidelity`` setting.
No backward (inference operators; the training variants are separate operators).
"""

from __future__ import annotations

import torch

from ascendify.emulator.errors import NotEmulatedError
from ascendify.emulator.fused._check import HALF, check, dtype_in, kernel_limit, same_device

_MAX64 = 9223372036854775807


def _batches(op, x, layout, lengths):
    """[(tokens [S, N, D] of batch i, actual length)] of a BSND / TND tensor."""
    if layout == "TND":
        check(lengths is not None, op, "layout TND needs the actual sequence lengths (cumulative)")
        ends = [int(e) for e in lengths.tolist()]
        out, start = [], 0
        for e in ends:
            out.append((x[start:e], e - start))
            start = e
        return out
    check(x.dim() == 4, op, f"a BSND tensor must be 4 dimensional, but got {x.dim()}")
    lens = [int(v) for v in lengths.tolist()] if lengths is not None else [x.shape[1]] * x.shape[0]
    return [(x[i], lens[i]) for i in range(x.shape[0])]


def _keys(op, key, layout, lengths, block_table, b):
    """Per batch: ([S2, N2, D] key tokens, actual length)."""
    if layout == "PA_BSND":
        check(block_table is not None and lengths is not None, op,
              "layout PA_BSND needs block_table and the actual key lengths")
        bs = key.shape[1]
        out = []
        for i in range(b):
            n = int(lengths[i])
            pos = torch.arange(n, device=key.device)
            blocks = block_table[i].long()[pos // bs]
            out.append((key[blocks, pos % bs], n))
        return out
    return _batches(op, key, layout, lengths)


def _allowed(n_q: int, l_q: int, l_k: int, s_k: int, sparse_mode: int, device) -> torch.Tensor:
    """[n_q, s_k] bool: key position s allowed for query row t."""
    s = torch.arange(s_k, device=device)[None, :]
    ok = s < l_k
    if sparse_mode == 3:
        t = torch.arange(n_q, device=device)[:, None]
        ok = ok & (s <= (l_k - l_q) + t)
    return ok.expand(n_q, s_k)


def _layouts(op, layout_q, layout_k):
    check(layout_q in ("BSND", "TND"), op, f"layout_query must be BSND or TND, but got {layout_q!r}")
    check(layout_k in ("BSND", "TND", "PA_BSND"), op, f"layout of key must be BSND, TND or PA_BSND, got {layout_k!r}")
    check(layout_k == "PA_BSND" or layout_k == layout_q, op,
          "layout_query and the key layout must agree unless the key is paged (PA_BSND)")


def npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                          block_table=None, layout_query="BSND", layout_key="BSND", sparse_count=2048,
                          sparse_mode=3, pre_tokens=_MAX64, next_tokens=_MAX64, return_value=False):
    """``(sparse_indices int32 [B, S1, 1, sparse_count] or [T1, 1, sparse_count], sparse_values)``."""
    op = "npu_lightning_indexer"
    dtype_in(query, HALF, op, "query")
    check(key.dtype == query.dtype, op, "query and key must have the same dtype")
    check(weights.dtype in (*HALF, torch.float32), op, f"the dtype of weights must be float16/bfloat16/float32, "
                                                       f"but got {weights.dtype}")
    same_device(op, query, key=key, weights=weights, block_table=block_table)
    _layouts(op, layout_query, layout_key)
    check(sparse_mode in (0, 3), op, f"sparse_mode must be 0 or 3, but got {sparse_mode}")
    check(pre_tokens == _MAX64 and next_tokens == _MAX64, op, "pre_tokens and next_tokens only take the default")
    check(1 <= sparse_count <= 2048 or sparse_count in (3072, 4096, 5120, 6144, 7168, 8192), op,
          f"sparse_count must be in [1, 2048] or 3072..8192 in steps of 1024, but got {sparse_count}")
    check(key.shape[-2] == 1, op, f"the N of key must be 1, but got {key.shape[-2]}")
    check(query.shape[-2] <= 64, op, f"the N of query must be at most 64, but got {query.shape[-2]}")
    kernel_limit(op, query.shape[-1] == key.shape[-1] == 128, f"the D of query and key must be 128, got "
                                                              f"{query.shape[-1]} and {key.shape[-1]}")
    qs = _batches(op, query, layout_query, actual_seq_lengths_query)
    ks = _keys(op, key, layout_key, actual_seq_lengths_key, block_table, len(qs))
    ws = _batches(op, weights.unsqueeze(-1), layout_query, actual_seq_lengths_query)
    idx_out, val_out = [], []
    for (q, lq), (k, lk), (w, _) in zip(qs, ks, ws, strict=True):
        s_k = k.shape[0]
        score = torch.einsum("tgd,sd->tgs", q.float(), k[:, 0].float()).relu()
        score = (score * w.float()).sum(1)  # [S1, S2]
        ok = _allowed(q.shape[0], lq, lk, s_k, sparse_mode, q.device)
        score = score.masked_fill(~ok, float("-inf"))
        n = min(sparse_count, s_k)
        order = torch.sort(-score, dim=-1, stable=True)  # descending, ties by index
        top_v, top_i = -order.values[:, :n], order.indices[:, :n]
        top_i = torch.where(torch.isinf(top_v), torch.full_like(top_i, -1), top_i)
        pad = sparse_count - n
        top_i = torch.nn.functional.pad(top_i, (0, pad), value=-1).to(torch.int32)
        top_v = torch.nn.functional.pad(top_v, (0, pad), value=float("-inf"))
        top_i[lq:] = -1  # rows past the query's actual length
        idx_out.append(top_i[:, None])
        val_out.append(top_v[:, None].to(query.dtype))
    if layout_query == "TND":
        indices, values = torch.cat(idx_out, 0), torch.cat(val_out, 0)
    else:
        indices, values = torch.stack(idx_out, 0), torch.stack(val_out, 0)
    return indices, values if return_value else torch.empty(0, dtype=query.dtype, device=query.device)


def npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *, block_table=None,
                               actual_seq_lengths_query=None, actual_seq_lengths_kv=None, query_rope=None,
                               key_rope=None, sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
                               sparse_mode=3, pre_tokens=_MAX64, next_tokens=_MAX64, attention_mode=0,
                               return_softmax_lse=False, sinks=None):
    """``(attention_out, softmax_max, softmax_sum)``; the statistics are [B, N2, S1, N1/N2] (TND [N2, T1, N1/N2])
    when ``return_softmax_lse``, else empty tensors."""
    op = "npu_sparse_flash_attention"
    dtype_in(query, HALF, op, "query")
    check(key.dtype == query.dtype and value.dtype == query.dtype, op, "query, key and value must share a dtype")
    same_device(op, query, key=key, value=value, sparse_indices=sparse_indices, block_table=block_table,
                query_rope=query_rope, key_rope=key_rope)
    _layouts(op, layout_query, layout_kv)
    check(sparse_indices.dtype == torch.int32, op, f"the dtype of sparse_indices must be int32, got "
                                                   f"{sparse_indices.dtype}")
    check(sparse_mode in (0, 3), op, f"sparse_mode must be 0 or 3, but got {sparse_mode}")
    check(1 <= sparse_block_size <= 128 and sparse_block_size & (sparse_block_size - 1) == 0, op,
          f"sparse_block_size must be a power of 2 in [1, 128], but got {sparse_block_size}")
    check(pre_tokens == _MAX64 and next_tokens == _MAX64, op, "pre_tokens and next_tokens only take the default")
    if sinks is not None:
        raise NotEmulatedError(f"{op}: sinks are not emulated by ascendify's emulated npu device")
    check((query_rope is None) == (key_rope is None), op, "query_rope and key_rope must be given together")
    kernel_limit(op, query.shape[-1] == 512 and (query_rope is None or query_rope.shape[-1] == 64),
                 f"the D of query/key/value must be 512 and of the rope parts 64, got {query.shape[-1]}")
    qs = _batches(op, query, layout_query, actual_seq_lengths_query)
    ks = _keys(op, key, layout_kv, actual_seq_lengths_kv, block_table, len(qs))
    vs = _keys(op, value, layout_kv, actual_seq_lengths_kv, block_table, len(qs))
    qr = _batches(op, query_rope, layout_query, actual_seq_lengths_query) if query_rope is not None else None
    kr = _keys(op, key_rope, layout_kv, actual_seq_lengths_kv, block_table, len(qs)) if key_rope is not None else None
    sel = _batches(op, sparse_indices, layout_query, actual_seq_lengths_query)
    outs, maxes, sums = [], [], []
    for i, ((q, lq), (k, lk), (v, _), (ix, _)) in enumerate(zip(qs, ks, vs, sel, strict=True)):
        n1, n2 = q.shape[1], k.shape[1]
        check(n1 % n2 == 0, op, f"the query heads ({n1}) must be a multiple of the key heads ({n2})")
        qf, kf, vf = q.float(), k.float(), v.float()
        if qr is not None:
            qf = torch.cat((qf, qr[i][0].float()), -1)
            kf = torch.cat((kf, kr[i][0].float()), -1)
        s_k = kf.shape[0]
        # [S1, N2, sparse] block ids -> [S1, N2, sparse * sbs] token positions
        tok = ix.long()[..., None] * sparse_block_size + torch.arange(sparse_block_size, device=q.device)
        valid_blk = (ix.long() >= 0)[..., None].expand_as(tok)
        tok = tok.flatten(-2)
        valid = valid_blk.flatten(-2) & (tok < lk)
        if sparse_mode == 3:
            t = torch.arange(q.shape[0], device=q.device)[:, None, None]
            valid = valid & (tok <= (lk - lq) + t)
        tok = tok.clamp(0, s_k - 1)
        g = n1 // n2
        qg = qf.reshape(q.shape[0], n2, g, -1)  # [S1, N2, G, D]
        kk = kf[tok, torch.arange(n2, device=q.device)[None, :, None]]  # [S1, N2, T, D]
        vv = vf[tok, torch.arange(n2, device=q.device)[None, :, None]]
        sc = torch.einsum("sngd,sntd->sngt", qg, kk) * float(scale_value)
        sc = sc.masked_fill(~valid[:, :, None, :], float("-inf"))
        mx = sc.amax(-1, keepdim=True)
        safe = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(sc - safe)
        sm = e.sum(-1, keepdim=True)
        p = e / torch.where(sm > 0, sm, torch.ones_like(sm))
        o = torch.einsum("sngt,sntd->sngd", p, vv).reshape(q.shape[0], n1, -1)
        o[lq:] = 0
        outs.append(o.to(query.dtype))
        maxes.append(mx[..., 0].permute(1, 0, 2))  # [N2, S1, G]
        sums.append(sm[..., 0].permute(1, 0, 2))
    if layout_query == "TND":
        out, smax, ssum = torch.cat(outs, 0), torch.cat(maxes, 1), torch.cat(sums, 1)
    else:
        out, smax, ssum = torch.stack(outs, 0), torch.stack(maxes, 0), torch.stack(sums, 0)
    if not return_softmax_lse:
        empty = torch.empty(0, dtype=torch.float32, device=query.device)
        return out, empty, empty
    return out, smax, ssum


def npu_sparse_lightning_indexer_grad_kl_loss(query, key, query_index, key_index, weights, sparse_indices,
                                              softmax_max, softmax_sum, scale_value, *, query_rope=None,
                                              key_rope=None, actual_seq_qlen=None, actual_seq_klen=None,
                                              layout="BSND", sparse_mode=3, pre_tokens=_MAX64, next_tokens=_MAX64,
                                              sinks=None):
    """The lightning indexer's training step (torch_npu's page): over each query token's top-k key tokens
    (``sparse_indices``), the target ``p`` is the main attention's probability summed over the heads
    (``exp(scale * q k^T - softmax_max) / softmax_sum``, MLA rope parts included), L1-normalised; the index
    distribution is ``softmax(I)`` with ``I = sum_g weights_g * relu(q_index_g . k_index)``;
    ``loss = sum_t KL(p_t || softmax(I_t))``. The gradients of the loss for query_index, key_index and weights
    (the page's ``dI = softmax(I) - p`` chain) come from autograd. Returns
    ``(d_query_index, d_key_index, d_weights, loss [1])``. BSND with N2 = 1."""
    op = "npu_sparse_lightning_indexer_grad_kl_loss"
    dtype_in(query, HALF, op, "query")
    for arg, t in (("key", key), ("query_index", query_index), ("key_index", key_index)):
        check(t.dtype == query.dtype, op, f"{arg} must have query's dtype ({query.dtype}), but got {t.dtype}")
    same_device(op, query, key=key, query_index=query_index, key_index=key_index, weights=weights,
                sparse_indices=sparse_indices, softmax_max=softmax_max, softmax_sum=softmax_sum)
    check(layout == "BSND", op, f"layout {layout!r} is not emulated (BSND)")
    if sinks is not None:
        raise NotEmulatedError(f"{op}: sinks are not emulated by ascendify's emulated npu device")
    check(sparse_mode in (0, 3), op, f"sparse_mode must be 0 or 3, but got {sparse_mode}")
    check(key.shape[2] == 1 and key_index.shape[2] == 1, op, "the N of key and key_index must be 1")
    b, s1, n1, _ = query.shape
    qi = query_index.detach().float().requires_grad_()
    ki = key_index.detach().float().requires_grad_()
    w = weights.detach().float().requires_grad_()
    q, k = query.float(), key.float()
    if query_rope is not None:
        q, k = torch.cat((q, query_rope.float()), -1), torch.cat((k, key_rope.float()), -1)
    with torch.enable_grad():
        total = qi.new_zeros(())
        for bi in range(b):
            idx = sparse_indices[bi, :, 0].long()  # [S1, topk]
            valid = idx >= 0
            j = idx.clamp(min=0)
            # the main attention's probability of each selected key, summed over the heads
            sc = torch.einsum("snd,skd->snk", q[bi], k[bi, :, 0][j]) * float(scale_value)  # [S1, N1, topk]
            mx = softmax_max[bi, 0].float()[..., None]  # [S1, G=N1, 1]
            sm = softmax_sum[bi, 0].float()[..., None]
            p = (torch.exp(sc - mx) / sm).sum(1) * valid  # [S1, topk]
            p = p / p.sum(-1, keepdim=True).clamp_min(1e-30)
            index = torch.einsum("sgd,skd->sgk", qi[bi], ki[bi, :, 0][j]).relu()
            index = (index * w[bi][..., None]).sum(1)  # [S1, topk]
            logq = torch.log_softmax(index.masked_fill(~valid, float("-inf")), -1)
            kl = torch.where(valid & (p > 0), p * (torch.log(p.clamp_min(1e-30)) - logq), torch.zeros_like(p))
            total = total + kl.sum()
        dqi, dki, dw = torch.autograd.grad(total, (qi, ki, w))
    return (dqi.to(query_index.dtype), dki.to(key_index.dtype), dw.to(weights.dtype),
            total.detach().reshape(1))
