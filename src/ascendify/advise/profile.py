"""On a real NPU: the findings from the torch_npu profiler's output instead of an estimate.

``torch_npu.profiler.profile(..., on_trace_ready=tensorboard_trace_handler(DIR))`` writes
``DIR/<worker>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/`` (the Ascend PyTorch Profiler user guide; the layout and
columns below are its):

* ``step_trace_time.csv``: per step ``Computing``, ``Communication(Not Overlapped)``, ``Overlapped``,
  ``Communication``, ``Free`` (the device idle: the host did not deliver), ``Stage``, ``Bubble``, ``Preparing`` (us);
* ``op_statistic.csv``: per operator type ``OP Type``, ``Core Type`` (``AI_CORE``, ``AI_VECTOR_CORE``,
  ``AI_CPU``, ``MIX_AIC``...), ``Count``, ``Total Time(us)``, ``Avg Time(us)``, ``Ratio(%)``;
* ``kernel_details.csv``: per kernel ``Step Id``, ``Name``, ``Type``, ``OP State`` (``dynamic``/``static``),
  ``Accelerator Core``, ``Start Time(us)``, ``Duration(us)``, ``Wait Time(us)``, ``Input Shapes``, ``Input Data
  Types``, ``HF32 Eligible``...;
* ``trace_view.json``: the timeline (Chrome trace events); the host's ``aclrtSynchronizeStream`` calls and, with
  ``with_stack=True``, each framework op's ``Call stack`` (the user's lines).

:func:`analyze_profile` turns them into the same :class:`Findings` as an emulated run (``source: "profile"``), with
*measured* times: the step's split (computing, communication, free), the operators that ran on the AI CPU, float64
kernels, kernels that met many shapes (dynamic shapes), fp32 matmuls not on HF32, synchronisations, and a
host-bound step (much free time). Findings name the user's line where the trace has call stacks, else the operator.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import statistics
from collections import Counter, defaultdict
from typing import Any

from ascendify.advise.model import Finding, Findings

OUTPUT = "ASCEND_PROFILER_OUTPUT"


def find_output(path: str) -> str:
    """The ``ASCEND_PROFILER_OUTPUT`` folder in ``path`` (the folder itself, a ``*_ascend_pt`` folder, or a folder
    holding one: the newest). Raises ``ValueError`` when there is none."""
    p = os.path.abspath(path)
    if not os.path.isdir(p):
        raise ValueError(f"{path}: not a folder")
    if os.path.basename(p) == OUTPUT:
        return p
    if os.path.isdir(os.path.join(p, OUTPUT)):
        return os.path.join(p, OUTPUT)
    found = sorted(glob.glob(os.path.join(p, "*", OUTPUT)) + glob.glob(os.path.join(p, "*", "*", OUTPUT)),
                   key=os.path.getmtime)
    if not found:
        raise ValueError(f"{path}: no {OUTPUT}/ in it (torch_npu.profiler with tensorboard_trace_handler writes "
                         f"<worker>_<time>_ascend_pt/{OUTPUT}/)")
    return found[-1]


def _key(name: str) -> str:
    return "".join(name.lower().replace("\ufeff", "").split())


def read_csv(path: str) -> list[dict[str, str]]:
    """Rows of a profiler CSV, keyed by the column names lower-cased without spaces (``durationus``...)."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return []
    head = [_key(h).replace("(", "").replace(")", "").replace("%", "") for h in rows[0]]
    return [dict(zip(head, r, strict=False)) for r in rows[1:] if any(c.strip() for c in r)]


def _f(v: Any) -> float:
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return 0.0


def _sources(*keys: str) -> list[dict[str, str]]:
    from ascendify.core import knowledge

    src = knowledge.load("advise_facts")["sources"]
    return [{"what": src[k]["what"], "url": src[k]["url"]} for k in keys if k in src]


def _finding(rule_id: str, message: str, evidence: dict[str, Any], weight_us: float | None, step_us: float,
             basis: str, where: tuple[str | None, int | None, str] = (None, None, "")) -> Finding:
    from ascendify.advise.rules import RULES

    r = RULES[rule_id]
    w = None if weight_us is None else round(weight_us / 1e3, 4)
    share = None if weight_us is None or step_us <= 0 else round(min(1.0, weight_us / step_us), 4)
    return Finding(rule=r.id, name=r.name, family=r.family, title=r.title, file=where[0], line=where[1],
                   function=None, code=where[2], message=message, evidence=evidence, why=r.why,
                   sources=_sources(*r.sources, "profiler_output"), fix=r.fix, weight_ms=w, share=share,
                   weight_basis=basis)


