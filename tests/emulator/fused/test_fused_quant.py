"""Quantisation operators (npu_quantize, npu_dynamic_quant, npu_dynamic_block_quant, int4 packing,
npu_trans_quant_param) and MX quantisation (npu_dynamic_mx_quant and its dual-axis, grouped and block forms),
bit for bit against references written from torch_npu's and CANN's formulas."""

import math
import struct

import pytest
import torch

from ascendify.emulator.errors import NotEmulatedError, NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def rand(*shape, seed=0, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def rint(v: float) -> float:
    return float(round(v))  # Python's round is half to even


# ----------------------------------------------------------------------------- integer quantisation
def test_dynamic_quant_int8_per_token_smooth_and_groups_bit_exact():
    x = rand(2, 3, 16, seed=1, dtype=torch.float16)
    y, scale = torch_npu.npu_dynamic_quant(x.npu())
    assert y.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            row = [float(v) for v in x[i, j].float()]
            s = torch.tensor(max(abs(v) for v in row), dtype=torch.float32) / 127  # float32 division
            assert scale[i, j].item() == s.item()
            want = [rint(float(torch.tensor(v, dtype=torch.float32) / s)) for v in row]
            assert y[i, j].cpu().tolist() == want
    smooth = rand(16, seed=2, dtype=torch.float16)
    ys, ss = torch_npu.npu_dynamic_quant(x.npu(), smooth_scales=smooth.npu())
    xs = x.float() * smooth.float()
    torch.testing.assert_close(ss.cpu(), xs.abs().amax(-1) / 127, rtol=0, atol=0)
    assert torch.equal(ys.cpu(), torch.round(xs / (xs.abs().amax(-1, keepdim=True) / 127)).to(torch.int8))
    # MoE: smooth_scales row i applies to rows [group_index[i-1], group_index[i])
    flat = x.reshape(6, 16)
    groups = rand(2, 16, seed=3, dtype=torch.float16)
    yg, _ = torch_npu.npu_dynamic_quant(flat.npu(), smooth_scales=groups.npu(),
                                        group_index=torch.tensor([4, 6], dtype=torch.int32).npu())
    ref = torch.cat([flat[:4].float() * groups[0].float(), flat[4:].float() * groups[1].float()])
    assert torch.equal(yg.cpu(), torch.round(ref / (ref.abs().amax(-1, keepdim=True) / 127)).to(torch.int8))


def test_dynamic_quant_int4_packs_eight_per_word_and_modes():
    x = rand(3, 16, seed=4, dtype=torch.bfloat16)
    y, scale = torch_npu.npu_dynamic_quant(x.npu(), dst_type=torch.quint4x2)
    assert y.dtype == torch.int32 and y.shape == (3, 2)
    q = torch.round(x.float() / (x.float().abs().amax(-1, keepdim=True) / 7)).clamp(-8, 7).long()
    for r in range(3):
        for w in range(2):
            word = sum((int(q[r, w * 8 + n]) & 15) << (4 * n) for n in range(8))
            assert int(y[r, w]) & 0xFFFFFFFF == word
    _, per_channel = torch_npu.npu_dynamic_quant(x.npu(), quant_mode="perchannel")
    assert per_channel.shape == (16,)
    torch.testing.assert_close(per_channel.cpu(), x.float().abs().amax(0) / 127, rtol=0, atol=0)
    _, per_tensor = torch_npu.npu_dynamic_quant(x.npu(), quant_mode="pertensor")
    assert per_tensor.shape == (1,) and per_tensor.item() == (x.float().abs().max() / 127).item()
    with pytest.raises(NpuOpError, match="the dim of x must be greater than 1"):
        torch_npu.npu_dynamic_quant(x[0].npu())
    with pytest.raises(NpuOpError, match="dtype of x must be float16/bfloat16"):
        torch_npu.npu_dynamic_quant(x.float().npu())
    with pytest.raises(NpuOpError, match="multiple of 8"):
        torch_npu.npu_dynamic_quant(x[:, :12].npu(), dst_type=torch.quint4x2)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantize_div_and_mul_modes_and_int4():
    x = rand(2, 3, 4, seed=5, scale=3.0)
    scales, zps = torch.tensor([0.5, 0.25, 2.0]), torch.tensor([1, -2, 0], dtype=torch.int32)
    got = torch_npu.npu_quantize(x.npu(), scales.npu(), zps.npu(), torch.qint8, axis=1)
    assert got.dtype == torch.int8
    want = torch.quantize_per_channel(x, scales.double(), zps.long(), 1, torch.qint8).int_repr()
    assert torch.equal(got.cpu(), want)  # the reference op-plugin's test uses
    assert torch_npu.npu_quantize(x.npu(), scales.npu(), None, torch.quint8, axis=1).dtype == torch.uint8
    ties = torch.tensor([[2.5, 3.5, -2.5, 200.0]])  # half to even, then saturated
    got = torch_npu.npu_quantize(ties.npu(), torch.ones(4).npu(), None, torch.qint8, axis=1)
    assert got.cpu().tolist() == [[2, 4, -2, 127]]
    m = torch.tensor([0.7, 1.1, 0.3, 2.0])
    got = torch_npu.npu_quantize(x.npu(), m.npu(), torch.zeros(4).npu(), torch.qint8, axis=-1, div_mode=False)
    for idx in [(0, 0, 0), (1, 2, 3), (0, 1, 2)]:
        assert int(got[idx]) == max(-128, min(127, rint(float(x[idx] * m[idx[-1]]))))
    w = torch_npu.npu_quantize(rand(2, 8, seed=6, scale=4.0).npu(), torch.ones(8).npu(), None, torch.quint4x2,
                               axis=-1, div_mode=False)
    assert w.dtype == torch.int32 and w.shape == (2, 1)
    with pytest.raises(NpuOpError, match="torch.qint8 or torch.quint4x2 when div_mode is False"):
        torch_npu.npu_quantize(x.npu(), m.npu(), None, torch.quint8, axis=-1, div_mode=False)


def test_dynamic_block_quant_blocks_scales_and_min_scale():
    x = rand(3, 200, seed=7, dtype=torch.float16)
    y, scale = torch_npu.npu_dynamic_block_quant(x.npu())
    assert y.dtype == torch.int8 and scale.shape == (3, 2)
    for r in range(3):
        for b, (lo, hi) in enumerate([(0, 128), (128, 200)]):
            blk = x[r, lo:hi].float()
            m = 127.0 / blk.abs().max()
            assert scale[r, b].item() == pytest.approx((1 / m).item(), rel=1e-7)
            assert torch.equal(y[r, lo:hi].cpu(), torch.round(blk * m).clamp(-127, 127).to(torch.int8))
    _, capped = torch_npu.npu_dynamic_block_quant(x.npu(), min_scale=1.0)  # m <= 1 / min_scale
    assert bool((capped >= 1.0 - 1e-7).all())
    with pytest.raises(NpuOpError, match="2 or 3 dimensional"):
        torch_npu.npu_dynamic_block_quant(x[0].npu())


def test_int4_pack_and_trans_quant_param_bits():
    w = torch.randint(-8, 8, (4, 16), dtype=torch.int32, generator=torch.Generator().manual_seed(8))
    packed = torch_npu.npu_convert_weight_to_int4pack(w.npu())
    assert packed.shape == (4, 2) and packed.dtype == torch.int32
    for r in range(4):
        for c in range(2):
            want = sum((int(w[r, c * 8 + n]) & 15) << (4 * n) for n in range(8))
            assert int(packed[r, c]) & 0xFFFFFFFF == want
    with pytest.raises(NpuOpError, match=r"int4 range \[-8, 7\]"):
        torch_npu.npu_convert_weight_to_int4pack((w * 3).npu())
    scale = torch.tensor([0.1, 3.0e-5, 1.5])
    out = torch_npu.npu_trans_quant_param(scale.npu(), torch.tensor([3.0, -1.0, 300.0]).npu())
    for i, (s, o) in enumerate([(0.1, 3), (3.0e-5, -1), (1.5, 255)]):
        bits = struct.unpack("<I", struct.pack("<f", s))[0] & 0xFFFFE000
        assert int(out[i]) == bits | (1 << 46) | ((o & 0x1FF) << 37)
    r1 = torch_npu.npu_trans_quant_param(torch.tensor([0.1]).npu(), round_mode=1)
    bits = struct.unpack("<I", struct.pack("<f", 0.1))[0]
    assert int(r1[0]) & 0xFFFFFFFF == ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000)


