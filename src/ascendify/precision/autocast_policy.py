"""Which calls ran in another dtype on the target than CUDA autocast would have run them in.

A CUDA model under ``torch.autocast("cuda", float16)`` and its NPU port under NPU autocast do not cast the same
ops: torch_npu's lists (``emulator.ops.autocast_lists``, from the wheel) lack ops PyTorch added to CUDA's since
(``rms_norm``, the ``upsample_*`` family in float32; ``linalg_vecdot`` in lower precision; ``vdot`` promoted), and a
port may call fused NPU kernels, cast explicitly or run a norm by hand. A divergence at a softmax or a norm is then
explained by the policy, not only located.

How the CUDA dtype of a call is known, without CUDA: PyTorch registers its CUDA autocast kernels
(``aten/src/ATen/autocast_mode.cpp``, dispatch key ``AutocastCUDA``) in every build, CPU-only included. Each target
call is **replayed** on fake CUDA tensors (``FakeTensorMode``: shapes and dtypes, no data, no device) with the
dtypes the target call really received, under CUDA autocast in the target's autocast dtype: the dtype of what comes
out is what CUDA autocast makes of the same inputs, from torch itself. Module calls are replayed with fake copies of
their parameters (``torch.func.functional_call``); only leaf calls (no recorded call inside) are replayed. A call
that cannot be replayed (device-specific code, a data-dependent shape) is left out and counted.

The CUDA op lists, by cast policy (``data/cuda_autocast.json``, PyTorch 2.13, the op set checked against the
running dispatcher by the tests), and the NPU's (``data/npu_kernels.json``) name the rule on each side.

Output: ``lockstep_differences`` / ``dump_differences`` give a dict for ``ComparisonResult.meta["autocast_policy"]``
(``{"autocast", "calls": [...], "replayed", "not_replayed", "source"}``); ``summary_lines`` and ``html_section`` show
it next to the divergence.
"""

from __future__ import annotations

import contextlib
import re
from functools import cache
from typing import Any

from ascendify.core import knowledge

POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")
_PLAIN = {"lower_precision_fp": "lower precision", "fp32": "float32", "fp32_set_opt_dtype": "float32 (dtype=)",
          "fp32_append_dtype": "float32 (dtype=)", "promote": "widest input", "banned": "refused"}  # fmt: skip


@cache
def _table(which: str) -> dict[str, str]:
    """op base name -> policy, for "cuda" (data/cuda_autocast.json) or "npu" (data/npu_kernels.json)."""
    lists = knowledge.load("cuda_autocast") if which == "cuda" else knowledge.npu_autocast_lists()
    out: dict[str, str] = {}
    for pol in POLICIES:
        for op in lists.get(pol, ()):
            out.setdefault(op.split(".")[0], pol)
    return out


def cuda_ops() -> dict[str, list[str]]:
    """The CUDA autocast lists by policy (``fp32_append_dtype`` as its list of overloads)."""
    d = knowledge.load("cuda_autocast")
    return {p: (sorted(d[p]) if isinstance(d.get(p), dict) else list(d.get(p, ()))) for p in POLICIES}


_DUNDER = re.compile(r"^__i?(\w+?)__$")
_OP_ALIASES = {"truediv": "div", "matmul": "matmul", "interpolate": "upsample", "cross_entropy": "log_softmax",
               "scaled_dot_product_attention": "_scaled_dot_product_flash_attention", "vecdot": "linalg_vecdot",
               "norm": "norm", "mul": "mul"}  # fmt: skip
_CLASS_OPS = {"Linear": "linear", "LayerNorm": "layer_norm", "GroupNorm": "group_norm", "RMSNorm": "rms_norm",
              "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d", "ConvTranspose1d": "conv_transpose1d",
              "ConvTranspose2d": "conv_transpose2d", "ConvTranspose3d": "conv_transpose3d", "Softmax": "softmax",
              "LogSoftmax": "log_softmax", "Bilinear": "bilinear", "Upsample": "upsample", "PReLU": "prelu",
              "CosineSimilarity": "cosine_similarity", "Softplus": "softplus", "MSELoss": "mse_loss",
              "CrossEntropyLoss": "log_softmax", "NLLLoss": "nll_loss", "L1Loss": "l1_loss"}  # fmt: skip


def op_name(api: str | None, class_name: str | None = None) -> str | None:
    """The ATen op base name of a recorded call (``torch.nn.functional.softmax`` -> ``softmax``, ``Tensor.__mul__``
    -> ``mul``, a ``LayerNorm`` module -> ``layer_norm``), for naming its rule; None when unknown."""
    if api:
        name = api.rsplit(".", 1)[-1]
        m = _DUNDER.match(name)
        if m:
            name = m.group(1)
        name = name.removeprefix("linalg_") if name.startswith("linalg_") and name != "linalg_vecdot" else name
        name = name.rstrip("_") or name
        return _OP_ALIASES.get(name, name)
    if class_name:
        return _CLASS_OPS.get(class_name)
    return None


