"""Every emulated torch_npu operator has torch_npu's signature: the schema recorded in npu_fused_ops.json."""

import ast
import inspect
import re

import pytest

from ascendify.core import knowledge
from ascendify.emulator import fused

torch_npu = pytest.importorskip("torch_npu")
DATA = knowledge.load("npu_fused_ops")


def _split(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        depth += ch in "([" and 1 or 0
        depth -= ch in ")]" and 1 or 0
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*out, cur.strip()] if p]


_MISSING = object()


def _value(text: str):
    if text.startswith("["):  # a list default: Python spells it as a tuple (no mutable defaults)
        return tuple(ast.literal_eval(text))
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    if text[:1] in "'\"":
        return text[1:-1]
    return float(text) if re.search(r"[.e]", text) else int(text)


def parse(schema: str):
    """(positional [(name, default)], keyword-only {name: default}) of an op-plugin schema; an ``.out``
    overload's mutable keyword tensors become Python's ``out=``."""
    params = schema[schema.index("(") + 1: schema.rindex(") ->")]
    pos, kw, star = [], {}, False
    for p in _split(params):
        if p == "*":
            star = True
            continue
        typ, _, rest = p.partition(" ")
        name, eq, default = rest.partition("=")
        value = _value(default) if eq else _MISSING
        if star and "!" in typ:
            kw["out"] = None
        elif star:
            kw[name] = value
        else:
            pos.append((name, value))
    return pos, kw


def python_params(fn):
    pos, kw = [], {}
    for p in inspect.signature(fn).parameters.values():
        value = _MISSING if p.default is inspect.Parameter.empty else p.default
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            kw[p.name] = value
        else:
            pos.append((p.name, value))
    return pos, kw


def test_every_emulated_op_has_a_row_and_is_served_by_the_shim():
    assert set(DATA["ops"]) == fused.names()
    for name in DATA["ops"]:
        assert getattr(torch_npu, name) is fused.lookup(name)


@pytest.mark.parametrize("name", sorted(DATA["ops"]))
def test_signature_matches_the_schema(name):
    want_pos, want_kw = parse(DATA["ops"][name]["schema"])
    got_pos, got_kw = python_params(fused.lookup(name))
    assert got_pos == want_pos
    assert got_kw == want_kw


def test_optimizer_signatures_match_torch_npu_docs():
    from torch_npu import optim

    for name, row in DATA["optimizers"].items():
        fn = ast.parse(f"def {row['signature']}: pass").body[0].args
        defaults = [_MISSING] * (len(fn.args) - len(fn.defaults)) + [ast.literal_eval(d) for d in fn.defaults]
        want = [(a.arg, d) for a, d in zip(fn.args, defaults, strict=True)]
        got = [(p.name, _MISSING if p.default is inspect.Parameter.empty else p.default)
               for p in inspect.signature(getattr(optim, name)).parameters.values()]
        assert got == want, name


def test_torch_ops_npu_spelling_runs_the_same_kernels_with_autograd():
    import torch

    assert "npu_fusion_attention" in fused.register_torch_ops()  # idempotent: enable() registered them
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 8, generator=g).npu().requires_grad_(), torch.randn(8, generator=g).npu()
    y, _ = torch.ops.npu.npu_rms_norm(x, w, 1e-5)
    torch.testing.assert_close(y, torch_npu.npu_rms_norm(x, w, 1e-5)[0])
    y.sum().backward()
    assert x.grad is not None and x.grad.device.type == "npu"
    q = torch.randn(1, 6, 2, 8, generator=g).npu().requires_grad_()
    out = torch.ops.npu.npu_fusion_attention(q, q, q, 2, "BSND", scale=0.3)
    assert len(out) == 7 and out[6] == 1 * 2 * 6 * 6
    torch.testing.assert_close(out[0], torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", scale=0.3)[0])
    (grad,) = torch.autograd.grad(out[0].sum(), q)
    assert grad.shape == q.shape
    (gm,) = torch.ops.npu.npu_grouped_matmul([x.detach()], [torch.ones(2, 8, 4).npu()], group_list=[1, 3],
                                             split_item=2, group_type=0)
    assert gm.shape == (3, 4)


def test_ops_refuse_chips_their_documentation_does_not_list(fresh_report):
    import torch

    from ascendify.emulator.errors import NpuOpError

    q = torch.randn(1, 4, 2, 8).npu()
    fresh_report.settings.device_name = "Ascend910A"  # Atlas training series
    with pytest.raises(NpuOpError, match="npu_fusion_attention: not supported on Ascend910A"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND")
    torch_npu.npu_rotary_mul(q, q, q)  # documented for every family
    torch_npu.npu_fusion_attention(q.cpu(), q.cpu(), q.cpu(), 2, "BSND")  # CPU tensors: no chip
    fresh_report.settings.device_name = "Ascend910_9392"  # A3
    torch_npu.npu_fusion_attention(q, q, q, 2, "BSND")
