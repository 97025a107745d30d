"""npu_prompt_flash_attention, npu_incre_flash_attention and npu_fused_infer_attention_score."""

import pytest
import torch

from ascendify.emulator.errors import NotEmulatedError, NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def ref(q, k, v, masked=None, scale=1.0):
    """BNSD float64 attention; GQA by repeating heads."""
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k) * scale
    if masked is not None:
        s = s.masked_fill(masked, float("-inf"))
    return torch.einsum("bnqk,bnkd->bnqd", torch.softmax(s, -1), v)


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_prompt_flash_attention_causal_gqa_and_actual_lengths():
    b, n, nkv, s, d = 2, 4, 2, 12, 8
    q, k, v = rand(b, n, s, d, seed=1), rand(b, nkv, s, d, seed=2), rand(b, nkv, s, d, seed=3)
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    out = torch_npu.npu_prompt_flash_attention(
        q.half().npu(), k.half().npu(), v.half().npu(), atten_mask=causal.npu(), num_heads=n,
        num_key_value_heads=nkv, scale_value=0.3, input_layout="BNSD", actual_seq_lengths=[12, 7],
        actual_seq_lengths_kv=[12, 7])
    assert out.dtype == torch.float16 and out.shape == q.shape
    torch.testing.assert_close(out[0].cpu().float(), ref(q[:1], k[:1], v[:1], causal, 0.3)[0].float(),
                               atol=3e-3, rtol=3e-3)
    m7 = causal[:7, :7]
    torch.testing.assert_close(out[1, :, :7].cpu().float(), ref(q[1:, :, :7], k[1:, :, :7], v[1:, :, :7], m7,
                                                                0.3)[0].float(), atol=3e-3, rtol=3e-3)
    assert out[1, :, 7:].abs().sum() == 0  # rows past the actual length
    bsnd = torch_npu.npu_prompt_flash_attention(q.half().npu(), k.half().npu(), v.half().npu(), num_heads=n,
                                                num_key_value_heads=nkv, input_layout="BNSD_BSND")
    assert bsnd.shape == (b, s, n, d)


def test_incre_flash_attention_decode_with_paged_cache():
    b, n, d, block = 2, 2, 8, 4
    q = rand(b, 1, n * d, seed=4)
    lens = [7, 5]
    k_full, v_full = rand(b, 8, n * d, seed=5), rand(b, 8, n * d, seed=6)
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)  # batch 0 in blocks 3, 0; batch 1 in 1, 2
    k_cache, v_cache = torch.zeros(4, block, n * d), torch.zeros(4, block, n * d)
    for i in range(b):
        for j, blk in enumerate(table[i].tolist()):
            k_cache[blk] = k_full[i, j * block:(j + 1) * block]
            v_cache[blk] = v_full[i, j * block:(j + 1) * block]
    out = torch_npu.npu_incre_flash_attention(
        q.half().npu(), k_cache.half().npu(), v_cache.half().npu(), actual_seq_lengths=lens, num_heads=n,
        scale_value=0.35, input_layout="BSH", block_table=table.npu(), block_size=block)
    for i in range(b):
        qi = q[i:i + 1].view(1, 1, n, d).transpose(1, 2)
        ki, vi = (t[i:i + 1, :lens[i]].view(1, lens[i], n, d).transpose(1, 2) for t in (k_full, v_full))
        want = ref(qi, ki, vi, scale=0.35).transpose(1, 2).reshape(1, 1, n * d)
        torch.testing.assert_close(out[i:i + 1].cpu().float(), want.float(), atol=3e-3, rtol=3e-3)
    with pytest.raises(NpuOpError, match="query sequence length must be 1"):
        torch_npu.npu_incre_flash_attention(k_full.half().npu(), k_full.half().npu(), k_full.half().npu(),
                                            num_heads=n)


def test_fused_infer_attention_score_lse_and_refusals():
    q, k, v = rand(1, 6, 2, 8, seed=7), rand(1, 9, 2, 8, seed=8), rand(1, 9, 2, 8, seed=9)
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q.bfloat16().npu(), k.bfloat16().npu(), v.bfloat16().npu(), num_heads=2, scale=0.3, input_layout="BSND",
        softmax_lse_flag=True)
    qb, kb, vb = (t.bfloat16().float().transpose(1, 2) for t in (q, k, v))
    torch.testing.assert_close(out.cpu().float(), ref(qb, kb, vb, scale=0.3).transpose(1, 2).float(),
                               atol=2e-2, rtol=2e-2)
    want_lse = torch.logsumexp(torch.einsum("bnqd,bnkd->bnqk", qb, kb) * 0.3, -1)[..., None]
    assert lse.shape == (1, 2, 6, 1) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.cpu(), want_lse, atol=1e-2, rtol=1e-2)
    assert torch_npu.npu_fused_infer_attention_score(q.half().npu(), k.half().npu(), v.half().npu(), num_heads=2,
                                                     input_layout="BSND")[1].numel() == 0
    with pytest.raises(NpuOpError, match="dtype of query must be float16/bfloat16, but got float32"):
        torch_npu.npu_fused_infer_attention_score(q.npu(), k.npu(), v.npu(), num_heads=2, input_layout="BSND")
    with pytest.raises(NotEmulatedError, match="antiquant_scale"):
        torch_npu.npu_fused_infer_attention_score(q.half().npu(), k.half().npu(), v.half().npu(), num_heads=2,
                                                  input_layout="BSND", antiquant_scale=torch.ones(1).npu())