def analyze_profile(path: str, device: str | None = None) -> Findings:
    """The findings of a torch_npu profiler output (see the module docstring)."""
    out = find_output(path)
    steps = read_csv(os.path.join(out, "step_trace_time.csv"))
    stats = read_csv(os.path.join(out, "op_statistic.csv"))
    kernels = read_csv(os.path.join(out, "kernel_details.csv"))
    events = _trace_events(os.path.join(out, "trace_view.json"))
    if not (steps or stats or kernels):
        raise ValueError(f"{out}: none of step_trace_time.csv, op_statistic.csv, kernel_details.csv is there")
    found: list[Finding] = []
    # -- the step's split, measured
    per_step = []
    for r in steps:
        per_step.append({"step": r.get("step"), "computing_us": _f(r.get("computing")),
                         "communication_us": _f(r.get("communicationnotoverlapped")), "free_us": _f(r.get("free")),
                         "stage_us": _f(r.get("stage")) or None})
    step_us = 0.0
    split = {}
    if per_step:
        comp = statistics.median(s["computing_us"] for s in per_step)
        comm = statistics.median(s["communication_us"] for s in per_step)
        free = statistics.median(s["free_us"] for s in per_step)
        step_us = comp + comm + free
        split = {"measured": True, "step_ms": round(step_us / 1e3, 4), "computing_ms": round(comp / 1e3, 4),
                 "communication_ms": round(comm / 1e3, 4), "free_ms": round(free / 1e3, 4),
                 "steps": len(per_step)}
    elif kernels:
        step_us = sum(_f(k.get("durationus")) for k in kernels) / max(1, len({k.get("stepid") for k in kernels}))
    # -- host-bound: the device idles much of the step
    if split and step_us > 0 and split["free_ms"] * 1e3 >= 0.3 * step_us:
        found.append(_finding("ADV601", f"the NPU was idle {split['free_ms']:.2f} ms of a {split['step_ms']:.2f} ms "
                              f"step ({split['free_ms'] * 1e3 / step_us:.0%}, 'Free' in step_trace_time.csv)",
                              {"free_ms": split["free_ms"], "step_ms": split["step_ms"]}, split["free_ms"] * 1e3,
                              step_us, "measured: the step's Free time"))
    # -- AI CPU operators
    aicpu = [r for r in stats if "cpu" in r.get("coretype", "").lower()]
    if not aicpu and kernels:
        agg: dict[str, list[float]] = defaultdict(list)
        for k in kernels:
            if "cpu" in k.get("acceleratorcore", "").lower():
                agg[k.get("type") or k.get("name", "?")].append(_f(k.get("durationus")))
        aicpu = [{"optype": t, "count": str(len(v)), "totaltimeus": str(sum(v))} for t, v in agg.items()]
    n_steps = max(1, len(per_step) or len({k.get("stepid") for k in kernels}))
    for r in sorted(aicpu, key=lambda r: -_f(r.get("totaltimeus")))[:3]:
        t = _f(r.get("totaltimeus")) / n_steps
        op = r.get("optype", "?")
        found.append(_finding("ADV301", f"{op} ran on the AI CPU: {_f(r.get('count')) / n_steps:g} calls, "
                              f"{t / 1e3:.3f} ms per step (measured)", {"op": op, "core": "AI_CPU",
                                                                         "calls": int(_f(r.get("count")))},
                              t, step_us, "measured: its time on the AI CPU", where=_op_site(events, op)))
    # -- kernels: float64, dynamic shapes, fp32 matmuls not on HF32
    if kernels:
        f64 = [k for k in kernels if "double" in k.get("inputdatatypes", "").lower()
               or "float64" in k.get("inputdatatypes", "").lower()]
        if f64:
            by = Counter(k.get("type") or k.get("name") for k in f64)
            t = sum(_f(k.get("durationus")) for k in f64) / n_steps
            found.append(_finding("ADV302", f"{len(f64)} float64 kernels ({', '.join(list(by)[:4])}), {t / 1e3:.3f} "
                                  "ms per step (measured)", {"ops": dict(by)}, t / 2, step_us,
                                  "measured: half their time (float32 moves half the bytes)"))
        shapes: dict[str, set] = defaultdict(set)
        for k in kernels:
            shapes[k.get("type") or k.get("name", "?")].add(k.get("inputshapes", ""))
        dyn = [k for k in kernels if k.get("opstate", "").lower() == "dynamic"]
        if dyn and len({k.get("stepid") for k in kernels}) > 1:
            many = sorted(((len(v), t) for t, v in shapes.items() if len(v) > 3), reverse=True)[:4]
            if many:
                found.append(_finding("ADV201", f"{len(dyn)} kernels ran as dynamic operators; "
                                      + ", ".join(f"{t} met {n} shapes" for n, t in many),
                                      {"dynamic_kernels": len(dyn), "shapes_per_op": {t: n for n, t in many}}, None,
                                      step_us, "each new shape costs a compile or a re-tiling"))
        mm32 = [k for k in kernels if "matmul" in (k.get("type") or "").lower()
                and "float" in k.get("inputdatatypes", "").lower() and "16" not in k.get("inputdatatypes", "")
                and k.get("hf32eligible", "").upper() == "NO"]
        if mm32:
            t = sum(_f(k.get("durationus")) for k in mm32) / n_steps
            found.append(_finding("ADV501", f"{len(mm32) / n_steps:g} fp32 matmul kernels per step not on HF32, "
                                  f"{t / 1e3:.3f} ms per step (measured)", {"kernels": len(mm32)}, t / 2, step_us,
                                  "measured: at least half their time (HF32 or bf16 doubles the rate)"))
    # -- synchronisations on the host
    syncs = [e for e in events if "synchronizestream" in str(e.get("name", "")).lower()]
    if syncs and per_step:
        per = len(syncs) / len(per_step)
        if per >= 1:
            t = sum(_f(e.get("dur")) for e in syncs) / len(per_step)
            found.append(_finding("ADV101", f"{per:g} aclrtSynchronizeStream calls per step, {t / 1e3:.3f} ms "
                                  "(measured, the host waiting)", {"per_step": per}, t, step_us,
                                  "measured: the host's time in the synchronisations",
                                  where=_stack_site(events, syncs[0])))
    found.sort(key=lambda f: (f.weight_ms is None, -(f.weight_ms or 0.0)))
    top = _top_kernels(kernels, n_steps)
    estimate = None
    if split:
        estimate = {"measured": True, "chip": {"name": device or "the profiled NPU"}, "step_ms": split["step_ms"],
                    "compute_bound_ms": split["computing_ms"], "memory_bound_ms": 0.0,
                    "host_bound_ms": split["free_ms"], "device_busy_ms": split["computing_ms"],
                    "host_dispatch_ms": split["free_ms"], "communication_ms": split["communication_ms"],
                    "ops": int(len(kernels) / n_steps) if kernels else 0, "kernels": int(len(kernels) / n_steps),
                    "syncs": 0, "data_wait_ms": 0.0, "top_ops": top,
                    "assumptions": ["measured on the NPU by torch_npu.profiler: 'compute' is Computing, 'host' is "
                                    "Free (device idle) of step_trace_time.csv; no estimate"]}
    return Findings(findings=found, estimate=estimate, steps=per_step, source="profile",
                    meta={"device": device or "the profiled NPU", "profile": out, "steps_analysed": list(
                        range(len(per_step))), "ops_recorded": len(kernels), "program": f"profile {out}"})


