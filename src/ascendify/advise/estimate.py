"""Where a step's time would go on a chip: a roofline estimate per op plus a per-op host cost. An *estimate*.

For every ATen call of a step (``trace.Op``), from its shapes and dtypes alone:

* **work**: floating-point operations (``2·M·K·N`` for a matmul, ``2·N·Cout·Hout·Wout·Cin/g·kh·kw`` for a
  convolution, ``4·B·H·L·S·E`` for attention, twice a forward's for their backward kernels; one per output element
  for the rest) and bytes moved (every tensor in and out, once);
* **device time**: ``max(flops / (peak[dtype] · e_c), bytes / (bandwidth · e_m))``, at least a kernel's floor; the
  peaks are the chip's published dense figures (``data/device_peaks.json``: the matmul peak for the dtype the
  Cube/Tensor cores run, fp32 or its HF32/TF32 mode as the program's switches say), ``e_c``/``e_m`` the achievable
  fractions of peak, and an op is *compute-bound* when its compute time is the larger;
* **host time**: the time to deliver the op (``dispatch_us``; a view or metadata op, ``view_us``).

A step's ops run asynchronously: the host delivers while the device computes, except across a synchronisation
(``.item()``, a copy to the host, a data-dependent shape, ``synchronize()``, an op that falls back to the CPU),
where the host waits for the device and the device then waits for the host. So the step is cut at its
synchronisations into segments, each costing ``max(host, device)``; the step is their sum, split into
*compute-bound*, *memory-bound* (device time by the ops' bound) and *host-bound* (host time not hidden behind the
device). The per-op costs no vendor publishes are assumptions (``data/advise_facts.json``); every estimate carries
them, and :func:`estimate_step` says which peaks it used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ascendify.advise.trace import Op, Trace

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1,
               "float8_e5m2": 1}

# ops that launch no kernel: metadata, views, allocation, profiler markers
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "slice", "select",
    "detach", "alias", "as_strided", "split", "split_with_sizes", "unbind", "chunk", "narrow", "diagonal",
    "view_as_real", "view_as_complex", "_reshape_alias", "unfold", "lift_fresh", "empty", "empty_like",
    "empty_strided", "new_empty", "new_empty_strided", "set_", "resize_", "_record_function_enter_new",
    "_record_function_exit", "record_stream", "is_same_size", "_has_compatible_shallow_copy_type",
    "result_type", "_fused_sdp_choice", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
    "reshape", "contiguous", "_to_copy_meta", "is_nonzero", "_conj", "_neg_view", "_nested_tensor_size",
})
MARKERS = frozenset({"_record_function_enter_new", "_record_function_exit"})
MATMUL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "_int_mm", "addmv", "mv",
                        "dot", "vdot", "_scaled_mm"})
ATTENTION_OPS = frozenset({
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward", "_efficient_attention_forward",
    "scaled_dot_product_attention", "npu_fusion_attention",
})
ATTENTION_BWD = frozenset({
    "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward", "_flash_attention_backward",
    "_efficient_attention_backward", "npu_fusion_attention_grad",
})
CONV_OPS = frozenset({"convolution", "_convolution", "conv2d", "conv1d", "conv3d", "cudnn_convolution",
                      "convolution_overrideable", "mkldnn_convolution", "_slow_conv2d_forward",
                      "_nnpack_spatial_convolution"})
CONV_BWD = frozenset({"convolution_backward", "convolution_backward_overrideable", "_slow_conv2d_backward"})

# a synchronisation of host and device: the host waits for the device's queue to drain
SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim", "_unique",
                      "unique_consecutive", "nonzero_static_sync", "repeat_interleave", "item", "equal",
                      "is_nonzero", "_assert_async"})


def matmul_peak_dtype(dtype: str, settings: dict[str, Any], device_kind: str, conv: bool = False) -> str:
    """The peak a matmul (``conv``: a convolution) with ``dtype`` inputs runs at: ``bf16``/``fp16``, or for fp32
    inputs ``hf32``/``tf32`` when the program's switches allow it, else ``fp32``."""
    if dtype in ("bfloat16",):
        return "bf16"
    if dtype in ("float16",):
        return "fp16"
    if dtype == "float32":
        if device_kind == "npu":
            key = "npu_conv_allow_hf32" if conv else "npu_matmul_allow_hf32"
            default = conv  # torch_npu's defaults: conv True, matmul False
            return "hf32" if settings.get(key, default) else "fp32"
        if device_kind == "cuda":
            if conv:
                return "tf32" if settings.get("cudnn_allow_tf32", True) else "fp32"
            prec = settings.get("float32_matmul_precision", "highest")
            return "tf32" if prec in ("high", "medium") or settings.get("cuda_matmul_allow_tf32") else "fp32"
        return "fp32"
    return "fp32" if dtype == "float64" else "int"