def test_fused_infer_attention_score_v2_mla_rope_out_overload_and_workspace():
    b, n, s, d, dr = 1, 2, 5, 8, 4
    q, k, v = rand(b, n, s, d, seed=30), rand(b, 1, s, d, seed=31), rand(b, 1, s, d, seed=32)
    qr, kr = rand(b, n, s, dr, seed=33), rand(b, 1, s, dr, seed=34)
    out, lse = torch_npu.npu_fused_infer_attention_score_v2(
        q.half().npu(), k.half().npu(), v.half().npu(), query_rope=qr.half().npu(), key_rope=kr.half().npu(),
        num_query_heads=n, num_key_value_heads=1, softmax_scale=0.4, input_layout="BNSD", return_softmax_lse=True)
    # scores of q k^T + q_rope k_rope^T: attention over the concatenated head dims, values unchanged
    want = ref(torch.cat((q, qr), -1).half(), torch.cat((k, kr), -1).half(), v.half(), None, 0.4)
    torch.testing.assert_close(out.cpu().float(), want.float(), atol=3e-3, rtol=3e-3)
    assert lse.shape == (b, n, s, 1) and lse.dtype == torch.float32
    kw = dict(num_query_heads=n, num_key_value_heads=1, softmax_scale=0.4, input_layout="BNSD")
    ws = torch_npu._npu_fused_infer_attention_score_v2_get_max_workspace(q.half().npu(), k.half().npu(),
                                                                          v.half().npu(), **kw)
    attn, lse_out = torch.empty(b, n, s, d).half().npu(), torch.empty(0).npu()
    torch_npu.npu_fused_infer_attention_score_v2.out(q.half().npu(), k.half().npu(), v.half().npu(), workspace=ws,
                                                     out=[attn, lse_out], **kw)
    plain = torch_npu.npu_fused_infer_attention_score_v2(q.half().npu(), k.half().npu(), v.half().npu(), **kw)[0]
    assert torch.equal(attn.cpu(), plain.cpu())
    assert torch_npu._npu_fused_infer_attention_score_get_max_workspace(q.half().npu(), k.half().npu(),
                                                                         v.half().npu()).numel() == 0
    with pytest.raises(NotEmulatedError, match="learnable_sink"):
        torch_npu.npu_fused_infer_attention_score_v2(q.half().npu(), k.half().npu(), v.half().npu(),
                                                     learnable_sink=torch.zeros(n).npu(), **kw)


def test_attention_update_merges_partial_softmax_results():
    parts = [rand(2, 3, 8, seed=40 + i) for i in range(3)]
    k = [rand(2, 5 + i, 8, seed=50 + i) for i in range(3)]
    vv = [rand(2, 5 + i, 8, seed=60 + i) for i in range(3)]
    # each rank attends to its own keys: out_i and lse_i; the merge equals attention over all keys
    lses, outs = [], []
    for i in range(3):
        s = torch.einsum("hqd,hkd->hqk", parts[0], k[i])
        lses.append(torch.logsumexp(s, -1).reshape(-1))
        outs.append(torch.einsum("hqk,hkd->hqd", torch.softmax(s, -1), vv[i]).reshape(-1, 8))
    out, lse = torch_npu.npu_attention_update([t.npu() for t in lses], [t.npu() for t in outs], 1)
    s_all = torch.einsum("hqd,hkd->hqk", parts[0], torch.cat(k, 1))
    want = torch.einsum("hqk,hkd->hqd", torch.softmax(s_all, -1), torch.cat(vv, 1)).reshape(-1, 8)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(s_all, -1).reshape(-1), rtol=1e-5, atol=1e-5)
    with pytest.raises(NpuOpError, match="multiple of 8"):
        torch_npu.npu_attention_update([lses[0].npu()], [outs[0][:, :6].npu()], 0)
