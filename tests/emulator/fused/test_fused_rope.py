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
