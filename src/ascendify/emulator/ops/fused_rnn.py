"""The fused RNN cell kernels that PyTorch calls on accelerators and has no CPU kernel for.

``nn.LSTM``/``nn.LSTMCell``/``nn.GRUCell`` on a non-CPU device use ``_thnn_fused_lstm_cell`` and
``_thnn_fused_gru_cell`` (and their backward ops). These are their element-wise definitions, computed on CPU
aliases. The ``workspace`` tensor is private to each forward/backward pair: here it holds the activated gates
(LSTM: ``[i, f, g, o]``; GRU: ``[r, z, n, hn, hx]``).
"""

from __future__ import annotations

import torch

from ascendify.emulator.device.tensors import adopt, cpu_alias


def _idx(t) -> int:
    return max(t.get_device(), 0)


def _a(t):
    return None if t is None else cpu_alias(t)


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = cpu_alias(input_gates) + cpu_alias(hidden_gates)
    if input_bias is not None:
        gates = gates + cpu_alias(input_bias)
    if hidden_bias is not None:
        gates = gates + cpu_alias(hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cpu_alias(cx) + i * g
    hy = o * cy.tanh()
    workspace = torch.cat((i, f, g, o), 1)
    k = _idx(cx)
    return adopt(hy, k), adopt(cy, k), adopt(workspace, k)


def lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = cpu_alias(workspace).chunk(4, 1)
    c_cy, c_cx = cpu_alias(cy), cpu_alias(cx)
    tanh_cy = c_cy.tanh()
    gcx = torch.zeros_like(c_cy) if grad_cy is None else cpu_alias(grad_cy).clone()
    if grad_hy is not None:
        ghy = cpu_alias(grad_hy)
        gcx = gcx + ghy * o * (1 - tanh_cy * tanh_cy)
        go = ghy * tanh_cy * o * (1 - o)
    else:
        go = torch.zeros_like(o)
    gi = gcx * g * i * (1 - i)
    gf = gcx * c_cx * f * (1 - f)
    gg = gcx * i * (1 - g * g)
    grad_gates = torch.cat((gi, gf, gg, go), 1)
    grad_cx = gcx * f
    grad_bias = grad_gates.sum(0) if has_bias else None
    k = _idx(cx)
    return adopt(grad_gates, k), adopt(grad_cx, k), None if grad_bias is None else adopt(grad_bias, k)


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ig, hg = cpu_alias(input_gates), cpu_alias(hidden_gates)
    if input_bias is not None:
        ig = ig + cpu_alias(input_bias)
    if hidden_bias is not None:
        hg = hg + cpu_alias(hidden_bias)
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    c_hx = cpu_alias(hx)
    hy = n + z * (c_hx - n)
    workspace = torch.cat((r, z, n, hn, c_hx), 1)
    k = _idx(hx)
    return adopt(hy, k), adopt(workspace, k)


def gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hn, hx = cpu_alias(workspace).chunk(5, 1)
    ghy = cpu_alias(grad_hy)
    d_hx = ghy * z
    d_n = ghy * (1 - z)
    d_z = ghy * (hx - n)
    d_in = d_n * (1 - n * n)
    d_r = d_in * hn
    d_hn = d_in * r
    d_ir = d_r * r * (1 - r)
    d_ii = d_z * z * (1 - z)
    g_input = torch.cat((d_ir, d_ii, d_in), 1)
    g_hidden = torch.cat((d_ir, d_ii, d_hn), 1)
    k = _idx(grad_hy)
    gi_b = adopt(g_input.sum(0), k) if has_bias else None
    gh_b = adopt(g_hidden.sum(0), k) if has_bias else None
    return adopt(g_input, k), adopt(g_hidden, k), adopt(d_hx, k), gi_b, gh_b

