"""The fused-operator finders on real op traces (CPU tensors, this process): each hand-written computation is found
at its line, in its common spellings, and the look-alikes are not (LayerNorm, x·silu(x), a classifier's softmax,
SDPA); nn.RMSNorm is found too: torch_npu 2.13 runs it as the same small ops (aten::rms_norm is composite)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ascendify.advise import patterns
from ascendify.advise.trace import Tracer


def _matches(fn, *args):
    tr = Tracer().start()
    try:
        fn(*args)
    finally:
        t = tr.stop()
    return t, patterns.find_all(t, 0)


def _kinds(ms):
    return sorted(m.kind for m in ms)


def _anchor_line(t, m):
    return t.site(m.anchor).line


def rms_a(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # RMS-A


def rms_b(x, w):
    xf = x.float()
    var = (xf * xf).mean(dim=-1, keepdim=True)
    return (xf / torch.sqrt(var + 1e-5)).type_as(x) * w  # RMS-B


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin  # ROPE


def rope_complex(x, freqs):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(-2)  # ROPE-C


def attention(q, k, v):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril() == 0, float("-inf"))
    att = F.softmax(att, dim=-1)  # ATTN
    att = F.dropout(att, 0.1, training=True)
    return att @ v


def _line_of(marker):
    import inspect

    src = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i for i, text in enumerate(src, 1) if text.rstrip().endswith(marker))


def test_rms_norm_in_its_spellings_and_not_layer_norm():
    x, w = torch.randn(2, 5, 16), torch.ones(16)
    for fn, mark in ((rms_a, "# RMS-A"), (rms_b, "# RMS-B")):
        t, ms = _matches(fn, x, w)
        assert _kinds(ms) == ["rms_norm"], (fn.__name__, _kinds(ms))
        assert _anchor_line(t, ms[0]) == _line_of(mark)  # the line with the square root
        assert ms[0].detail["weight"] and ms[0].shape == (2, 5, 16)
    _, ms = _matches(lambda a: F.layer_norm(a, (16,)), x)
    assert _kinds(ms) == []
    _, ms = _matches(lambda a: nn.RMSNorm(16)(a), x)  # composite in torch: the same small ops on an NPU
    assert _kinds(ms) == ["rms_norm"]


def test_rotary_half_and_complex_forms():
    q = torch.randn(2, 4, 6, 8)
    cos, sin = torch.randn(6, 8), torch.randn(6, 8)
    t, ms = _matches(rope, q, cos, sin)
    assert _kinds(ms) == ["rotary"] and _anchor_line(t, ms[0]) == _line_of("# ROPE")
    assert ms[0].detail["mode"] == "half"
    freqs = torch.polar(torch.ones(6, 4), torch.randn(6, 4))
    t, ms = _matches(rope_complex, q, freqs)
    assert _kinds(ms) == ["rotary"] and ms[0].detail.get("form") == "complex"


def test_swiglu_and_its_look_alike():
    a, b = torch.randn(3, 10), torch.randn(3, 10)
    _, ms = _matches(lambda x, y: F.silu(x) * y, a, b)
    assert _kinds(ms) == ["swiglu"]
    _, ms = _matches(lambda x: x * F.silu(x), a)  # not a gated unit
    assert _kinds(ms) == []


def test_attention_and_not_sdpa_nor_a_classifier_softmax():
    q = k = v = torch.randn(2, 3, 8, 16)
    t, ms = _matches(attention, q, k, v)
    assert _kinds(ms) == ["attention"] and _anchor_line(t, ms[0]) == _line_of("# ATTN")
    assert ms[0].detail["masked"] and ms[0].shape == (6, 8, 8)
    _, ms = _matches(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v)
    assert _kinds(ms) == []
    lin = nn.Linear(16, 10)
    _, ms = _matches(lambda x: F.softmax(lin(x), dim=-1), torch.randn(4, 16))
    assert _kinds(ms) == []


def test_tensors_told_apart_when_python_reuses_an_id():
    # gate and up come from two matmuls whose 2-D results are freed at once: their ids can be reused; the finder
    # tells them apart by the op that made them, so silu(gate) * up is found in every call
    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3 = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False)

        def forward(self, h):
            return [F.silu(self.w1(h)) * self.w3(h) for _ in range(5)]

    _, ms = _matches(Mlp(), torch.randn(2, 7, 16))  # one model call: one step
    assert _kinds(ms) == ["swiglu"] * 5
