"""MoE routing: npu_moe_init_routing(_v2), npu_moe_finalize_routing, npu_moe_token_permute / unpermute and
npu_moe_gating_top_k, against the "equivalent computation" Python of torch_npu's pages and op-plugin's tests
(rewritten here as plain loops)."""

import pytest
import torch

from ascendify.emulator.errors import NotEmulatedError, NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_init_routing_matches_the_documented_sort():
    rows, k, h = 6, 2, 4
    x = torch.randn(rows, h, generator=gen(0))
    expert = torch.randint(0, 5, (rows, k), generator=gen(1), dtype=torch.int32)
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).t().contiguous()
    ex, er, ee = torch_npu.npu_moe_init_routing(x.npu(), row_idx.npu(), expert.npu(), active_num=4)
    flat_e, flat_r = expert.reshape(-1).tolist(), row_idx.reshape(-1).tolist()
    order = sorted(range(rows * k), key=lambda i: (flat_e[i], i))  # stable sort by expert
    dst_to_src = [flat_r[i] for i in order]
    assert ee.cpu().tolist() == sorted(flat_e)
    want_row = [0] * (rows * k)
    for i, src in enumerate(dst_to_src):
        want_row[src] = i
    assert er.cpu().tolist() == want_row and er.dtype == torch.int32
    assert ex.shape == (4 * k, h)
    assert torch.equal(ex.cpu(), x[[d % rows for d in dst_to_src[:4 * k]]])


