"""Quantised matrix products: npu_quant_matmul (int8, int4, int64 scales, MXFP8), npu_weight_quant_batchmatmul,
npu_transpose_batchmatmul, npu_transpose_quant_batchmatmul and the quantised npu_grouped_matmul, against
references written from torch_npu's formulas (integer paths bit for bit)."""

import pytest
import torch

from ascendify.emulator.errors import NotEmulatedError, NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def ints(*shape, seed=0, lo=-128, hi=128, dtype=torch.int8):
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int64).to(dtype)


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def pack(v: torch.Tensor) -> torch.Tensor:
    """int4 values -> int32 words of eight, the first in bits 0-3 (npu_convert_weight_to_int4pack's layout)."""
    v = v.long() & 15
    words = sum(v[..., n::8] << (4 * n) for n in range(8))
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


@pytest.fixture
def ascend950(fresh_report):
    fresh_report.settings.device_name = "Ascend950PR"
    return fresh_report


def test_quant_matmul_int8_exact_accumulation_bias_offset_and_outputs():
    a, b = ints(5, 64, seed=1), ints(64, 7, seed=2)
    acc = a.long() @ b.long()  # exact
    bias = ints(7, seed=3, lo=-1000, hi=1000, dtype=torch.int32)
    scale = rand(7, seed=4).abs() / 1000
    y = torch_npu.npu_quant_matmul(a.npu(), b.npu(), scale.npu(), bias=bias.npu(), output_dtype=torch.float16)
    torch.testing.assert_close(y.cpu(), ((acc + bias).float() * scale).half(), rtol=0, atol=0)
    q = torch_npu.npu_quant_matmul(a.npu(), b.npu(), scale.npu(), offset=torch.tensor([0.5]).npu())
    assert q.dtype == torch.int8  # the default output
    assert torch.equal(q.cpu(), torch.round(acc.float() * scale + 0.5).clamp(-128, 127).to(torch.int8))
    assert torch.equal(torch_npu.npu_quant_matmul(a.npu(), b.npu(), scale.npu(), output_dtype=torch.int32).cpu(),
                       acc.int())
    pts = rand(5, seed=5).abs()
    yb = torch_npu.npu_quant_matmul(a.npu(), b.npu(), scale.npu(), pertoken_scale=pts.npu(),
                                    bias=rand(7, seed=6).bfloat16().npu(), output_dtype=torch.bfloat16)
    assert yb.dtype == torch.bfloat16
    # an int64 scale from npu_trans_quant_param carries the float's top 19 bits
    s64 = torch_npu.npu_trans_quant_param(scale.npu())
    y64 = torch_npu.npu_quant_matmul(a.npu(), b.npu(), s64, output_dtype=torch.float16)
    fp19 = (scale.view(torch.int32) & -8192).view(torch.float32)
    torch.testing.assert_close(y64.cpu(), (acc.float() * fp19).half(), rtol=0, atol=0)
    with pytest.raises(NpuOpError, match="must have the same dtype"):
        torch_npu.npu_quant_matmul(a.npu(), b.int().npu(), scale.npu())
    with pytest.raises(NpuOpError, match="2 to 6 dims"):
        torch_npu.npu_quant_matmul(a[0].npu(), b.npu(), scale.npu())


def test_quant_matmul_int4_words_including_the_transposed_right_operand():
    a, b = ints(4, 16, seed=7, lo=-8, hi=8), ints(16, 24, seed=8, lo=-8, hi=8)
    acc = a.long() @ b.long()
    s = torch.ones(1)
    y = torch_npu.npu_quant_matmul(pack(a).npu(), pack(b).npu(), s.npu(), output_dtype=torch.float16)
    torch.testing.assert_close(y.cpu().float(), acc.float())
    bt = pack(b.t().contiguous()).t()  # (k/8, n) view of a contiguous (n, k/8)
    yt = torch_npu.npu_quant_matmul(pack(a).npu(), bt.npu(), s.npu(), output_dtype=torch.float16)
    torch.testing.assert_close(yt.cpu().float(), acc.float())