@dataclass
class Chip:
    """The figures an estimate uses for one chip: peaks in FLOP/s by dtype key, bandwidth in bytes/s, per-op
    host and device costs in seconds, and notes on where each came from."""

    name: str
    kind: str  # "npu" | "cuda" | "cpu"
    peaks: dict[str, float]
    bandwidth: float
    host_link: float
    dispatch_s: float
    view_s: float
    floor_s: float
    sync_s: float
    eff_compute: float
    eff_memory: float
    notes: list[str] = field(default_factory=list)
    entry_id: str | None = None

    def peak(self, key: str) -> float:
        return self.peaks.get(key) or self.peaks.get("fp32") or 1e12

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.entry_id, "kind": self.kind,
                "tflops": {k: round(v / 1e12, 3) for k, v in self.peaks.items()},
                "memory_gbps": round(self.bandwidth / 1e9, 1), "host_link_gbps": round(self.host_link / 1e9, 2),
                "dispatch_us": round(self.dispatch_s * 1e6, 2), "view_us": round(self.view_s * 1e6, 2),
                "kernel_floor_us": round(self.floor_s * 1e6, 2), "sync_us": round(self.sync_s * 1e6, 2),
                "efficiency": {
                    "compute": self.eff_compute, "memory": self.eff_memory}, "notes": self.notes}


def chip(name: str = "Ascend910B3", *, dispatch_us: float | None = None) -> Chip:
    """The :class:`Chip` for a device name as torch or npu-smi print it (``Ascend910B3``, ``NVIDIA H100 80GB
    HBM3``), from ``data/device_peaks.json`` and the assumptions of ``data/advise_facts.json``. Raises
    ``ValueError`` for a device the data does not know."""
    from ascendify.core import knowledge

    entry = knowledge.device_peaks(name)
    if entry is None:
        known = ", ".join(d["display"] for d in knowledge.load("device_peaks")["devices"])
        raise ValueError(f"no published peaks for device {name!r} (known: {known})")
    facts = knowledge.load("advise_facts")["assumptions"]
    kind = "npu" if entry["vendor"] == "huawei" else "cuda"
    tf = entry["tflops"]
    notes: list[str] = []
    half = tf.get("bf16") or tf.get("fp16")
    ratio = facts["unpublished_peak_ratio"]["value"]
    peaks: dict[str, float] = {}
    for key in ("fp32", "tf32", "hf32", "bf16", "fp16"):
        v = tf.get(key)
        if v is None and key in ("tf32", "hf32"):
            v = tf.get("hf32" if key == "tf32" else "tf32")
        if v is None and half:
            if key in ("tf32", "hf32"):
                v = half * ratio["hf32"]
                notes.append(f"{key} peak not published: taken as {ratio['hf32']:g} x the 16-bit peak (assumption)")
            elif key == "fp32":
                v = half * ratio["fp32"]
                notes.append(f"fp32 peak not published: taken as {ratio['fp32']:g} x the 16-bit peak (assumption)")
            elif key in ("bf16", "fp16"):
                v = half
        if v is not None:
            peaks[key] = float(v) * 1e12
    bw = entry.get("memory_gbps")
    if not bw:
        bw = 1200.0
        notes.append("memory bandwidth not published: 1,200 GB/s assumed (the 910B's figure)")
    link = entry.get("host_link_gbps") or 31.5
    disp = facts["dispatch_us"]["value"][kind] if dispatch_us is None else dispatch_us
    eff = facts["efficiency"]["value"]
    if entry.get("confidence") != "official":
        notes.append(f"{entry['display']}: peaks are {entry.get('confidence')} figures ({entry.get('note', '')})")
    return Chip(name=entry["display"], kind=kind, peaks=peaks, bandwidth=float(bw) * 1e9,
                host_link=float(link) * 1e9, dispatch_s=disp * 1e-6,
                view_s=facts["view_us"]["value"][kind] * 1e-6, floor_s=facts["kernel_floor_us"]["value"][kind] * 1e-6,
                sync_s=facts["sync_us"]["value"][kind] * 1e-6,
                eff_compute=eff["compute"], eff_memory=eff["memory"], notes=notes, entry_id=entry["id"])


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _bytes(metas) -> int:
    return sum(_numel(s) * DTYPE_BYTES.get(dt, 4) for s, dt, _ in metas)


