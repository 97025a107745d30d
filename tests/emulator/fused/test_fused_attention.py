"""npu_fusion_attention and npu_fusion_attention_grad on the emulated npu against a hand-written reference."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")  # the emulator's shim (tests/emulator/conftest.py enables it)
FA = torch_npu.npu_fusion_attention
FA_GRAD = torch_npu.npu_fusion_attention_grad


def ref(q, k, v, masked=None, pse=None, scale=1.0):
    """BNSD attention in float64 with einsum; GQA by repeating heads; True in ``masked`` = left out."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = torch.einsum("bnqd,bnkd->bnqk", q, k)
    if pse is not None:
        s = s + pse.double()
    s = s * scale
    if masked is not None:
        s = s.masked_fill(masked, float("-inf"))
    return torch.einsum("bnqk,bnkd->bnqd", torch.softmax(s, -1), v)


def band(sq, skv, lo=None, hi=None):
    """Masked positions outside lo <= key - query <= hi."""
    d = torch.arange(skv)[None, :] - torch.arange(sq)[:, None]
    m = torch.zeros(sq, skv, dtype=torch.bool)
    if hi is not None:
        m |= d > hi
    if lo is not None:
        m |= d < lo
    return m


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


CAUSAL_2048 = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def to_layout(x, layout):
    """BNSD -> layout."""
    b, n, s, d = x.shape
    return {"BNSD": x, "BSND": x.transpose(1, 2), "BSH": x.transpose(1, 2).reshape(b, s, n * d),
            "SBH": x.permute(2, 0, 1, 3).reshape(s, b, n * d)}[layout].contiguous()


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_layouts_gqa_and_return_tuple(layout):
    q, k, v = rand(2, 4, 20, 16, seed=1), rand(2, 2, 24, 16, seed=2), rand(2, 2, 24, 8, seed=3)
    out = FA(to_layout(q, layout).npu(), to_layout(k, layout).npu(), to_layout(v, layout).npu(), 4, layout,
             scale=0.25)
    assert len(out) == 7
    att, smax, ssum, sout, seed, offset, numels = out
    assert att.device.type == "npu" and att.dtype == torch.float32
    assert att.shape == to_layout(torch.zeros(2, 4, 20, 8), layout).shape
    assert smax.shape == ssum.shape == (2, 4, 20, 8) and smax.dtype == torch.float32
    assert sout.numel() == 0 and (seed, offset, numels) == (0, 0, 2 * 4 * 20 * 24)
    torch.testing.assert_close(att.cpu(), to_layout(ref(q, k, v, scale=0.25), layout).float())


def test_sparse_modes_against_hand_built_masks():
    sq, skv = 24, 40
    q, k, v = rand(1, 2, sq, 8, seed=4), rand(1, 2, skv, 8, seed=5), rand(1, 2, skv, 8, seed=6)
    qn, kn, vn = q.npu(), k.npu(), v.npu()
    explicit = torch.rand(sq, skv, generator=torch.Generator().manual_seed(0)) > 0.7
    explicit[:, 0] = False  # no row all masked
    cases = [  # (sparse_mode, atten_mask, pre, next, the masked positions)
        (0, explicit, 2147483647, 2147483647, explicit),
        (0, explicit, 5, 3, explicit | band(sq, skv, -5, 3)),  # mode 0: band aligned top-left
        (1, explicit, 5, 3, explicit),  # mode 1 ignores the band
        (2, CAUSAL_2048, 0, 0, band(sq, skv, hi=0)),  # top-left causal
        (3, CAUSAL_2048, 0, 0, band(sq, skv, hi=skv - sq)),  # bottom-right causal
        (4, CAUSAL_2048, 4, 2, band(sq, skv, skv - sq - 4, skv - sq + 2)),  # band, bottom-right
    ]
    for mode, m, pre, nxt, masked in cases:
        out = FA(qn, kn, vn, 2, "BNSD", atten_mask=m.npu(), sparse_mode=mode, pre_tockens=pre,
                 next_tockens=nxt, scale=0.3)[0]
        torch.testing.assert_close(out.cpu(), ref(q, k, v, masked, scale=0.3).float(), msg=f"mode {mode}")
    full = FA(qn, kn, vn, 2, "BNSD", sparse_mode=3, scale=0.3)[0]  # no atten_mask: full attention
    torch.testing.assert_close(full.cpu(), ref(q, k, v, scale=0.3).float())