def rule(which: str, op: str | None) -> str | None:
    """The autocast policy of ``op`` on ``which`` ("cuda" | "npu"), or None (not listed: runs in its inputs' dtype).
    ``upsample`` stands for the whole family."""
    if not op:
        return None
    t = _table(which)
    if op == "upsample":
        return next((p for o, p in t.items() if o.startswith(("upsample", "_upsample"))), None)
    return t.get(op)


# ---------------------------------------------------------------------------------------------------------------
# replay on fake CUDA tensors


@contextlib.contextmanager
def _fake_cuda_autocast(dtype):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    prev = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    off = []
    for dev in ("cpu", torch._C._get_privateuse1_backend_name()):  # the target's own autocast stays out
        try:
            if torch.is_autocast_enabled(dev):
                off.append(dev)
                torch.set_autocast_enabled(dev, False)
        except Exception:
            pass
    mode = FakeTensorMode()
    try:
        with torch.no_grad(), mode:
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", dtype)
            yield mode
    finally:
        torch.set_autocast_enabled("cuda", prev[0])
        torch.set_autocast_dtype("cuda", prev[1])
        torch.clear_autocast_cache()
        for dev in off:
            torch.set_autocast_enabled(dev, True)


def _fake(t):
    import torch

    if t.is_complex() or t.layout != torch.strided:
        return torch.empty(t.shape, dtype=t.dtype, device="cuda")
    # never requires_grad: autograd metadata of a CUDA tensor asks for a CUDA device guard, which a CPU-only build
    # does not have (an abort, not an exception); the replay runs under no_grad for the same reason
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cuda")


def _to_cuda(v):
    import torch

    if isinstance(v, torch.Tensor):
        return _fake(v)
    if isinstance(v, torch.device) or (isinstance(v, str) and re.fullmatch(r"(npu|cuda|cpu)(:\d+)?", v)):
        return "cuda"
    if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        conv = [_to_cuda(x) for x in v]
        return type(v)(conv) if isinstance(v, tuple) and not hasattr(v, "_fields") else conv
    if isinstance(v, dict):
        return {k: _to_cuda(x) for k, x in v.items()}
    return v


def _first_float(obj) -> str | None:
    import torch
    from torch.utils._pytree import tree_leaves

    for t in tree_leaves(obj):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return None


def replay_dtype(fn, args, kwargs, autocast_dtype, module=None) -> str | None:
    """The dtype CUDA autocast (``autocast_dtype``) gives the first floating output of ``fn(*args, **kwargs)`` (or of
    ``module``'s forward), replayed on fake CUDA tensors with the same shapes and dtypes. Raises when the call
    cannot be replayed."""
    import torch

    with _fake_cuda_autocast(autocast_dtype):
        a, k = _to_cuda(tuple(args)), _to_cuda(dict(kwargs or {}))
        if module is not None:
            state = {n: _fake(t) for n, t in module.named_parameters()}
            state.update({n: _fake(t) for n, t in module.named_buffers()})
            out = torch.func.functional_call(module, state, tuple(a), k)
        else:
            out = fn(*a, **k)
        return _first_float(out)


# ---------------------------------------------------------------------------------------------------------------
# the findings


def _finding(node, target_dtype: str, cuda_dtype: str, ac: str, in_dtypes: list[str]) -> dict[str, Any]:
    op = op_name(node.api, node.class_name)
    return {
        "call": node.name,
        "module": node.module,
        "api": node.api,
        "class_name": node.class_name,
        "op": op,
        "source": node.source,
        "inputs": in_dtypes,
        "target_dtype": target_dtype,
        "cuda_dtype": cuda_dtype,
        "cuda_rule": rule("cuda", op),
        "npu_rule": rule("npu", op),
        "text": _text(node, op, target_dtype, cuda_dtype, ac),
    }


def _text(node, op, target_dtype, cuda_dtype, ac) -> str:
    what = op or node.api or node.class_name or node.name
    where = f" in {node.module}" if node.module else ""
    cr, nr = rule("cuda", op), rule("npu", op)
    why = []
    if cr:
        why.append(f"CUDA's {cr} list")
    elif op:
        why.append("in no CUDA list")
    if nr:
        why.append(f"the NPU's {nr} list")
    elif op:
        why.append("in no NPU list")
    return (f"{what}{where} ran in {target_dtype} on the target; CUDA autocast({ac}) runs it in {cuda_dtype}"
            + (f" ({'; '.join(why)})" if why else ""))