def is_view(op: Op) -> bool:
    return op.base in VIEW_OPS or op.name in VIEW_OPS


def flops(op: Op) -> tuple[float, str | None]:
    """``(floating-point operations, kind)`` of one call; kind is ``matmul``/``conv``/``attention`` for the
    ops that run on the Cube/Tensor cores, else None."""
    b = op.base
    ins = op.ins
    try:
        if b in ("mm", "_int_mm") and len(ins) >= 2:
            (m, k), (_, n) = ins[0][0][-2:], ins[1][0][-2:]
            return 2.0 * m * k * n, "matmul"
        if b in ("addmm",) and len(ins) >= 3:
            (m, k), (_, n) = ins[1][0][-2:], ins[2][0][-2:]
            return 2.0 * m * k * n + m * n, "matmul"
        if b in ("bmm",) and len(ins) >= 2:
            bs, m, k = ins[0][0][-3:]
            n = ins[1][0][-1]
            return 2.0 * bs * m * k * n, "matmul"
        if b in ("baddbmm",) and len(ins) >= 3:
            bs, m, k = ins[1][0][-3:]
            n = ins[2][0][-1]
            return 2.0 * bs * m * k * n, "matmul"
        if b in ("addmv", "mv") and len(ins) >= 2:
            mat = ins[-2][0]
            return 2.0 * _numel(mat), "matmul"
        if b in ("dot", "vdot"):
            return 2.0 * _numel(ins[0][0]), "matmul"
        if b in ATTENTION_OPS and len(ins) >= 3:
            q, k, v = ins[0][0], ins[1][0], ins[2][0]
            bh = _numel(q[:-2])
            lq, e = q[-2], q[-1]
            s, ev = k[-2], v[-1]
            return 2.0 * bh * lq * s * (e + ev), "attention"
        if b.endswith("_backward") and b[: -len("_backward")] in ATTENTION_OPS and len(ins) >= 3:
            q, k, v = ins[0][0], ins[1][0], ins[2][0]  # a collapsed fused call's backward: its forward's inputs
            return 2.5 * 2.0 * _numel(q[:-2]) * q[-2] * k[-2] * (q[-1] + v[-1]), "attention"
        if b in ATTENTION_BWD and len(ins) >= 4:
            q, k, v = ins[1][0], ins[2][0], ins[3][0]
            bh = _numel(q[:-2])
            lq, e = q[-2], q[-1]
            s, ev = k[-2], v[-1]
            return 2.5 * 2.0 * bh * lq * s * (e + ev), "attention"
        if b in CONV_OPS and len(ins) >= 2 and op.outs:
            w = ins[1][0]  # (Cout, Cin / groups, kh, kw...)
            return 2.0 * _numel(op.outs[0][0]) * w[1] * _numel(w[2:]), "conv"
        if b in CONV_BWD and len(ins) >= 3:
            w = ins[2][0]
            go = ins[0][0]
            ksz = _numel(w[2:])
            return 2.0 * 2.0 * _numel(go) * w[1] * ksz, "conv"
    except (ValueError, IndexError, TypeError):
        return 0.0, None
    out = op.outs[0][0] if op.outs else (ins[0][0] if ins else ())
    n = max(_numel(out), max((_numel(s) for s, _, _ in ins), default=0))
    return float(n), None