def test_fully_masked_row_averages_values_and_statistics_are_row_max_and_sum():
    q, k, v = rand(1, 1, 4, 8, seed=7), rand(1, 1, 6, 8, seed=8), rand(1, 1, 6, 8, seed=9)
    m = torch.zeros(4, 6, dtype=torch.bool)
    m[1] = True
    m[2, 3:] = True
    att, smax, ssum = FA(q.npu(), k.npu(), v.npu(), 1, "BNSD", atten_mask=m.npu())[:3]
    assert torch.isfinite(att).all()
    torch.testing.assert_close(att[0, 0, 1].cpu(), v[0, 0].mean(0))
    s = (q @ k.transpose(-1, -2))[0, 0].masked_fill(m, float("-inf"))
    torch.testing.assert_close(smax[0, 0, 2].cpu(), s[2].max().expand(8))
    torch.testing.assert_close(ssum[0, 0, 2].cpu(), torch.exp(s[2] - s[2].max()).sum().expand(8))


def test_varlen_tnd_with_skipped_batches():
    lens_q, lens_k = [3, 5, 4], [6, 5, 2]
    n, nkv, d = 4, 2, 8
    q, k, v = rand(sum(lens_q), n, d, seed=10), rand(sum(lens_k), nkv, d, seed=11), rand(sum(lens_k), nkv, d, seed=12)
    cq = [3, 8, 12, 0]  # cumulative ends, trailing zero: a batch that is skipped
    ck = [6, 11, 13, 0]
    out, smax = FA(q.npu(), k.npu(), v.npu(), n, "TND", atten_mask=CAUSAL_2048.npu(), sparse_mode=3, scale=0.5,
                   actual_seq_qlen=cq, actual_seq_kvlen=ck)[:2]
    assert out.shape == (12, n, d) and smax.shape == (12, n, 8)
    q0 = k0 = 0
    for sq, sk in zip(lens_q, lens_k, strict=True):
        qb = q[q0:q0 + sq].transpose(0, 1)[None]
        kb, vb = (t[k0:k0 + sk].transpose(0, 1)[None] for t in (k, v))
        want = ref(qb, kb, vb, band(sq, sk, hi=sk - sq), scale=0.5)[0].transpose(0, 1)
        got = out[q0:q0 + sq].cpu()
        rows = ~band(sq, sk, hi=sk - sq).all(-1)  # bottom-right causal with Sq > Skv: first rows have no key
        torch.testing.assert_close(got[rows], want[rows].float())
        q0, k0 = q0 + sq, k0 + sk


def test_gradients_fast_path_match_reference():
    q, k, v = (rand(2, 8, 64, 16, seed=s).requires_grad_() for s in (13, 14, 15))
    out = FA(q, k, v, 8, "BNSD", atten_mask=CAUSAL_2048, sparse_mode=2, scale=0.25)[0]
    g = rand(2, 8, 64, 16, seed=16)
    grads = torch.autograd.grad(out, (q, k, v), g)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(ref(qd, kd, vd, band(64, 64, hi=0), scale=0.25), (qd, kd, vd), g.double())
    for a, b in zip(grads, want, strict=True):
        torch.testing.assert_close(a, b.float(), atol=2e-5, rtol=1e-4)


