"""Gated and fast activations: ``npu_swiglu``, ``npu_geglu``, ``fast_gelu`` / ``npu_fast_gelu``.

- ``npu_swiglu(x, dim)``: ``a, b = x.chunk(2, dim)``; ``silu(a) * b`` (the first half is the gate), with silu
  rounded to x's dtype before the product as the kernel does for fp16/bf16;
- ``npu_geglu(x, dim, approximate, activate_left)``: returns ``(y, gelu)``: the activated half's GELU (tanh
  approximation when ``approximate`` is 1, erf when 0) and its product with the other half; by default the right
  half is activated (``activate_left=False``);
- ``fast_gelu(x)``: ``x * sigmoid(1.702 x)`` (written ``x / (1 + exp(-1.702 x))`` in CANN).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ascendify.emulator.fused._check import FLOATS, check, chip, dtype_in, on_npu


def _halves(op: str, x: torch.Tensor, dim: int):
    check(-x.dim() <= dim < max(x.dim(), 1), op, f"dim must be in [{-x.dim()}, {x.dim() - 1}], but got {dim}")
    check(1 <= x.dim() <= 8, op, f"input must have 1 to 8 dims, but got {x.dim()}")
    check(x.numel() > 0, op, "input must not be an empty tensor")
    check(x.shape[dim] % 2 == 0, op, f"the size of input along dim {dim} ({x.shape[dim]}) must be even")
    return x.chunk(2, dim)


def npu_swiglu(self, dim=-1):
    op = "npu_swiglu"
    dtype_in(self, FLOATS, op, "input")
    check(self.is_contiguous() or not on_npu(self), op, "input must be contiguous")
    a, b = _halves(op, self, dim)
    if self.dtype in (torch.float16, torch.bfloat16):
        return (F.silu(a.float()).to(self.dtype).float() * b.float()).to(self.dtype)
    return F.silu(a) * b


def npu_geglu(self, dim=-1, approximate=1, activate_left=False):
    op = "npu_geglu"
    dtype_in(self, FLOATS, op, "self")
    check(approximate in (0, 1), op, f"approximate must be 0 (erf) or 1 (tanh), but got {approximate}")
    left, right = _halves(op, self, dim)
    gate, other = (left, right) if activate_left else (right, left)
    ct = torch.float64 if self.dtype == torch.float64 else torch.float32
    gelu = F.gelu(gate.to(ct), approximate="tanh" if approximate == 1 else "none")
    return (gelu * other.to(ct)).to(self.dtype), gelu.to(self.dtype)


def _fast_gelu(op: str, x: torch.Tensor) -> torch.Tensor:
    allowed = FLOATS if chip() in ("A2", "A3") else (torch.float16, torch.float32)
    dtype_in(x, allowed, op, "self")
    if x.dtype in (torch.float16, torch.bfloat16):
        xf = x.float()
        return (xf * torch.sigmoid(1.702 * xf)).to(x.dtype)
    return x * torch.sigmoid(1.702 * x)


def fast_gelu(self):
    return _fast_gelu("fast_gelu", self)


def npu_fast_gelu(self):
    return _fast_gelu("npu_fast_gelu", self)


def npu_swiglu_backward(grad_output, self, dim=-1):
    """The gradient of :func:`npu_swiglu` with respect to its input: with ``a, b`` the halves and
    ``s = sigmoid(a)``, ``da = g * b * s * (1 + a * (1 - s))``, ``db = g * silu(a)``, concatenated along ``dim``
    (computed in float32, returned in the input's dtype)."""
    op = "npu_swiglu_backward"
    dtype_in(self, FLOATS, op, "input")
    dtype_in(grad_output, FLOATS, op, "grad_output")
    a, b = _halves(op, self, dim)
    check(tuple(grad_output.shape) == tuple(a.shape), op,
          f"grad_output must have the shape of the output {tuple(a.shape)}, but got {tuple(grad_output.shape)}")
    ct = torch.float64 if self.dtype == torch.float64 else torch.float32
    a, b, g = a.to(ct), b.to(ct), grad_output.to(ct)
    s = torch.sigmoid(a)
    da = g * b * s * (1 + a * (1 - s))
    db = g * a * s
    return torch.cat((da, db), dim).to(self.dtype)


def npu_clipped_swiglu(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0, interleaved=True):
    """GPT-OSS's clipped SwiGLU: ``A, B`` the (even, odd) or (first, second) halves along ``dim``;
    ``A = min(A, limit)``, ``B = clamp(B, -limit, limit)``, ``y = A * sigmoid(alpha * A) * (B + bias)``; with
    ``group_index`` only the first ``sum(group_index)`` rows (the axes before ``dim`` merged) are computed, the
    rest are zeros. float32 arithmetic, the input's dtype out; gradients by autograd."""
    op = "npu_clipped_swiglu"
    dtype_in(x, FLOATS, op, "x")
    check(x.dim() > 1, op, f"x must have more than 1 dim, but got {x.dim()}")
    check(-x.dim() <= dim < x.dim(), op, f"dim must be in [{-x.dim()}, {x.dim() - 1}], but got {dim}")
    d = dim % x.dim()
    check(x.shape[d] % 2 == 0, op, f"the size of x along dim {dim} ({x.shape[d]}) must be even")
    pre = 1
    for s in x.shape[:d]:
        pre *= s
    xv = x.reshape(pre, x.shape[d], -1)
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    xv = xv.to(ct)
    if interleaved:
        a, b = xv[:, 0::2], xv[:, 1::2]
    else:
        a, b = xv.chunk(2, 1)
    a = a.clamp(max=limit)
    b = b.clamp(-limit, limit)
    y = a * torch.sigmoid(alpha * a) * (b + bias)
    if group_index is not None:
        check(group_index.dim() == 1 and group_index.dtype == torch.int64, op, "group_index must be 1-D int64")
        n = int(group_index.sum())
        keep = (torch.arange(pre, device=x.device) < n).to(ct)[:, None, None]
        y = y * keep
    out_shape = list(x.shape)
    out_shape[d] //= 2
    return y.to(x.dtype).reshape(out_shape)