@dataclass
class OpCost:
    index: int  # in trace.ops
    device_s: float
    host_s: float
    flops: float
    bytes: int
    bound: str  # "compute" | "memory" | "none" (no kernel)
    peak_key: str | None
    sync: bool


def op_cost(op: Op, c: Chip, settings: dict[str, Any], index: int = -1, fallback: bool = False) -> OpCost:
    if op.base in MARKERS:
        return OpCost(index, 0.0, 0.0, 0.0, 0, "none", None, False)
    on_dev = any(dev not in ("cpu", "meta") for _, _, dev in op.ins)
    sync = op.base in SYNC_OPS and on_dev
    sync = sync or (op.base in ("_to_copy", "copy_") and _device_to_host(op))
    if not sync and on_dev and op.base in ("index", "index_put", "index_put_", "_index_put_impl_"):
        sync = any(dt in ("bool", "uint8") for _, dt, _ in op.ins[1:])  # a boolean mask: nonzero inside
    if is_view(op) and not sync:
        return OpCost(index, 0.0, c.view_s, 0.0, 0, "none", None, False)
    if c.kind != "cpu" and not fallback and not _on_device(op):  # host-side work on CPU tensors: no kernel
        return OpCost(index, 0.0, c.view_s, 0.0, 0, "none", None, False)
    f, kind = flops(op)
    nbytes = _bytes(op.ins) + _bytes(op.outs)
    if op.base.endswith("_") and op.outs:  # in place: the output is an input
        nbytes -= _bytes(op.outs[:1])
    peak_key = None
    if kind is not None:
        dt = op.ins[0][1] if op.ins else "float32"
        if kind == "matmul" and op.base in ("addmm", "baddbmm") and len(op.ins) > 1:
            dt = op.ins[1][1]
        peak_key = matmul_peak_dtype(dt, settings, c.kind, conv=kind == "conv")
        if peak_key == "int":
            peak_key = "fp32"
        t_c = f / (c.peak(peak_key) * c.eff_compute)
    else:
        t_c = 0.0  # vector work: memory-bound on every chip here
    t_m = nbytes / (c.bandwidth * c.eff_memory)
    dev = max(t_c, t_m, c.floor_s)
    if fallback:  # runs on the host CPU: the device waits, the data crosses the host link twice
        dev = nbytes / c.host_link + c.floor_s
        sync = True
    if op.base in ("_to_copy", "copy_") and _crosses_host(op):
        dev = max(nbytes / 2 / c.host_link, c.floor_s)
        t_c, t_m = 0.0, dev
    bound = "compute" if t_c >= t_m and t_c > 0 else "memory"
    return OpCost(index, dev, c.dispatch_s, f, nbytes, bound, peak_key, sync)


def _device_to_host(op: Op) -> bool:
    if op.base == "_to_copy":
        to = (op.extra or {}).get("to")
        return bool(op.ins) and op.ins[0][2] not in ("cpu", "meta") and to == "cpu"
    if op.base == "copy_" and len(op.ins) >= 2:
        return op.ins[0][2] == "cpu" and op.ins[1][2] not in ("cpu", "meta")
    return False


def _crosses_host(op: Op) -> bool:
    if op.base == "_to_copy":
        to = (op.extra or {}).get("to")
        return bool(op.ins) and to is not None and (op.ins[0][2] == "cpu") != (to == "cpu")
    if op.base == "copy_" and len(op.ins) >= 2:
        return (op.ins[0][2] == "cpu") != (op.ins[1][2] == "cpu")
    return False