def test_gradcheck_reference_path_float64_with_mask_pse_gqa_and_band():
    q = rand(1, 4, 5, 3, dtype=torch.float64, seed=17).requires_grad_()
    k = rand(1, 2, 7, 3, dtype=torch.float64, seed=18).requires_grad_()
    v = rand(1, 2, 7, 2, dtype=torch.float64, seed=19).requires_grad_()
    pse = rand(1, 4, 5, 7, dtype=torch.float64, seed=20).requires_grad_()
    m = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) > 0.6
    m[2] = True  # a fully masked row too

    def f(q, k, v, pse):
        return FA(q, k, v, 4, "BNSD", pse=pse, atten_mask=m, scale=0.7, pre_tockens=3, next_tockens=2)[0]

    assert torch.autograd.gradcheck(f, (q, k, v, pse))


def test_grad_op_matches_autograd_from_the_forward_statistics():
    for mode, mask in ((2, CAUSAL_2048), (1, torch.rand(32, 32, generator=torch.Generator().manual_seed(2)) > 0.5)):
        q, k, v = (rand(2, 32, 4 * 8, seed=s).npu().requires_grad_() for s in (21, 22, 23))
        out, smax, ssum = FA(q, k, v, 4, "BSH", atten_mask=mask.npu(), sparse_mode=mode, scale=0.35)[:3]
        dy = rand(2, 32, 32, seed=24).npu()
        want = torch.autograd.grad(out, (q, k, v), dy)
        dq, dk, dv, dpse, dsink = FA_GRAD(q.detach(), k.detach(), v.detach(), dy, 4, "BSH", atten_mask=mask.npu(),
                                          softmax_max=smax, softmax_sum=ssum, attention_in=out.detach(),
                                          scale_value=0.35, sparse_mode=mode)
        for a, b in zip((dq, dk, dv), want, strict=True):
            torch.testing.assert_close(a.cpu(), b.cpu(), atol=1e-5, rtol=1e-4)
        assert dpse.numel() == 0 and dsink.numel() == 0


def test_dropout_draws_from_the_device_generator_and_the_grad_op_replays_it():
    q, k, v = (rand(1, 2, 40, 8, seed=s).npu().requires_grad_() for s in (25, 26, 27))
    torch.npu.manual_seed(123)
    r1 = FA(q, k, v, 2, "BNSD", keep_prob=0.6)
    torch.npu.manual_seed(123)
    r2 = FA(q, k, v, 2, "BNSD", keep_prob=0.6)
    r3 = FA(q, k, v, 2, "BNSD", keep_prob=0.6)
    assert r1[4] == r2[4] != 0 and r3[4] != r1[4]
    torch.testing.assert_close(r1[0], r2[0])
    assert not torch.allclose(r1[0].cpu(), r3[0].cpu())
    no_drop = FA(q, k, v, 2, "BNSD")[0]
    assert not torch.allclose(r1[0].cpu(), no_drop.cpu())
    dy = rand(1, 2, 40, 8, seed=28).npu()
    want = torch.autograd.grad(r1[0], (q, k, v), dy)
    got = FA_GRAD(q.detach(), k.detach(), v.detach(), dy, 2, "BNSD", keep_prob=0.6, seed=r1[4], offset=r1[5],
                  numels=r1[6])[:3]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.cpu(), b.cpu(), atol=1e-5, rtol=1e-4)


