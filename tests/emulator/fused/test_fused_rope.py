"""npu_rotary_mul against Hugging Face's rotate_half formula and an interleaved reference."""

import pytest
import torch

from ascendify.emulator.errors import NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), -1)


def rotate_interleaved(x):
    out = torch.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def cos_sin(s, d, dtype=torch.float32):
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(s, dtype=torch.float64)[:, None] * inv[None]
    emb = torch.cat((ang, ang), -1)
    return emb.cos()[None, None].to(dtype), emb.sin()[None, None].to(dtype)


def test_half_and_interleave_modes_match_references():
    x = torch.randn(2, 4, 6, 16, generator=torch.Generator().manual_seed(0))
    cos, sin = cos_sin(6, 16)
    out = torch_npu.npu_rotary_mul(x.npu(), cos.npu(), sin.npu(), "half")
    torch.testing.assert_close(out.cpu(), x * cos + rotate_half(x) * sin)
    out = torch_npu.npu_rotary_mul(x.npu(), cos.npu(), sin.npu(), rotary_mode="interleave")
    torch.testing.assert_close(out.cpu(), x * cos + rotate_interleaved(x) * sin)
    rot = torch.zeros(16, 16)  # the rotate matrix equivalent to 'half'
    rot[8:, :8] = -torch.eye(8)
    rot[:8, 8:] = torch.eye(8)
    out = torch_npu.npu_rotary_mul(x.npu(), cos.npu(), sin.npu(), rotate=rot.npu())
    torch.testing.assert_close(out.cpu(), x * cos + rotate_half(x) * sin)


def test_gradcheck_including_cos_and_sin():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    s = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    for mode in ("half", "interleave"):
        assert torch.autograd.gradcheck(lambda a, b, d, m=mode: torch_npu.npu_rotary_mul(a, b, d, m), (x, c, s))


def test_rotary_constraints():
    x = torch.randn(1, 2, 3, 6).npu()
    c = torch.ones(1, 1, 3, 6).npu()
    with pytest.raises(NpuOpError, match="rotary_mode must be 'half' or 'interleave'"):
        torch_npu.npu_rotary_mul(x, c, c, "full")
    with pytest.raises(NpuOpError, match="must be 3 or 4 dimensional"):
        torch_npu.npu_rotary_mul(torch.randn(6).npu(), torch.ones(6).npu(), torch.ones(6).npu())
    with pytest.raises(NpuOpError, match="D of input must be even"):
        torch_npu.npu_rotary_mul(torch.randn(1, 1, 2, 5).npu(), torch.ones(1, 1, 2, 5).npu(),
                                 torch.ones(1, 1, 2, 5).npu())
    with pytest.raises(NpuOpError, match="r1 of shape \\(1, 1, 4, 6\\) must broadcast"):
        torch_npu.npu_rotary_mul(x, torch.ones(1, 1, 4, 6).npu(), c)
    with pytest.raises(NpuOpError, match="same dtype"):
        torch_npu.npu_rotary_mul(x, c.half(), c)


def test_interleave_rope_apply_rotary_pos_emb_and_mrope():
    g = torch.Generator().manual_seed(20)
    x = torch.randn(1, 2, 3, 64, generator=g).half()
    cos, sin = torch.randn(1, 1, 3, 64, generator=g).half(), torch.randn(1, 1, 3, 64, generator=g).half()
    got = torch_npu.npu_interleave_rope(x.npu(), cos.npu(), sin.npu())
    q = torch.cat((x.float()[..., 0::2], x.float()[..., 1::2]), -1)  # (x0, x2, ..., x1, x3, ...)
    torch.testing.assert_close(got.cpu().float(), q * cos.float() + rotate_half(q) * sin.float(), rtol=2e-3,
                               atol=2e-3)
    with pytest.raises(NpuOpError, match="must be 64"):
        torch_npu.npu_interleave_rope(x[..., :32].npu(), cos[..., :32].npu(), sin[..., :32].npu())
    qq, kk = torch.randn(2, 3, 4, 64, generator=g), torch.randn(2, 3, 1, 64, generator=g)
    c, s = torch.randn(2, 3, 1, 64, generator=g), torch.randn(2, 3, 1, 64, generator=g)
    qn, kn = qq.npu(), kk.npu()
    out_q, out_k = torch_npu.npu_apply_rotary_pos_emb(qn, kn, c.npu(), s.npu())
    assert out_q is qn and out_k is kn  # updated in place
    torch.testing.assert_close(qn.cpu(), qq * c + rotate_half(qq) * s)
    torch.testing.assert_close(kn.cpu(), kk * c + rotate_half(kk) * s)
    with pytest.raises(NpuOpError, match="D must be 64 or 128"):
        torch_npu.npu_apply_rotary_pos_emb(qq[..., :32].npu(), kk[..., :32].npu(), c[..., :32].npu(),
                                           s[..., :32].npu())
    # mrope: three position rows, sections of the half rotary dim taken from rows 0, 1, 2
    t, hs, rot = 4, 16, 8
    cache = torch.randn(20, rot, generator=g)
    pos = torch.randint(0, 20, (3, t), generator=g)
    query, key = torch.randn(t, 2 * hs, generator=g), torch.randn(t, hs, generator=g)
    oq, ok = torch_npu.npu_mrope(pos.npu(), query.npu(), key.npu(), cache.npu(), hs, mrope_section=[2, 1, 1])
    cs = cache[pos]  # [3, T, rot]
    cos3, sin3 = cs[..., :4], cs[..., 4:]
    cos_m = torch.cat((cos3[0, :, :2], cos3[1, :, 2:3], cos3[2, :, 3:4]), -1)[:, None]
    sin_m = torch.cat((sin3[0, :, :2], sin3[1, :, 2:3], sin3[2, :, 3:4]), -1)[:, None]
    xq = query.reshape(t, 2, hs)
    a, b = xq[..., :4], xq[..., 4:8]
    want = torch.cat((a * cos_m - b * sin_m, b * cos_m + a * sin_m, xq[..., 8:]), -1).reshape(t, -1)
    torch.testing.assert_close(oq.cpu(), want)
    assert ok.shape == key.shape