@dataclass
class StepEstimate:
    chip: Chip
    step: int
    total_s: float
    compute_s: float
    memory_s: float
    host_s: float  # host time not hidden behind the device
    host_total_s: float
    device_s: float
    syncs: int
    ops: int
    kernels: int
    data_wait_s: float
    costs: list[OpCost]

    def to_dict(self, trace: Trace | None = None, top: int = 12) -> dict[str, Any]:
        out = {
            "estimate": True,
            "chip": self.chip.to_dict(),
            "step": self.step,
            "step_ms": round(self.total_s * 1e3, 4),
            "compute_bound_ms": round(self.compute_s * 1e3, 4),
            "memory_bound_ms": round(self.memory_s * 1e3, 4),
            "host_bound_ms": round(self.host_s * 1e3, 4),
            "device_busy_ms": round(self.device_s * 1e3, 4),
            "host_dispatch_ms": round(self.host_total_s * 1e3, 4),
            "data_wait_ms": round(self.data_wait_s * 1e3, 4),
            "syncs": self.syncs,
            "ops": self.ops,
            "kernels": self.kernels,
            "assumptions": assumptions(self.chip),
        }
        if trace is not None:
            out["top_ops"] = top_ops(self, trace, top)
        return out


def assumptions(c: Chip) -> list[str]:
    return [
        f"peaks of {c.name} ({', '.join(f'{k} {v / 1e12:g}' for k, v in c.peaks.items())} TFLOP/s; "
        f"{c.bandwidth / 1e9:,.0f} GB/s), reached at {c.eff_compute:g} (compute) and {c.eff_memory:g} (memory) "
        "of peak",
        f"host: {c.dispatch_s * 1e6:g} us to deliver a kernel, {c.view_s * 1e6:g} us a view, {c.sync_s * 1e6:g} us "
        f"a synchronisation's round trip; device: at least {c.floor_s * 1e6:g} us a kernel",
        "host and device overlap except across a synchronisation; vector ops are memory-bound",
        *c.notes,
    ]


def estimate_step(trace: Trace, c: Chip, step: int | None = None, fallback_names: frozenset[str] | None = None,
                  ops: list[Op] | None = None) -> StepEstimate:
    """The estimate of one step of ``trace`` on chip ``c`` (``step``: default the median-cost steady step);
    ``fallback_names``: overloads that run on the host CPU on this chip (default: none; advise passes torch_npu's
    for an NPU); ``ops``: estimate these instead of a traced step."""
    settings = trace.settings
    if ops is None:
        if step is None:
            step = steady_step(trace)
        ops_idx = [i for i, o in enumerate(trace.ops) if o.step == step]
    else:
        ops_idx = list(range(len(ops)))
    src = trace.ops if ops is None else ops
    fb = fallback_names or frozenset()
    costs = []
    for i in ops_idx:
        o = src[i]
        costs.append(op_cost(o, c, settings, i, fallback=(o.name in fb or o.base in fb) and _on_device(o)))
    data_wait = 0.0
    if ops is None:
        for s in trace.steps:
            if s["step"] == step:
                data_wait = float(s.get("data_wait_s") or 0.0)
    return summarize(c, step if step is not None else -1, costs, data_wait)