def test_half_precision_on_npu_is_close_to_float64():
    q, k, v = rand(1, 2, 48, 32, seed=29), rand(1, 2, 48, 32, seed=30), rand(1, 2, 48, 32, seed=31)
    for dtype in (torch.float16, torch.bfloat16):
        out = FA(*(t.to(dtype).npu() for t in (q, k, v)), 2, "BNSD", atten_mask=CAUSAL_2048.npu(), sparse_mode=3,
                 scale=32 ** -0.5)[0]
        assert out.dtype == dtype
        torch.testing.assert_close(out.cpu().float(), ref(q, k, v, band(48, 48, hi=0), scale=32 ** -0.5).float(),
                                   atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("kwargs, match", [
    ({"input_layout": "BHSD"}, "input_layout should be BSH/SBH/BNSD/BSND/TND"),
    ({"keep_prob": 0.0}, "keep_prob value must be in range of \\(0, 1\\]"),
    ({"sparse_mode": 9}, "sparse_mode value must be in range of \\[0,6\\]"),
    ({"atten_mask": torch.zeros(16, 16)}, "dtype of atten_mask must be bool or uint8"),
    ({"atten_mask": torch.zeros(16, 16, dtype=torch.bool), "sparse_mode": 3}, "sparse_mode 3 takes the optimised"),
    ({"atten_mask": torch.zeros(8, 16, dtype=torch.bool)}, "atten_mask must be of shape"),
    ({"head_num": 3}, "head_num \\(3\\) must equal the N axis of query"),
])
def test_rejected_arguments_raise_the_npu_error_naming_them(kwargs, match):
    q = rand(1, 4, 16, 8).npu()
    args = {"head_num": 4, "input_layout": "BNSD"}
    args.update({k: (v.npu() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()})
    with pytest.raises(NpuOpError, match=match):
        FA(q, q, q, **args)


@pytest.mark.filterwarnings("ignore:.*float64:RuntimeWarning")
def test_shape_dtype_and_device_constraints():
    with pytest.raises(NpuOpError, match="head dim D of query and key must be in \\[1, 768\\]"):
        FA(*(rand(1, 1, 2, 800).npu() for _ in range(3)), 1, "BNSD")
    with pytest.raises(NpuOpError, match="multiple of that of key and value"):
        FA(rand(1, 3, 4, 8).npu(), rand(1, 2, 4, 8).npu(), rand(1, 2, 4, 8).npu(), 3, "BNSD")
    with pytest.raises(NpuOpError, match="dtype of query must be float16/bfloat16/float32, but got float64"):
        FA(*(rand(1, 1, 2, 8, dtype=torch.float64).npu() for _ in range(3)), 1, "BNSD")
    with pytest.raises(NpuOpError, match="dtype of key"):
        FA(rand(1, 1, 2, 8).npu(), rand(1, 1, 2, 8).half().npu(), rand(1, 1, 2, 8).npu(), 1, "BNSD")
    with pytest.raises(NpuOpError, match="atten_mask is on cpu"):
        FA(*(rand(1, 1, 2, 8).npu() for _ in range(3)), 1, "BNSD", atten_mask=torch.zeros(2, 2, dtype=torch.bool))
    with pytest.raises(NpuOpError, match="actual_seq_qlen"):
        FA(*(rand(6, 2, 8).npu() for _ in range(3)), 2, "TND")


def test_varlen_outer_split_modes_7_and_8():
    """The documented example of mode 7: a 4x6 bottom-right causal sequence cut after two query rows; on the first
    card the cut sequence is the last one, a band (pre_tockens 6, next_tockens -2) from the bottom-right."""
    n, d = 2, 8
    q, k, v = rand(5, n, d, seed=40), rand(9, n, d, seed=41), rand(9, n, d, seed=42)
    out = FA(q.npu(), k.npu(), v.npu(), n, "TND", atten_mask=CAUSAL_2048.npu(), sparse_mode=7, pre_tockens=6,
             next_tockens=-2, actual_seq_qlen=[3, 5], actual_seq_kvlen=[3, 9])[0].cpu()
    first = ref(q[:3].transpose(0, 1)[None], k[:3].transpose(0, 1)[None], v[:3].transpose(0, 1)[None],
                band(3, 3, hi=0))[0].transpose(0, 1)
    # the cut rows 0, 1 of the original 4x6 problem, whose keys j <= i + 2 are kept
    last = ref(q[3:].transpose(0, 1)[None], k[3:].transpose(0, 1)[None], v[3:].transpose(0, 1)[None],
               band(2, 6, hi=2))[0].transpose(0, 1)
    torch.testing.assert_close(out, torch.cat([first, last]).float())
    # mode 8, the documented second card: the first sequence is the band (pre 4, next 1), the rest top-left causal
    q, k, v = rand(12, n, d, seed=43), rand(13, n, d, seed=44), rand(13, n, d, seed=45)
    out = FA(q.npu(), k.npu(), v.npu(), n, "TND", atten_mask=CAUSAL_2048.npu(), sparse_mode=8, pre_tockens=4,
             next_tockens=1, actual_seq_qlen=[3, 8, 12], actual_seq_kvlen=[4, 9, 13])[0].cpu()
    segs = [(0, 3, 0, 4, band(3, 4, lo=-3, hi=2)), (3, 8, 4, 9, band(5, 5, hi=0)), (8, 12, 9, 13, band(4, 4, hi=0))]
    for a, b_, c, e, m in segs:
        want = ref(q[a:b_].transpose(0, 1)[None], k[c:e].transpose(0, 1)[None], v[c:e].transpose(0, 1)[None], m)
        torch.testing.assert_close(out[a:b_], want[0].transpose(0, 1).float())


def test_invalid_row_correction_zeroes_rows_masked_entirely():
    q, k, v = (rand(1, 2, s, 8, seed=50 + i).double().requires_grad_() for i, s in enumerate((6, 4, 4)))
    # sparse_mode 3 with Sq > Skv: the first Sq - Skv rows see no key; the kernel corrects them to zeros
    out = FA(q, k, v, 2, "BNSD", atten_mask=CAUSAL_2048, sparse_mode=3, scale=0.5)[0]
    assert out[:, :, :2].abs().sum() == 0
    masked = band(6, 4, hi=-2)
    torch.testing.assert_close(out[:, :, 2:], ref(q, k, v, masked, scale=0.5)[:, :, 2:])
    dy = rand(1, 2, 6, 8, seed=60).double()
    want = torch.autograd.grad(out, (q, k, v), dy)
    got = FA_GRAD(q.detach(), k.detach(), v.detach(), dy, 2, "BNSD", atten_mask=CAUSAL_2048, sparse_mode=3,
                  scale_value=0.5)[:3]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(
        lambda a, b, c: FA(a, b, c, 2, "BNSD", atten_mask=CAUSAL_2048, sparse_mode=3, scale=0.5)[0], (q, k, v))
    # a user mask with a row all masked: uniform without the correction, zeros with inner_precise 2
    m = torch.zeros(6, 4, dtype=torch.bool)
    m[1] = True
    plain = FA(q, k, v, 2, "BNSD", atten_mask=m)[0]
    torch.testing.assert_close(plain[:, :, 1], v.mean(2))
    assert FA(q, k, v, 2, "BNSD", atten_mask=m, inner_precise=2)[0][:, :, 1].abs().sum() == 0


def test_fusion_attention_v2_rope_halves_join_the_head_dim_with_gradients():
    g = torch.Generator().manual_seed(70)
    b, s, n, d, dr = 1, 6, 2, 8, 4
    q, k, v = (torch.randn(b, s, n, dd, generator=g, requires_grad=True) for dd in (d, d, d))
    qr, kr = (torch.randn(b, s, n, dr, generator=g, requires_grad=True) for _ in range(2))
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out = torch_npu.npu_fusion_attention_v2(q, k, v, n, "BSND", query_rope=qr, key_rope=kr, atten_mask=mask,
                                            sparse_mode=3, scale=0.3)
    assert len(out) == 7
    qq, kk = torch.cat((q, qr), -1).transpose(1, 2), torch.cat((k, kr), -1).transpose(1, 2)
    sc = (qq @ kk.transpose(-1, -2)) * 0.3
    sc = sc.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
    want = (torch.softmax(sc, -1) @ v.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(out[0], want, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out[0].sum(), (q, qr))
    wants = torch.autograd.grad(want.sum(), (q, qr))
    for got_g, want_g in zip(grads, wants, strict=True):
        torch.testing.assert_close(got_g, want_g, rtol=1e-4, atol=1e-5)
    with pytest.raises(NpuOpError, match="query_rope and key_rope must be given together"):
        torch_npu.npu_fusion_attention_v2(q, k, v, n, "BSND", query_rope=qr)
