"""DeepSeek sparse attention: npu_lightning_indexer's top-k against the page's formula, and
npu_sparse_flash_attention against dense attention restricted to the chosen tokens."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_lightning_indexer_topk_of_weighted_relu_scores_with_causal_limit():
    b, s1, s2, g, d = 1, 3, 6, 2, 128
    q, k, w = rand(b, s1, g, d, seed=1), rand(b, s2, 1, d, seed=2), rand(b, s1, g, seed=3)
    idx, vals = torch_npu.npu_lightning_indexer(q.npu(), k.npu(), w.npu(), sparse_count=4, sparse_mode=3,
                                                return_value=True)
    assert idx.shape == (b, s1, 1, 4) and idx.dtype == torch.int32
    for t in range(s1):
        limit = (s2 - s1) + t  # bottom-right causal: key j <= (Lk - Lq) + t
        score = {j: sum(float(w[0, t, h]) * max(0.0, float(q[0, t, h].float() @ k[0, j, 0].float()))
                        for h in range(g)) for j in range(limit + 1)}
        best = sorted(score, key=lambda j: (-score[j], j))[:4]
        got = [j for j in idx[0, t, 0].tolist() if j >= 0]
        assert got == best, (t, got, best)
        assert idx[0, t, 0].tolist()[len(best):] == [-1] * (4 - len(best))
    torch.testing.assert_close(vals[0, 2, 0, 0].cpu().float(), torch.tensor(max(score.values())), rtol=1e-2, atol=1e-2)
    with pytest.raises(NpuOpError, match="the N of key must be 1"):
        torch_npu.npu_lightning_indexer(q.npu(), rand(b, s2, 2, d, seed=4).npu(), w.npu())


def test_sparse_flash_attention_attends_to_the_selected_tokens_only():
    b, s1, s2, n, d, dr = 1, 2, 8, 2, 512, 64
    q, k = rand(b, s1, n, d, seed=5), rand(b, s2, 1, d, seed=6)
    qr, kr = rand(b, s1, n, dr, seed=7), rand(b, s2, 1, dr, seed=8)
    sel = torch.tensor([[[[1, 4, 7, -1]], [[0, 2, 3, 7]]]], dtype=torch.int32)  # [B, S1, N2, sparse]
    out, mx, sm = torch_npu.npu_sparse_flash_attention(q.npu(), k.npu(), k.npu(), sel.npu(), 0.05,
                                                       query_rope=qr.npu(), key_rope=kr.npu(), sparse_mode=0,
                                                       attention_mode=2, return_softmax_lse=True)
    for t in range(s1):
        keep = [j for j in sel[0, t, 0].tolist() if j >= 0]
        qq = torch.cat((q[0, t], qr[0, t]), -1).float()  # [N, D + Dr]
        kk = torch.cat((k[0, keep, 0], kr[0, keep, 0]), -1).float()
        p = torch.softmax(qq @ kk.t() * 0.05, -1)
        torch.testing.assert_close(out[0, t].cpu().float(), p @ k[0, keep, 0].float(), rtol=2e-3, atol=2e-3)
    assert mx.shape == (b, 1, s1, n) and sm.shape == (b, 1, s1, n)
    # sparse_mode 3: query row 0 may see keys j <= 6 only, so index 7 drops out
    out3, _, _ = torch_npu.npu_sparse_flash_attention(q.npu(), k.npu(), k.npu(), sel.npu(), 0.05,
                                                      query_rope=qr.npu(), key_rope=kr.npu(), attention_mode=2)
    qq = torch.cat((q[0, 0], qr[0, 0]), -1).float()
    kk = torch.cat((k[0, [1, 4], 0], kr[0, [1, 4], 0]), -1).float()
    want = torch.softmax(qq @ kk.t() * 0.05, -1) @ k[0, [1, 4], 0].float()
    torch.testing.assert_close(out3[0, 0].cpu().float(), want, rtol=2e-3, atol=2e-3)
    with pytest.raises(NpuOpError, match="sparse_block_size must be a power of 2"):
        torch_npu.npu_sparse_flash_attention(q.npu(), k.npu(), k.npu(), sel.npu(), 0.05, sparse_block_size=3)


def test_indexer_kl_loss_and_its_gradients():
    b, s, n1, g, d, di = 1, 3, 2, 2, 16, 8
    q, k = rand(b, s, n1, d, seed=10), rand(b, s + 2, 1, d, seed=11)
    qi, ki, w = rand(b, s, g, di, seed=12), rand(b, s + 2, 1, di, seed=13), rand(b, s, g, seed=14)
    sel = torch.tensor([[[[0, 2, 4]], [[1, 3, -1]], [[4, 0, 2]]]], dtype=torch.int32)
    scale = 0.25
    # the main attention's row statistics over the selected keys (as sparse_flash_attention returns them)
    mx, sm = torch.zeros(b, 1, s, n1), torch.zeros(b, 1, s, n1)
    for t in range(s):
        keep = [j for j in sel[0, t, 0].tolist() if j >= 0]
        sc = q[0, t].float() @ k[0, keep, 0].float().t() * scale
        mx[0, 0, t] = sc.max(-1).values
        sm[0, 0, t] = torch.exp(sc - mx[0, 0, t][:, None]).sum(-1)
    dqi, dki, dw, loss = torch_npu.npu_sparse_lightning_indexer_grad_kl_loss(
        q.npu(), k.npu(), qi.npu(), ki.npu(), w.npu(), sel.npu(), mx.npu(), sm.npu(), scale)
    rqi, rki, rw = (t.float().requires_grad_() for t in (qi, ki, w))
    total = 0.0
    for t in range(s):
        keep = [j for j in sel[0, t, 0].tolist() if j >= 0]
        p = torch.softmax(q[0, t].float() @ k[0, keep, 0].float().t() * scale, -1).sum(0)
        p = p / p.sum()
        index = (torch.relu(rqi[0, t] @ rki[0, keep, 0].t()) * rw[0, t][:, None]).sum(0)
        total = total + (p * (p.log() - torch.log_softmax(index, -1))).sum()
    want = torch.autograd.grad(total, (rqi, rki, rw))
    torch.testing.assert_close(loss.cpu(), total.detach().reshape(1), rtol=1e-5, atol=1e-6)
    for got, ref in zip((dqi, dki, dw), want, strict=True):
        torch.testing.assert_close(got.cpu().float(), ref, rtol=2e-2, atol=2e-3)