def test_quant_matmul_mxfp8_matches_blockwise_dequantised_product(ascend950):
    x, w = rand(8, 128, seed=9, dtype=torch.bfloat16), rand(16, 128, seed=10, dtype=torch.bfloat16)
    xq, xs = torch_npu.npu_dynamic_mx_quant(x.npu(), axis=-1, dst_type=torch.float8_e4m3fn)
    wq, ws = torch_npu.npu_dynamic_mx_quant(w.npu(), axis=-1, dst_type=torch.float8_e4m3fn)
    y = torch_npu.npu_quant_matmul(xq, wq.t(), ws.transpose(0, 1), pertoken_scale=xs, output_dtype=torch.bfloat16,
                                   scale_dtype=torch_npu.float8_e8m0fnu, pertoken_scale_dtype=torch_npu.float8_e8m0fnu,
                                   group_sizes=[1, 1, 32])

    def deq(q, s):  # value * 2**(bits - 127), block of 32 along the last axis; pairs flattened
        e = s.cpu().reshape(s.shape[0], -1).long()[:, :4] - 127
        return q.cpu().float() * torch.pow(2.0, e.float()).repeat_interleave(32, -1)

    want = deq(xq, xs) @ deq(wq, ws).t()
    torch.testing.assert_close(y.cpu().float(), want, rtol=1e-2, atol=1e-2)
    ref = x.float() @ w.float().t()  # and MXFP8 is close to the unquantised product
    assert (y.cpu().float() - ref).abs().max() < 0.1 * ref.abs().max()


def test_weight_quant_batchmatmul_per_channel_group_int4_and_quant_output():
    x = rand(3, 64, seed=11, dtype=torch.float16)
    w = ints(64, 8, seed=12)
    s, o = rand(8, seed=13).abs().half(), rand(8, seed=14).half()
    y = torch_npu.npu_weight_quant_batchmatmul(x.npu(), w.npu(), s.npu(), o.npu())
    want = x.float() @ ((w.float() + o.float()) * s.float())
    torch.testing.assert_close(y.cpu().float(), want, rtol=2e-3, atol=2e-3)
    sg = rand(2, 8, seed=15).abs().half()  # groups of 32 rows of K
    yg = torch_npu.npu_weight_quant_batchmatmul(x.npu(), w.npu(), sg.npu(), antiquant_group_size=32)
    wg = w.float() * sg.float().repeat_interleave(32, 0)
    torch.testing.assert_close(yg.cpu().float(), x.float() @ wg, rtol=2e-3, atol=2e-3)
    w4 = ints(64, 16, seed=16, lo=-8, hi=8)
    y4 = torch_npu.npu_weight_quant_batchmatmul(x.npu(), torch_npu.npu_convert_weight_to_int4pack(
        w4.int().npu()), torch.ones(16).half().npu())
    torch.testing.assert_close(y4.cpu().float(), x.float() @ w4.float(), rtol=2e-3, atol=2e-3)
    q = torch_npu.npu_weight_quant_batchmatmul(x.npu(), w.npu(), s.npu(), quant_scale=torch.tensor([0.01]).npu())
    assert q.dtype == torch.int8
    with pytest.raises(NpuOpError, match="multiple of 32 in \\[32, K-1\\]"):
        torch_npu.npu_weight_quant_batchmatmul(x.npu(), w.npu(), sg.npu(), antiquant_group_size=48)