def _trace_events(path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError):
        return []
    ev = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
    return [e for e in ev if isinstance(e, dict)] if isinstance(ev, list) else []


def _user_frame(stack: str) -> tuple[str | None, int | None, str]:
    """The first frame of a ``Call stack`` (``file.py(123): func;...``) outside torch and site-packages."""
    for part in str(stack).replace("\n", ";").split(";"):
        part = part.strip()
        if not part or "(" not in part:
            continue
        file, _, rest = part.partition("(")
        line = rest.split(")", 1)[0]
        if "site-packages" in file or "/torch/" in file or file.startswith("<") or not line.isdigit():
            continue
        return file, int(line), ""
    return None, None, ""


def _stack_site(events: list[dict[str, Any]], ev: dict[str, Any]) -> tuple[str | None, int | None, str]:
    """The user's line of the framework op enclosing ``ev`` on its thread (needs with_stack=True)."""
    ts, tid = _f(ev.get("ts")), ev.get("tid")
    best = None
    for e in events:
        args = e.get("args") or {}
        if "Call stack" not in args or e.get("ph") != "X":
            continue
        if e.get("tid") != tid and tid is not None:
            continue
        start = _f(e.get("ts"))
        if start <= ts <= start + _f(e.get("dur")):
            if best is None or start >= _f(best.get("ts")):
                best = e
    return _user_frame((best or {}).get("args", {}).get("Call stack", "")) if best else (None, None, "")


def _op_site(events: list[dict[str, Any]], op_type: str) -> tuple[str | None, int | None, str]:
    """The user's line of the first framework op whose name mentions ``op_type`` (needs with_stack=True)."""
    low = op_type.lower()
    for e in events:
        args = e.get("args") or {}
        if "Call stack" in args and low in str(e.get("name", "")).lower():
            site = _user_frame(args["Call stack"])
            if site[0]:
                return site
    return None, None, ""


def _top_kernels(kernels: list[dict[str, str]], n_steps: int, top: int = 12) -> list[dict[str, Any]]:
    agg: dict[tuple, dict[str, Any]] = {}
    for k in kernels:
        key = (k.get("type") or k.get("name"), k.get("acceleratorcore"))
        g = agg.setdefault(key, {"op": key[0], "site": "", "shapes": [], "dtype": k.get("inputdatatypes", ""),
                                 "phase": "", "calls": 0, "device_us": 0.0, "bound": key[1] or ""})
        g["calls"] += 1
        g["device_us"] += _f(k.get("durationus")) / n_steps
    rows = sorted(agg.values(), key=lambda g: -g["device_us"])[:top]
    for g in rows:
        g["device_us"] = round(g["device_us"], 3)
    return rows