def _innermost(found: dict[int, dict], parents: list[int | None]) -> list[int]:
    """Indices of findings with no finding inside them (a block's output dtype follows its last call's)."""
    holders = set()
    for i in found:
        p, hops = parents[i], 0
        while p is not None and hops < len(parents):
            holders.add(p)
            p, hops = parents[p], hops + 1
    return [i for i in sorted(found) if i not in holders]


def _dtype(ac) -> Any:
    import torch

    if ac is None:
        return None
    if isinstance(ac, torch.dtype):
        return ac
    return getattr(torch, str(ac).removeprefix("torch."), None)


def lockstep_differences(calls: list, nodes: list, target_autocast) -> dict[str, Any] | None:
    """For lockstep's target calls (``lockstep._Call``, with their ``NodeResult``): the leaf calls whose output
    dtype differs from what CUDA autocast in the same dtype makes of the same inputs. None without autocast."""
    import torch

    ac = _dtype(target_autocast)
    if ac is None:
        return None
    has_child = {c.parent for c in calls if c.parent is not None}
    found: dict[int, dict] = {}
    replayed = failed = 0
    for i, c in enumerate(calls):
        if i in has_child:
            continue
        target_dt = _first_float(c.out)
        if target_dt is None:
            continue
        try:
            if c.kind == "module":
                cuda_dt = replay_dtype(None, c.args, c.kwargs, ac, module=c.module)
            else:
                cuda_dt = replay_dtype(c.module, c.args, c.kwargs, ac)
            replayed += 1
        except Exception:
            failed += 1
            continue
        if cuda_dt is not None and cuda_dt != target_dt:
            ins = [str(t.dtype).removeprefix("torch.") for t in _tensors((c.args, c.kwargs))]
            found[i] = _finding(nodes[i], target_dt, cuda_dt, str(ac).removeprefix("torch."), ins)
    return _result(found, [c.parent for c in calls], ac, replayed, failed, torch)


def _tensors(obj) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _result(found, parents, ac, replayed, failed, torch) -> dict[str, Any]:
    keep = _innermost(found, parents)
    return {
        "autocast": str(ac).removeprefix("torch."),
        "calls": [found[i] for i in keep],
        "replayed": replayed,
        "not_replayed": failed,
        "source": f"replayed under torch {torch.__version__}'s CUDA autocast on fake CUDA tensors",
    }


# -- dumps: rebuild each API call from its recorded metadata ------------------------------------------------------


def _resolve(api: str):
    import torch

    parts = api.split(".")
    if parts[0] == "Tensor":
        obj: Any = torch.Tensor
        parts = parts[1:]
    elif parts[0] == "torch":
        obj = torch
        parts = parts[1:]
    else:
        return None
    for p in parts:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


def _value(item):
    """A recorded input (``TensorStats`` or ``ScalarArg``) as a replayable value: a fake-able meta tensor for a
    tensor, the Python value for a scalar. Raises for what cannot be rebuilt."""
    import torch

    from ascendify.precision.model import ScalarArg

    if isinstance(item, ScalarArg):
        t, v = item.type, item.value
        if t in ("int", "float", "bool", "str", "NoneType"):
            return v
        if t == "torch.dtype":
            return getattr(torch, str(v).removeprefix("torch."))
        if t == "torch.Size":
            return torch.Size(v)
        if t == "torch.device":
            return "cuda"
        if t in ("list", "tuple") and v == []:
            return [] if t == "list" else ()
        if t == "slice" and isinstance(v, list):
            return slice(*v)
        if t == "ellipsis":
            return Ellipsis
        raise ValueError(f"cannot rebuild a {t}")
    dt = getattr(torch, str(item.dtype).removeprefix("torch."))
    return torch.empty(tuple(item.shape), dtype=dt, device="meta")


def _rebuild(node) -> tuple[list, dict]:
    pos: list = []
    kw: dict = {}
    for item in node.inputs:
        key = item.key or ""
        v = _value(item)
        head, _, rest = key.partition(".")
        if head.isdigit():
            i = int(head)
            while len(pos) <= i:
                pos.append(None)
            if rest:
                if not isinstance(pos[i], list):
                    pos[i] = []
                pos[i].append(v)
            else:
                pos[i] = v
        elif rest:
            kw.setdefault(head, []).append(v)
        else:
            kw[key] = v
    return pos, kw


