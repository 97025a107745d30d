"""A small transformer-ish reference model and "migrated" twins, each with one planted defect.

The reference (:class:`Reference`) has token and position embeddings, a 1-D convolution over time, two pre-norm
blocks (LayerNorm, multi-head attention, LayerNorm, MLP with GELU) and a head. Each twin (:data:`TWINS`) is the
same model with one change; ``planted`` is the module path (in the twin, as in ``named_modules()``) that a
comparison must name as the first divergence, or None for twins that compute the same thing.

Every defect leaves the end-to-end output cosine >= 0.98 (the tests assert it): these are the defects that
survive a final-output check.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS, SEQ, LAYERS, BATCH = 64, 32, 4, 16, 2, 4


class Attention(nn.Module):
    def __init__(self, d: int = D, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        return x.view(b, t, self.heads, c // self.heads).transpose(1, 2)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        b, h, t, hd = y.shape
        return y.transpose(1, 2).reshape(b, t, h * hd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(att.shape[-2:], dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, torch.finfo(att.dtype).min).softmax(dim=-1)
        return self.proj(self.merge_heads(att @ v))


class MLP(nn.Module):
    def __init__(self, d: int = D):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d: int = D):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Reference(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(SEQ, D)
        self.conv = nn.Conv1d(D, D, 3, padding=1)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------------------------------------------------
# the defects
# ---------------------------------------------------------------------------------------------------------


class Fp16Linear(nn.Linear):
    """A Linear computed in float16 and cast back (what a hand-written "fast path" does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            y = F.linear(x.half(), self.weight.half(), self.bias.half())
        return y.to(x.dtype)


class ScaledAttention(Attention):
    """Attention whose output comes out 2% too large (a wrong scaling constant)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 1.02


class HeadSwapAttention(Attention):
    """Attention whose heads are merged in the wrong order (two heads swapped, never swapped back)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(att.shape[-2:], dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, torch.finfo(att.dtype).min).softmax(dim=-1)
        y = att @ v
        y = y[:, [1, 0, *range(2, self.heads)]]
        return self.proj(self.merge_heads(y))


class FeedForward(nn.Module):
    """The MLP under another class name with other attribute names: the same computation."""

    def __init__(self, d: int = D):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gelu(self.up(x)))


class Wrapper(nn.Module):
    """An extra level around a module (what checkpointing / FSDP-style wrappers add)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


class Scaled(nn.Module):
    def __init__(self, inner: nn.Module, factor: float):
        super().__init__()
        self.inner = inner
        self.factor = factor

    def forward(self, x):
        return self.inner(x) * self.factor


def _clean() -> nn.Module:
    return Reference()


def _gelu_tanh() -> nn.Module:
    m = Reference()
    m.blocks[1].mlp.act = nn.GELU(approximate="tanh")
    return m


def _fp16_linear() -> nn.Module:
    m = Reference()
    old = m.blocks[0].mlp.fc2
    new = Fp16Linear(old.in_features, old.out_features)
    m.blocks[0].mlp.fc2 = new
    return m


def _ln_eps() -> nn.Module:
    m = Reference()
    m.blocks[1].ln2.eps = 1e-3
    return m


def _scaled() -> nn.Module:
    m = Reference()
    m.blocks[0].attn = ScaledAttention()
    return m


def _permuted() -> nn.Module:
    m = Reference()
    m.blocks[1].attn = HeadSwapAttention()
    return m


def _renamed_wrapped() -> nn.Module:
    m = Reference()
    m.blocks[0].mlp = Wrapper(FeedForward())
    return m


def _wrapped_defect() -> nn.Module:
    m = Reference()
    ff = FeedForward()
    ff.down = Scaled(ff.down, 1.02)
    m.blocks[1].mlp = Wrapper(ff)
    return m


class ShrunkMLP(MLP):
    """An MLP whose output is 0.5% too small: inside bf16's element-wise rounding, outside its effect on a norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 0.995


def _mlp_scale() -> nn.Module:
    m = Reference()
    m.blocks[0].mlp = ShrunkMLP()
    return m


# name -> (factory, planted module path in the twin, or None)
TWINS: dict[str, tuple] = {
    "clean": (_clean, None),
    "gelu_tanh": (_gelu_tanh, "blocks.1.mlp.act"),
    "fp16_linear": (_fp16_linear, "blocks.0.mlp.fc2"),
    "ln_eps": (_ln_eps, "blocks.1.ln2"),
    "scaled_1.02": (_scaled, "blocks.0.attn"),
    "head_permutation": (_permuted, "blocks.1.attn"),
    "renamed_wrapped": (_renamed_wrapped, None),
    "wrapped_defect": (_wrapped_defect, "blocks.1.mlp.inner.down"),
    "mlp_scale_0.995": (_mlp_scale, "blocks.0.mlp"),
}