# ----------------------------------------------------------------------------- MX quantisation (Ascend 950)
EMAX = {torch.float8_e4m3fn: 8, torch.float8_e5m2: 15, "e2m1": 2}
FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


@pytest.fixture
def ascend950(fresh_report):
    fresh_report.settings.device_name = "Ascend950PR"
    return fresh_report


def mx_block_ref(vals: list[float], emax: int):
    """(shared exponent, values / 2**exp) of one block, from CANN's formula floor(log2(max|V|)) - emax."""
    amax = max(abs(v) for v in vals)
    if amax == 0:
        return -127, [0.0] * len(vals)
    e = math.frexp(amax)[1] - 1 - emax  # floor(log2(amax)), exact
    e = max(-127, min(127, e))
    return e, [v / 2.0 ** e for v in vals]


def fp4_code(v: float) -> int:
    """Nearest float4_e2m1 code, ties to the even code, saturating; bit 3 is the sign."""
    a = min(abs(v), 6.0)
    best = min(range(8), key=lambda c: (abs(FP4[c] - a), c % 2))
    return best | (8 if math.copysign(1, v) < 0 else 0)


def test_dynamic_mx_quant_fp8_fp4_scales_and_layout(ascend950):
    x = rand(3, 70, seed=9, dtype=torch.bfloat16, scale=5.0)
    x[1, 32:64] = 0  # an all-zero block: scale bits 0, values 0
    y, mxs = torch_npu.npu_dynamic_mx_quant(x.npu(), axis=-1, dst_type=torch.float8_e4m3fn)
    assert y.dtype == torch.float8_e4m3fn and mxs.dtype == torch.uint8 and mxs.shape == (3, 2, 2)
    for r in range(3):
        for b in range(3):  # 70 values: blocks of 32, 32, 6; pairs (0, 1), (2, pad)
            vals = [float(v) for v in x[r, b * 32:(b + 1) * 32].float()]
            e, scaled = mx_block_ref(vals, 8)
            assert int(mxs[r, b // 2, b % 2]) == e + 127
            want = torch.tensor(scaled, dtype=torch.float32).clamp(-448, 448).to(torch.float8_e4m3fn)
            assert torch.equal(y[r, b * 32:(b + 1) * 32].cpu().view(torch.uint8), want.view(torch.uint8))
        assert int(mxs[r, 1, 1]) == 0  # padding of the odd block count
    assert int(mxs[1, 0, 1]) == 0 and not y[1, 32:64].float().any()
    # float4_e2m1 along axis -2: two codes per byte, the first in the low nibble
    x4 = rand(40, 4, seed=10, dtype=torch.float16, scale=3.0)
    y4, s4 = torch_npu.npu_dynamic_mx_quant(x4.npu(), axis=-2, dst_type=torch_npu.float4_e2m1fn_x2)
    assert y4.shape == (40, 2) and y4.dtype == torch.uint8 and s4.shape == (1, 4, 2)
    for c in range(4):
        for b, (lo, hi) in enumerate([(0, 32), (32, 40)]):
            e, scaled = mx_block_ref([float(v) for v in x4[lo:hi, c].float()], 2)
            assert int(s4[0, c, b]) == e + 127
            for i, v in zip(range(lo, hi), scaled, strict=True):
                code = (int(y4[i, c // 2]) >> (4 * (c % 2))) & 15
                assert code == fp4_code(v), (i, c, v)


def test_mx_scale_alg_1_dual_axis_grouped_and_block_forms(ascend950):
    x = rand(64, 64, seed=11, dtype=torch.bfloat16)
    _, s1 = torch_npu.npu_dynamic_mx_quant(x.npu(), dst_type=torch.float8_e5m2, scale_alg=1)
    amax = x[0, :32].float().abs().max().item()
    assert int(s1[0, 0, 0]) - 127 == math.ceil(math.log2(amax / 57344.0))  # ceil(log2(max / DTYPE_MAX))
    y1, m1, y2, m2 = torch_npu.npu_dynamic_mx_quant_with_dual_axis(x.npu(), dst_type=torch.float8_e4m3fn)
    ya, ma = torch_npu.npu_dynamic_mx_quant(x.npu(), axis=-1, dst_type=torch.float8_e4m3fn)
    yb, mb = torch_npu.npu_dynamic_mx_quant(x.npu(), axis=-2, dst_type=torch.float8_e4m3fn)
    for got, want in ((y1, ya), (y2, yb)):
        assert torch.equal(got.cpu().view(torch.uint8), want.cpu().view(torch.uint8))
    assert torch.equal(m1.cpu(), ma.cpu()) and torch.equal(m2.cpu(), mb.cpu())
    # grouped along dim 0: groups of 40 and 24 rows; each group's block scales padded to an even count
    yg, sg = torch_npu.npu_grouped_dynamic_mx_quant(x.npu(), torch.tensor([40, 64], dtype=torch.int32).npu(),
                                                     dst_type=torch.float8_e4m3fn)
    assert sg.shape == (64 // 64 + 2, 64, 2)
    e0, _ = mx_block_ref([float(v) for v in x[32:40, 5].float()], 8)  # group 0, block 1
    e1, _ = mx_block_ref([float(v) for v in x[40:64, 5].float()], 8)  # group 1, block 0
    assert int(sg[0, 5, 1]) == e0 + 127 and int(sg[1, 5, 0]) == e1 + 127 and int(sg[1, 5, 1]) == 0
    # 32 x 32 tiles share one scale, written along both axes
    yt, t1, t2 = torch_npu.npu_dynamic_block_mx_quant(x.npu(), dst_type=torch.float8_e4m3fn)
    et, _ = mx_block_ref([float(v) for v in x[32:64, 0:32].float().flatten()], 8)
    assert int(t1[40, 0, 0]) == et + 127 and int(t2[0, 3, 1]) == et + 127
    assert t1.shape == (64, 1, 2) and t2.shape == (1, 64, 2) and yt.dtype == torch.float8_e4m3fn


def test_mx_quant_refusals(ascend950, fresh_report):
    x = rand(4, 64, seed=12, dtype=torch.bfloat16).npu()
    with pytest.raises(NpuOpError, match="block_size must be divisible by 32"):
        torch_npu.npu_dynamic_mx_quant(x, block_size=48)
    with pytest.raises(NpuOpError, match="axis is out of input dimension range"):
        torch_npu.npu_dynamic_mx_quant(x, axis=2)
    with pytest.raises(NpuOpError, match="round_mode must be 'rint' for float8_e4m3fn"):
        torch_npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn, round_mode="floor")
    with pytest.raises(NpuOpError, match="dtype of x must be float16/bfloat16"):
        torch_npu.npu_dynamic_mx_quant(x.float())
    with pytest.raises(NotEmulatedError, match="hifloat8"):
        torch_npu.npu_dynamic_mx_quant(x, dst_type=torch_npu.hifloat8)
    fresh_report.settings.device_name = "Ascend910B3"  # MX is Ascend 950 only
    with pytest.raises(NpuOpError, match="not supported on Ascend910B3"):
        torch_npu.npu_dynamic_mx_quant(x)


def test_rms_norm_mx_quant_variants_and_kronecker_quant(ascend950):
    x, gamma = rand(3, 64, seed=13, dtype=torch.bfloat16), rand(64, seed=14, dtype=torch.bfloat16)
    y, s, rstd = torch_npu.npu_rms_norm_dynamic_mx_quant(x.npu(), gamma.npu(), dst_type=torch.float8_e4m3fn)
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.float()
    torch.testing.assert_close(rstd.cpu(), torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6))
    for r in range(3):
        e, scaled = mx_block_ref([float(v) for v in normed[r, :32]], 8)
        assert int(s[r, 0, 0]) - 127 == e
        want = torch.tensor(scaled).clamp(-448, 448).to(torch.float8_e4m3fn)
        assert torch.equal(y[r, :32].cpu().view(torch.uint8), want.view(torch.uint8))
    x2 = rand(3, 64, seed=15, dtype=torch.bfloat16)
    ya, xs, sa, _ = torch_npu.npu_add_rms_norm_dynamic_mx_quant(x.npu(), x2.npu(), gamma.npu(),
                                                                 dst_type=torch.float8_e4m3fn)
    assert torch.equal(xs.cpu(), (x.float() + x2.float()).bfloat16()) and sa.shape == (3, 1, 2)
    # FlatQuant: x'' = P1 @ x @ P2 per slice, int4 by max / 7, eight per word
    xk = rand(2, 4, 8, seed=16, dtype=torch.float16)
    p1, p2 = rand(4, 4, seed=17, dtype=torch.float16), rand(8, 8, seed=18, dtype=torch.float16)
    out, sc = torch_npu.npu_kronecker_quant(xk.npu(), p1.npu(), p2.npu())
    ref = torch.stack([p1.float() @ xk[i].float() @ p2.float() for i in range(2)])
    torch.testing.assert_close(sc.cpu(), ref.abs().amax((1, 2)) / 7, rtol=1e-5, atol=1e-6)
    q = torch.round(ref / sc.cpu()[:, None, None]).clamp(-8, 7).long()
    word = sum((int(q[1, 2, n]) & 15) << (4 * n) for n in range(8))
    assert int(out[1, 2, 0]) & 0xFFFFFFFF == word and out.shape == (2, 4, 1)
