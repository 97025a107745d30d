"""KV caches and vllm-ascend's ATB attention: npu_scatter_pa_kv_cache / npu_gather_pa_kv_cache,
_npu_reshape_and_cache, npu_scatter_nd_update_, _npu_paged_attention, _npu_flash_attention(_unpad),
_npu_rotary_embedding, against loops written from the pages and op-plugin's references."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def attention_ref(q, k, v, scale, mask=None):
    """q [Sq, N, D], k/v [Skv, Nkv, D]; GQA by repeating key/value heads."""
    g = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
    s = torch.einsum("qnd,knd->nqk", q.float(), k) * scale
    if mask is not None:
        s = s + mask
    return torch.einsum("nqk,knd->qnd", torch.softmax(s, -1), v)


def test_scatter_then_gather_kv_cache_nd_and_nz():
    nb, bs, n, d = 4, 4, 2, 8
    kc, vc = torch.zeros(nb, bs, n, d, dtype=torch.float16), torch.zeros(nb, bs, n, d, dtype=torch.float16)
    key, value = rand(5, n, d, seed=1), rand(5, n, d, seed=2)
    slots = torch.tensor([0, 5, 6, -1, 13], dtype=torch.int32)  # -1: a padding token, skipped
    kn, vn = kc.npu(), vc.npu()
    torch_npu.npu_scatter_pa_kv_cache(key.npu(), value.npu(), kn, vn, slots.npu(), cache_mode="Norm")
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(kn[slot // bs, slot % bs].cpu(), key[t])
            assert torch.equal(vn[slot // bs, slot % bs].cpu(), value[t])
    assert int((kn.cpu() != 0).any(-1).any(-1).sum()) == 4  # four slots written
    # NZ: a token's H = N * D values spread over [H / last, last]
    nz = torch.zeros(nb, n * d // 4, bs, 4, dtype=torch.float16).npu()
    torch_npu.npu_scatter_pa_kv_cache(key.npu(), value.npu(), nz, nz.clone(), slots.npu())
    assert torch.equal(nz[3, :, 1, :].cpu(), key[4].reshape(n * d // 4, 4))
    nz5 = torch.zeros(nb, n, d // 4, bs, 4, dtype=torch.float16).npu()  # vllm-ascend's 5-D view of the same layout
    torch_npu.npu_scatter_pa_kv_cache(key.npu(), value.npu(), nz5, nz5.clone(), slots.npu())
    assert torch.equal(nz5.reshape(nb, -1, bs, 4).cpu(), nz.cpu())
    # gather back batch 0 (5 tokens from blocks [1, 3]) and batch 1 (2 tokens from block [0])
    out_k, out_v = torch.zeros(7, n, d, dtype=torch.float16).npu(), torch.zeros(7, n, d, dtype=torch.float16).npu()
    tables = torch.tensor([[1, 3], [0, 0]], dtype=torch.int32)
    torch_npu.npu_gather_pa_kv_cache(kn, vn, tables.npu(), torch.tensor([5, 2], dtype=torch.int32).npu(), out_k, out_v)
    want = torch.cat([kn[1].cpu(), kn[3, :1].cpu(), kn[0, :2].cpu()])
    assert torch.equal(out_k.cpu(), want)
    with pytest.raises(NpuOpError, match="one slot per token"):
        torch_npu.npu_scatter_pa_kv_cache(key.npu(), value.npu(), kn, vn, slots[:3].npu(), cache_mode="Norm")


def test_reshape_and_cache_and_scatter_nd_update():
    kc = torch.zeros(2, 4, 1, 8, dtype=torch.bfloat16).npu()
    k = rand(3, 1, 8, seed=3, dtype=torch.bfloat16)
    torch_npu._npu_reshape_and_cache(k.npu(), k.npu(), kc, kc.clone(), torch.tensor([7, 0, 2], dtype=torch.int32).npu())
    assert torch.equal(kc[1, 3].cpu(), k[0]) and torch.equal(kc[0, 2].cpu(), k[2])
    with pytest.raises(NpuOpError, match="slot_indices must be int32"):
        torch_npu._npu_reshape_and_cache(k.npu(), k.npu(), kc, kc, torch.tensor([1, 2, 3]).npu())
    x = torch.zeros(4, 3)
    upd = torch.arange(6.0).reshape(2, 3)
    out = torch_npu.npu_scatter_nd_update_(x.npu(), torch.tensor([[1], [3]]).npu(), upd.npu())
    assert torch.equal(out.cpu(), torch.tensor([[0.0] * 3, [0, 1, 2], [0.0] * 3, [3, 4, 5]]))


def test_paged_attention_decodes_through_the_block_table():
    nb, bs, nkv, n, d = 6, 4, 2, 4, 16
    kc, vc = rand(nb, bs, nkv, d, seed=4), rand(nb, bs, nkv, d, seed=5)
    q = rand(2, n, d, seed=6)
    table = torch.tensor([[2, 5, 0], [1, 3, 4]], dtype=torch.int32)
    lens = torch.tensor([7, 10], dtype=torch.int32)
    out = torch.empty(2, n, d, dtype=torch.float16).npu()
    torch_npu._npu_paged_attention(q.npu(), kc.npu(), vc.npu(), nkv, n, 0.25, table.npu(), lens, out)
    for i in range(2):
        pos = range(int(lens[i]))
        ks = torch.stack([kc[table[i, p // bs], p % bs] for p in pos])
        vs = torch.stack([vc[table[i, p // bs], p % bs] for p in pos])
        want = attention_ref(q[i:i + 1], ks, vs, 0.25)[0]
        torch.testing.assert_close(out[i].cpu().float(), want, rtol=2e-3, atol=2e-3)
    ws = torch_npu._npu_paged_attention_get_workspace(q.npu(), kc.npu(), vc.npu(), nkv, n, 0.25, table.npu(), lens,
                                                      out)
    assert ws.numel() == 0 and ws.device.type == "npu"
    with pytest.raises(NpuOpError, match="multiple of num_kv_heads"):
        torch_npu._npu_paged_attention(q.npu(), kc.npu(), vc.npu(), 3, n, 0.25, table.npu(), lens, out)


def test_unpadded_flash_attention_with_and_without_a_mask():
    n, d = 2, 8
    q, k, v = rand(7, n, d, seed=7), rand(7, n, d, seed=8), rand(7, n, d, seed=9)
    seq = torch.tensor([3, 4], dtype=torch.int32)
    causal = torch.triu(torch.full((4, 4), -10000.0), 1).half()
    out = torch.empty(7, n, d, dtype=torch.float16).npu()
    torch_npu._npu_flash_attention(q.npu(), k.npu(), v.npu(), causal.npu(), seq, 0.5, n, n, out)
    for lo, hi in ((0, 3), (3, 7)):
        m = causal[:hi - lo, :hi - lo].float()
        want = attention_ref(q[lo:hi], k[lo:hi], v[lo:hi], 0.5, m)
        torch.testing.assert_close(out[lo:hi].cpu().float(), want, rtol=2e-3, atol=2e-3)
    full = torch.empty(7, n, d, dtype=torch.float16).npu()
    torch_npu._npu_flash_attention_unpad(q.npu(), k.npu(), v.npu(), seq, 0.5, n, n, full)
    torch.testing.assert_close(full[:3].cpu().float(), attention_ref(q[:3], k[:3], v[:3], 0.5), rtol=2e-3, atol=2e-3)


def test_rotary_embedding_neox_and_gptj_in_place():
    t, n, hs, rot = 3, 2, 8, 4
    cache = rand(10, rot, seed=10, dtype=torch.float32)  # [max_pos, cos | sin]
    pos = torch.tensor([4, 0, 9])
    for neox in (True, False):
        q, k = rand(t, n * hs, seed=11), rand(t, n * hs, seed=12)
        qn, kn = q.npu(), k.npu()
        torch_npu._npu_rotary_embedding(pos.npu(), qn, kn, hs, cache.npu(), neox)
        cos, sin = cache[pos, :2], cache[pos, 2:]
        x = q.float().reshape(t, n, hs)
        r = x[..., :rot]
        if neox:
            a, b = r[..., :2], r[..., 2:]
            new = torch.cat((a * cos[:, None] - b * sin[:, None], b * cos[:, None] + a * sin[:, None]), -1)
        else:
            a, b = r[..., 0::2], r[..., 1::2]
            new = torch.stack((a * cos[:, None] - b * sin[:, None], b * cos[:, None] + a * sin[:, None]), -1)
            new = new.flatten(-2)
        want = torch.cat((new, x[..., rot:]), -1).reshape(t, -1).half()
        torch.testing.assert_close(qn.cpu(), want, rtol=1e-3, atol=1e-3)


def test_kv_rmsnorm_rope_cache_norm_and_paged_modes():
    b, s = 2, 3
    kv = rand(b, 1, s, 576, seed=20)
    gamma = rand(512, seed=21)
    cos, sin = rand(b, 1, s, 64, seed=22), rand(b, 1, s, 64, seed=23)
    x = kv.float()
    y = x[..., :512] / torch.sqrt(x[..., :512].pow(2).mean(-1, keepdim=True) + 1e-5) * gamma.float()
    r = x[..., 512:]
    k = torch.cat((r[..., 0::2], r[..., 1::2]), -1)  # view(.., 32, 2).transpose: evens then odds
    k_embed = k * cos.float() + torch.cat((-k[..., 32:], k[..., :32]), -1) * sin.float()
    kc, ckc = torch.zeros(b, 1, 8, 64).half().npu(), torch.zeros(b, 1, 8, 512).half().npu()
    index = torch.tensor([[0, 1, 2], [5, 6, 7]])
    outs = torch_npu.npu_kv_rmsnorm_rope_cache(kv.npu(), gamma.npu(), cos.npu(), sin.npu(), index.npu(), kc, ckc,
                                               is_output_kv=True)
    assert outs[0] is kc and outs[1] is ckc
    torch.testing.assert_close(kc[1, 0, 6].cpu().float(), k_embed[1, 0, 1], rtol=2e-3, atol=2e-2)
    torch.testing.assert_close(ckc[0, 0, 2].cpu().float(), y[0, 0, 2], rtol=2e-3, atol=2e-2)
    torch.testing.assert_close(outs[3].cpu().float(), y, rtol=2e-3, atol=2e-2)
    pk, pc = torch.zeros(4, 2, 1, 64).half().npu(), torch.zeros(4, 2, 1, 512).half().npu()
    slots = torch.tensor([3, -1, 0, 7, 6, 1])
    torch_npu.npu_kv_rmsnorm_rope_cache(kv.npu(), gamma.npu(), cos.npu(), sin.npu(), slots.npu(), pk, pc,
                                        cache_mode="PA")
    torch.testing.assert_close(pk.view(8, 64)[7].cpu().float(), k_embed[1, 0, 0], rtol=2e-3, atol=2e-2)
    assert not pk.view(8, 64)[[2, 4, 5]].any()  # the -1 slot wrote nothing


def test_flash_attention_unpad_v2_equals_v1():
    n, d = 2, 8
    q, k, v = rand(5, n, d, seed=24), rand(5, n, d, seed=25), rand(5, n, d, seed=26)
    seq = torch.tensor([2, 3], dtype=torch.int32)
    a, b_ = torch.empty(5, n, d).half().npu(), torch.empty(5, n, d).half().npu()
    torch_npu._npu_flash_attention_unpad(q.npu(), k.npu(), v.npu(), seq, 0.3, n, n, a)
    torch_npu._npu_flash_attention_unpad_v2(q.npu(), k.npu(), v.npu(), seq, 0.3, n, n, kernel_type=2, out=b_)
    assert torch.equal(a.cpu(), b_.cpu())