def reference(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return Reference()


def twin(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return TWINS[name][0]()


def inputs(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


# ---------------------------------------------------------------------------------------------------------
# backward defects: the forward is the same (to the bit), the gradients are not
# ---------------------------------------------------------------------------------------------------------


class _GeluBadBackward(torch.autograd.Function):
    """A hand-written GELU "kernel": exact forward, backward missing the ``x * pdf(x)`` term."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
        return g * cdf


class HandGelu(nn.Module):
    def forward(self, x):
        return _GeluBadBackward.apply(x)


class DetachBlock(Block):
    """A block whose attention branch is added detached: same values, no gradient through attention."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x)).detach()
        return x + self.mlp(self.ln2(x))


class FakeQuant(nn.Module):
    """Fake quantisation to a 1/16 grid with a straight-through estimator; ``clip`` (the defect) passes the
    gradient only inside [-clip, clip]: the forward is the same, the gradient outside is zeroed."""

    def __init__(self, clip: float | None = None):
        super().__init__()
        self.clip = clip

    def forward(self, x):
        q = torch.round(x * 16) / 16
        base = x if self.clip is None else x.clamp(-self.clip, self.clip)
        return base + (q - base).detach()


class HookAttention(Attention):
    """Attention that halves the gradient of its attention weights with a tensor hook (a leftover debugging or
    "stabilising" hook): the forward is unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(att.shape[-2:], dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, torch.finfo(att.dtype).min).softmax(dim=-1)
        if att.requires_grad:
            att.register_hook(lambda g: g * 0.5)
        return self.proj(self.merge_heads(att @ v))


class ClampMLP(MLP):
    """An MLP that clamps its hidden activations (many elements sit at the clamp: zero gradient there)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x).clamp(-0.5, 0.5)))


class QuantDropRef(Reference):
    """The reference with a dropout (identity in eval mode) and a fake quantisation before the head."""

    def __init__(self, clip: float | None = None):
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.quant = FakeQuant(clip)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.quant(self.drop(self.ln_f(x))))


def _with(build, edit=None):
    def make():
        m = build()
        state = [v.clone() for v in m.state_dict().values()]
        if edit is not None:
            edit(m)
        with torch.no_grad():  # the defect changes code only: the weights stay the reference's (in order)
            for v, s in zip(m.state_dict().values(), state, strict=True):
                v.copy_(s)
        return m

    return make


def _swap_act(m):
    m.blocks[1].mlp.act = HandGelu()


def _detach_block(m):
    blk = DetachBlock()
    m.blocks[0] = blk


def _hook_attn(m):
    m.blocks[0].attn = HookAttention()


def _clamp(m):
    for b in m.blocks:
        old = b.mlp
        b.mlp = ClampMLP()
        b.mlp.load_state_dict(old.state_dict())


# name -> (golden factory, target factory, planted module path or None, loss scale of the target's loss or None)
BACKWARD_TWINS: dict[str, tuple] = {
    "bw_clean": (Reference, Reference, None, None),
    "bw_clean_quant_dropout": (QuantDropRef, QuantDropRef, None, None),
    "bw_clean_clamps": (_with(Reference, _clamp), _with(Reference, _clamp), None, None),
    "bw_renamed_wrapped": (Reference, _with(Reference, lambda m: setattr(m.blocks[0], "mlp", Wrapper(FeedForward()))),
                           None, None),
    "bw_hand_backward": (Reference, _with(Reference, _swap_act), "blocks.1.mlp.act", None),
    "bw_detach": (Reference, _with(Reference, _detach_block), "blocks.0", None),
    "bw_ste_clip": (QuantDropRef, lambda: QuantDropRef(clip=0.5), "quant", None),
    "bw_grad_hook": (Reference, _with(Reference, _hook_attn), "blocks.0.attn", None),
    "bw_loss_scale": (Reference, Reference, "(loss)", 128.0),
}


def backward_pair(name: str, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """``(golden, target)`` of a backward twin, built after the same seed (the same weights)."""
    g, t = BACKWARD_TWINS[name][:2]
    torch.manual_seed(seed)
    golden = g()
    torch.manual_seed(seed)
    return golden, t()