def test_transpose_batchmatmul_and_its_quantised_form(ascend950):
    m, b, k, n = 4, 3, 16, 8
    x1, x2 = rand(m, b, k, seed=17, dtype=torch.float16), rand(b, k, n, seed=18, dtype=torch.float16)
    y = torch_npu.npu_transpose_batchmatmul(x1.npu(), x2.npu(), perm_x1=[1, 0, 2], perm_y=[1, 0, 2])
    want = torch.stack([x1[:, i].float() @ x2[i].float() for i in range(b)], 1)  # [M, B, N]
    torch.testing.assert_close(y.cpu().float(), want, rtol=2e-3, atol=2e-3)
    split = torch_npu.npu_transpose_batchmatmul(x1.npu(), x2.npu(), perm_x1=[1, 0, 2], batch_split_factor=2)
    assert split.shape == (2, m, b * n // 2)
    torch.testing.assert_close(split.cpu(), y.cpu().reshape(m, 2, -1).transpose(0, 1))
    with pytest.raises(NpuOpError, match="perm_x2 should be one of"):
        torch_npu.npu_transpose_batchmatmul(x1.npu(), x2.npu(), perm_x1=[1, 0, 2], perm_x2=[0, 2, 1])
    f1, f2 = x1.to(torch.float8_e4m3fn), x2.to(torch.float8_e4m3fn)
    s1, s2 = rand(m, seed=19).abs(), rand(n, seed=20).abs()
    yq = torch_npu.npu_transpose_quant_batchmatmul(f1.npu(), f2.npu(), torch.bfloat16, x1_scale=s1.npu(),
                                                   x2_scale=s2.npu(), perm_x1=[1, 0, 2], perm_y=[1, 0, 2])
    wq = torch.stack([f1[:, i].float() @ f2[i].float() for i in range(b)], 1) * s2 * s1[:, None, None]
    torch.testing.assert_close(yq.cpu().float(), wq, rtol=1e-2, atol=1e-2)


def test_grouped_matmul_int8_per_channel_per_token_and_split_k():
    x, w = ints(6, 32, seed=21), ints(2, 32, 5, seed=22)
    sc, pts = rand(2, 5, seed=23).abs() / 100, rand(6, seed=24).abs()
    (y,) = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], scale=[sc.npu()], per_token_scale=[pts.npu()],
                                        group_list=torch.tensor([2, 6]).npu(), group_type=0, split_item=3,
                                        output_dtype=torch.bfloat16)
    acc = torch.cat([x[:2].long() @ w[0].long(), x[2:].long() @ w[1].long()]).float()
    scales = torch.cat([sc[0].expand(2, 5), sc[1].expand(4, 5)])
    torch.testing.assert_close(y.cpu(), (acc * scales * pts[:, None]).bfloat16(), rtol=0, atol=0)
    # group_type 2: K split into groups (MoE weight gradients), one [M, N] per group
    a, g = rand(3, 10, seed=25), rand(10, 4, seed=26)
    (dw,) = torch_npu.npu_grouped_matmul([a.npu()], [g.npu()], group_list=[4, 6], group_list_type=1, group_type=2,
                                         split_item=3)
    torch.testing.assert_close(dw.cpu(), torch.stack([a[:, :4] @ g[:4], a[:, 4:] @ g[4:]]))
    with pytest.raises(NotEmulatedError, match="antiquant_scale"):
        torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], antiquant_scale=[sc.npu()], group_list=[2, 6])
    with pytest.raises(NpuOpError, match="need scale"):
        torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=[2, 6], group_type=0)


def test_grouped_matmul_swiglu_quant_v2_a8w8_and_matmul_add_fp32():
    x, w = ints(5, 32, seed=30), ints(2, 32, 8, seed=31)
    ws, xs = rand(2, 8, seed=32).abs() / 100, rand(5, seed=33).abs()
    q, qs = torch_npu.npu_grouped_matmul_swiglu_quant_v2(x.npu(), [w.npu()], [ws.npu()], xs.npu(),
                                                         torch.tensor([2, 5]).npu())
    assert q.shape == (5, 4) and q.dtype == torch.int8 and qs.shape == (5,)
    for r in range(5):
        g = 0 if r < 2 else 1
        c = (x[r].long() @ w[g].long()).float() * xs[r] * ws[g]
        act, gate = c[:4], c[4:]
        sw = act / (1 + torch.exp(-act)) * gate  # Swish(x) = x / (1 + e^-x)
        scale = sw.abs().max() / 127
        torch.testing.assert_close(qs[r].cpu(), scale, rtol=1e-5, atol=0)
        assert (q[r].cpu().float() - torch.round(sw / scale)).abs().max() <= 1
    c = torch.zeros(6, 4).npu()
    a, b = rand(3, 6, seed=34, dtype=torch.float16), rand(3, 4, seed=35, dtype=torch.float16)
    torch_npu._npu_matmul_add_fp32(a.npu(), b.npu(), c)
    torch_npu._npu_matmul_add_fp32(a.npu(), b.npu(), c)  # accumulates
    torch.testing.assert_close(c.cpu(), 2 * (a.float().t() @ b.float()))
    with pytest.raises(NpuOpError, match="C must be float32"):
        torch_npu._npu_matmul_add_fp32(a.npu(), b.npu(), torch.zeros(6, 4).half().npu())


def test_float8_paths_are_ascend_950_only():
    f8 = rand(4, 32, seed=40).to(torch.float8_e4m3fn)
    with pytest.raises(NpuOpError, match="Ascend 950PR/950DT only, not on Ascend910B3"):
        torch_npu.npu_quant_matmul(f8.npu(), f8.t().contiguous().t().npu(), torch.ones(1).npu(),
                                   output_dtype=torch.bfloat16)
    with pytest.raises(NpuOpError, match="the float8_e4m3fn target is supported on Ascend 950"):
        torch_npu.npu_dynamic_quant(rand(4, 32, seed=41, dtype=torch.float16).npu(), dst_type=torch.float8_e4m3fn)