def dump_differences(target_dump) -> dict[str, Any] | None:
    """For a target dump (``model.Dump``) recorded under autocast: its forward API calls (innermost) whose output
    dtype differs from what CUDA autocast makes of the same input dtypes. None when no call ran under autocast."""
    import torch

    fwd = [n for n in target_dump.nodes if n.direction == "forward"]
    acs = {n.autocast for n in fwd if n.autocast}
    if not acs:
        return None
    ac = _dtype(sorted(acs)[0])
    index = {n.name: i for i, n in enumerate(fwd)}
    parents = [index.get(n.parent) if n.parent else None for n in fwd]
    has_child = {p for p in parents if p is not None}
    found: dict[int, dict] = {}
    replayed = failed = 0
    for i, n in enumerate(fwd):
        if n.kind != "api" or i in has_child or not n.autocast or not n.api:
            continue
        outs = [o for o in n.outputs if getattr(o, "dtype", None) and "float" in str(o.dtype)]
        if not outs:
            continue
        target_dt = str(outs[0].dtype).removeprefix("torch.")
        fn = _resolve(n.api)
        try:
            if fn is None:
                raise ValueError("unknown api")
            args, kwargs = _rebuild(n)
            args, kwargs = _materialise(args), _materialise(kwargs)
            cuda_dt = replay_dtype(fn, args, kwargs, _dtype(n.autocast) or ac)
            replayed += 1
        except Exception:
            failed += 1
            continue
        if cuda_dt is not None and cuda_dt != target_dt:
            ins = [str(x.dtype).removeprefix("torch.") for x in n.tensor_inputs if "float" in str(x.dtype)]
            found[i] = _finding(_DumpNode(n), target_dt, cuda_dt, str(ac).removeprefix("torch."), ins)
    return _result(found, parents, ac, replayed, failed, torch)


def _materialise(obj):
    """Meta tensors -> CPU tensors of the same shape/dtype (``_to_cuda`` fakes them; values are never read)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return torch.empty(obj.shape, dtype=obj.dtype)
    if isinstance(obj, list):
        return [_materialise(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _materialise(v) for k, v in obj.items()}
    return obj


class _DumpNode:
    """A dump node seen as a ``NodeResult`` (name, module, api, class_name, source)."""

    def __init__(self, n):
        self.name, self.module, self.api, self.class_name, self.source = (
            n.name, n.module_path, n.api, n.class_name, n.source)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# shown next to the divergence


def summary_lines(result) -> list[str]:
    """Lines for the terminal summary: the first divergence's own autocast difference (or one inside or around
    it) first, then how many calls differ in all."""
    ap = (result.meta or {}).get("autocast_policy")
    if not ap or not ap.get("calls"):
        return []
    calls = ap["calls"]
    lines = []
    fd = result.first_divergence
    if fd is not None:
        near = [c for c in calls if c["call"] == fd.name or _related(c, fd)]
        for c in near[:2]:
            lines.append(f"  autocast: {c['text']}")
    lines.append(f"  autocast policy: {len(calls)} call{'' if len(calls) == 1 else 's'} ran in another dtype than "
                 f"under CUDA autocast({ap['autocast']})" + (": " + "; ".join(_short(c) for c in calls[:3])
                                                              + (" ..." if len(calls) > 3 else "")))
    return lines


def _short(c: dict) -> str:
    return f"{c['op'] or c['call']} {c['target_dtype']} (CUDA {c['cuda_dtype']})"


def _related(c: dict, fd) -> bool:
    """The finding sits in the divergent call's module, or the divergent call sits in the finding's."""
    m, fm = c.get("module") or "", fd.module or ""
    if fd.api:  # an API call: the same call site
        return c.get("api") == fd.api and m == fm
    return bool(fm) and (m == fm or m.startswith(fm + "."))


def html_section(page, result) -> None:
    """An "Autocast policy" section of the compare page (nothing when the target ran without autocast)."""
    from ascendify import report

    ap = (result.meta or {}).get("autocast_policy")
    if not ap:
        return
    s = page.section("Autocast policy", anchor="autocast-policy")
    if ap.get("error"):
        s.text(f"Not worked out: {ap['error']}")
        return
    s.text(f"Calls whose output dtype on the target differs from what CUDA autocast({ap['autocast']}) makes of the "
           f"same input dtypes ({ap['source']}; {ap['replayed']} calls replayed, {ap['not_replayed']} could not be).")
    if not ap["calls"]:
        s.text("None: every replayed call ran in the dtype CUDA autocast would have used.")
        return
    cols = [report.Column("call", kind="path"), report.Column("op"), report.Column("target_dtype", "target"),
            report.Column("cuda_dtype", "CUDA autocast"), report.Column("cuda_rule", "CUDA list"),
            report.Column("npu_rule", "NPU list"), report.Column("source", "called at", kind="path")]
    s.table(cols, [{k: (v if v is not None else "-") for k, v in c.items()} for c in ap["calls"]])