def test_init_routing_v2_dropless_drop_pad_counts_and_quant():
    rows, k, h, experts = 5, 2, 8, 4
    x = torch.randn(rows, h, generator=gen(2))
    expert = torch.tensor([[0, 3], [1, 0], [3, 3], [2, 0], [1, 1]], dtype=torch.int32)
    flat = expert.reshape(-1).tolist()
    order = sorted(range(rows * k), key=lambda i: (flat[i], i))
    ex, er, cnt, _ = torch_npu.npu_moe_init_routing_v2(x.npu(), expert.npu(), expert_num=experts,
                                                       expert_tokens_num_flag=True, expert_tokens_num_type=1)
    assert torch.equal(ex.cpu(), x[[i // k for i in order]])
    gather = [0] * (rows * k)
    for pos, i in enumerate(order):
        gather[i] = pos
    assert er.cpu().tolist() == gather
    assert cnt.cpu().tolist() == [flat.count(e) for e in range(experts)] and cnt.dtype == torch.int64
    _, scatter, cum, _ = torch_npu.npu_moe_init_routing_v2(x.npu(), expert.npu(), expert_num=experts, row_idx_type=1,
                                                           expert_tokens_num_flag=True, expert_tokens_num_type=0)
    assert scatter.cpu().tolist() == order and cum.cpu().tolist() == [3, 6, 7, 10]
    # active range [1, 3): experts 0 and 3 are dropped (-1 in the gather index)
    ar, er2, kv, _ = torch_npu.npu_moe_init_routing_v2(x.npu(), expert.npu(), expert_num=experts,
                                                       active_expert_range=[1, 3], expert_tokens_num_flag=True,
                                                       expert_tokens_num_type=2)
    active = [i for i in order if 1 <= flat[i] < 3]
    assert torch.equal(ar.cpu(), x[[i // k for i in active]])
    assert sum(1 for v in er2.tolist() if v >= 0) == len(active)
    assert kv.cpu().tolist()[:2] == [[1, 3], [2, 1]]
    # drop/pad: [experts, capacity, H], tokens past the capacity dropped, the rest zero-padded
    dp, erd, _, _ = torch_npu.npu_moe_init_routing_v2(x.npu(), expert.npu(), expert_num=experts, drop_pad_mode=1,
                                                      expert_capacity=2)
    assert dp.shape == (experts, 2, h)
    assert torch.equal(dp[0, 0].cpu(), x[0]) and torch.equal(dp[0, 1].cpu(), x[1])  # expert 0: tokens 0, 1
    assert torch.equal(dp[2, 1].cpu(), torch.zeros(h))  # expert 2 has one token
    assert erd.cpu().tolist()[7] == -1  # token 3's expert 0 slot: third for expert 0, dropped
    # dynamic int8 quantisation per expanded row
    q, _, _, qs = torch_npu.npu_moe_init_routing_v2(x.npu(), expert.npu(), expert_num=experts, quant_mode=1)
    rows_x = x[[i // k for i in order]]
    ref_s = rows_x.abs().amax(-1) / 127
    assert q.dtype == torch.int8 and torch.equal(qs.cpu(), ref_s)
    assert torch.equal(q.cpu(), torch.round(rows_x / ref_s[:, None]).to(torch.int8))
    with pytest.raises(NotEmulatedError, match="quant_mode 9"):
        torch_npu.npu_moe_init_routing_v2(x.npu(), expert.npu(), expert_num=experts, quant_mode=9)
    with pytest.raises(NpuOpError, match="only 2d"):
        torch_npu.npu_moe_init_routing_v2(x[0].npu(), expert.npu())


def test_finalize_routing_column_and_row_orders():
    rows, k, h, e = 4, 2, 3, 5
    permuted = torch.randn(rows * k, h, generator=gen(3))
    skip1, skip2 = torch.randn(rows, h, generator=gen(4)), torch.randn(rows, h, generator=gen(5))
    bias, scales = torch.randn(e, h, generator=gen(6)), torch.rand(rows, k, generator=gen(7))
    src_to_dst = torch.randperm(rows * k, generator=gen(8)).int()
    expert = torch.randint(0, e, (rows, k), generator=gen(9), dtype=torch.int32)
    out = torch_npu.npu_moe_finalize_routing(permuted.npu(), skip1.npu(), skip2.npu(), bias.npu(), scales.npu(),
                                             src_to_dst.npu(), expert.npu())
    want = skip1 + skip2
    for i in range(rows):
        for j in range(k):
            want[i] += scales[i, j] * (permuted[src_to_dst[j * rows + i]] + bias[expert[i, j]])
    torch.testing.assert_close(out.cpu(), want)
    row_order = torch_npu.npu_moe_finalize_routing(permuted.npu(), None, None, None, scales.npu(),
                                                   src_to_dst.npu(), None, drop_pad_mode=2)
    want2 = torch.stack([sum(scales[i, j] * permuted[src_to_dst[i * k + j]] for j in range(k)) for i in range(rows)])
    torch.testing.assert_close(row_order.cpu(), want2)
    with pytest.raises(NpuOpError, match="skip2 must be None when skip1 is None"):
        torch_npu.npu_moe_finalize_routing(permuted.npu(), None, skip2.npu(), None, scales.npu(),
                                           src_to_dst.npu(), None)


def megatron_permute(tokens, indices, num_out=None):
    """op-plugin's test reference (Megatron's permute): sorted by expert, stable."""
    topk = indices.shape[1]
    order = torch.argsort(indices.reshape(-1), stable=True)
    if num_out is not None:
        order = order[:num_out]
    return tokens.index_select(0, order // topk), order


def test_token_permute_unpermute_round_trip_and_gradients():
    tokens = torch.randn(6, 4, generator=gen(10), dtype=torch.float64, requires_grad=True)
    indices = torch.randint(0, 3, (6, 2), generator=gen(11))
    probs = torch.rand(6, 2, generator=gen(12), dtype=torch.float64, requires_grad=True)
    perm, sorted_idx = torch_npu.npu_moe_token_permute(tokens, indices)
    ref, order = megatron_permute(tokens, indices)
    assert torch.equal(perm, ref)
    assert sorted_idx.dtype == torch.int32
    assert torch.equal(sorted_idx.long(), torch.argsort(order, stable=True))  # the fused op's second argsort
    out = torch_npu.npu_moe_token_unpermute(perm, sorted_idx, probs=probs)
    torch.testing.assert_close(out, tokens * probs.sum(1, keepdim=True))  # every token back, weighted
    assert torch.autograd.gradcheck(
        lambda t, p: torch_npu.npu_moe_token_unpermute(torch_npu.npu_moe_token_permute(t, indices)[0],
                                                       sorted_idx, probs=p), (tokens, probs))
    t32 = tokens.detach().float()
    dropped, _ = torch_npu.npu_moe_token_permute(t32.npu(), indices.npu(), num_out_tokens=-2)
    assert dropped.shape == (10, 4) and dropped.device.type == "npu"
    padded = torch.tensor([[0, 2], [1, 5], [3, 4]])  # [experts, capacity] token ids
    p2, idx2 = torch_npu.npu_moe_token_permute(t32.npu(), padded.npu(), padded_mode=True)
    assert torch.equal(p2.cpu(), t32[padded.reshape(-1)]) and torch.equal(idx2.cpu(), padded)
    back = torch_npu.npu_moe_token_unpermute(p2, idx2, probs=torch.ones(3, 2).npu(), padded_mode=True,
                                             restore_shape=[6, 4])
    torch.testing.assert_close(back.cpu(), t32)


def test_gating_top_k_groups_sigmoid_renorm_and_refusals():
    x = torch.randn(3, 16, generator=gen(13))
    bias = torch.randn(16, generator=gen(14))
    y, idx, norm = torch_npu.npu_moe_gating_top_k(x.npu(), 3, bias=bias.npu(), k_group=2, group_count=4,
                                                  group_select_mode=1, norm_type=1, routed_scaling_factor=2.5)
    s = torch.sigmoid(x)
    torch.testing.assert_close(norm.cpu(), s)
    for r in range(3):
        biased = (s[r] + bias).tolist()
        groups = [biased[g * 4:(g + 1) * 4] for g in range(4)]
        score = [sum(sorted(g)[-2:]) for g in groups]
        keep = sorted(range(4), key=lambda g: (-score[g], g))[:2]
        cand = [(biased[i], i) for i in range(16) if i // 4 in keep]
        top = [i for _, i in sorted(cand, key=lambda t: (-t[0], t[1]))[:3]]
        assert idx[r].tolist() == top
        w = s[r, top]
        torch.testing.assert_close(y[r].cpu(), w / (w.sum() + 1e-20) * 2.5)
    with pytest.raises(NpuOpError, match="k must be in"):
        torch_npu.npu_moe_gating_top_k(x.npu(), 9, k_group=2, group_count=4)
    with pytest.raises(NotEmulatedError, match="hash mode"):
        torch_npu.npu_moe_gating_top_k(x.npu(), 2, input_ids=torch.zeros(3, dtype=torch.int32).npu(),
                                       tid2eid=torch.zeros(4, 2, dtype=torch.int32).npu())