def summarize(c: Chip, step: int, costs: list[OpCost], data_wait: float = 0.0) -> StepEstimate:
    """Add up a step's op costs (see the module docstring): the step is cut at its synchronisations into
    segments of ``max(host, device)`` each. Used for the step as traced and for "what if" variants of it."""
    total = comp = mem = hidden_host = 0.0
    seg_host, seg_dev = data_wait, 0.0
    syncs = 0
    for k in costs:
        seg_host += k.host_s
        seg_dev += k.device_s
        if k.bound == "compute":
            comp += k.device_s
        elif k.bound == "memory":
            mem += k.device_s
        if k.sync:  # the host waits for the device here; the device then waits for the host's next delivery
            syncs += 1
            total += max(seg_host, seg_dev) + c.sync_s
            hidden_host += max(0.0, seg_host - seg_dev)
            seg_host, seg_dev = 0.0, 0.0
    total += max(seg_host, seg_dev)
    hidden_host += max(0.0, seg_host - seg_dev)
    device = sum(k.device_s for k in costs)
    host_total = sum(k.host_s for k in costs) + data_wait
    if c.kind == "cpu":  # a CPU runs each op in the thread that delivers it: nothing overlaps
        total, hidden_host = device + host_total, host_total
    return StepEstimate(c, step, max(total, device), comp, mem, hidden_host, host_total, device, syncs, len(costs),
                        sum(1 for k in costs if k.bound != "none"), data_wait, costs)


def _on_device(op: Op) -> bool:
    return any(dev not in ("cpu", "meta") for _, _, dev in op.ins + op.outs)


def analysed_steps(trace: Trace) -> tuple[list[int], list[dict[str, Any]]]:
    """``(steps to analyse, steps left out)``: the whole steps after the first (which holds the program's warm-up;
    all whole steps when there is one), less the steps that ran several times (3x) the ops of the lightest one: an
    evaluation, a checkpoint, generation ran in them, not a training step."""
    whole = [s for s in trace.steps]
    steps = [s for s in whole if s["step"] > 0] or whole
    if not steps:
        return ([sorted({o.step for o in trace.ops})[0]] if trace.ops else [0]), []
    least = min(s.get("ops") or 0 for s in steps)
    odd = [s for s in steps if least and (s.get("ops") or 0) > 3 * least]
    keep = [s for s in steps if s not in odd]
    return [s["step"] for s in keep], [{"step": s["step"], "ops": s.get("ops") or 0, "least_ops": least}
                                       for s in odd]


def steady_step(trace: Trace) -> int:
    """The step to estimate: among the analysed steps (:func:`analysed_steps`), the one with the median number of
    ops; 0 for a trace without steps."""
    keep, _ = analysed_steps(trace)
    counts = {s["step"]: s.get("ops") or 0 for s in trace.steps}
    ordered = sorted(keep, key=lambda s: (counts.get(s, 0), s))
    return ordered[len(ordered) // 2] if ordered else 0


def top_ops(est: StepEstimate, trace: Trace, top: int = 12) -> list[dict[str, Any]]:
    """The ops of the step grouped by (op, user line, shapes), the costliest first."""
    groups: dict[tuple, dict[str, Any]] = {}
    for k in est.costs:
        o = trace.ops[k.index]
        if k.device_s == 0 and k.bound == "none":
            continue
        key = (o.name, o.site, tuple(s for s, _, _ in o.ins[:3]))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"op": o.name, "site": trace.label(o.site), "shapes": [list(s) for s, _, _ in o.ins[:3]],
                               "dtype": o.ins[0][1] if o.ins else (o.outs[0][1] if o.outs else None),
                               "phase": o.phase, "calls": 0, "device_us": 0.0, "host_us": 0.0, "bound": k.bound,
                               "gflop": 0.0}
        g["calls"] += 1
        g["device_us"] += k.device_s * 1e6
        g["host_us"] += k.host_s * 1e6
        g["gflop"] += k.flops / 1e9
    rows = sorted(groups.values(), key=lambda g: -g["device_us"])[:top]
    for g in rows:
        g["device_us"] = round(g["device_us"], 3)
        g["host_us"] = round(g["host_us"], 3)
        g["gflop"] = round(g["gflop"], 6)
    return rows


def pretty_ms(s: float) -> str:
    ms = s * 1e3
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1e3:.0f} us" if ms * 1e3 >= 1 or ms == 0 else f"{ms * 1e3:.2f} us"


def share(part: float, whole: float) -> float:
    return 0.0 if whole <= 0 or math.isnan(part) else max(0.0, min(1.0, part / whole))
