"""The emulator's report: a plain dict (JSON-ready) and a rich table for the terminal."""

from __future__ import annotations

from ascendify.emulator import runtime
from ascendify.emulator.compile import events
from ascendify.report.tables import format_bytes


def build() -> dict:
    rec, mem, s = runtime.recorder, runtime.memory, runtime.settings
    ops = rec.op_counts()
    devices = [
        {"device": f"npu:{i}", "allocated_bytes": mem.allocated[i], "peak_bytes": mem.peak[i],
         "capacity_bytes": mem.capacity(i), "ooms": mem.num_ooms[i]}
        for i in range(s.device_count)
        if mem.peak[i] or mem.num_allocs[i] or i == 0
    ]
    return {
        "enabled": runtime.enabled,
        "settings": s.as_dict(),
        "ops_run": sum(ops.values()),
        "distinct_ops": len(ops),
        "ops": ops,
        "fused_ops": dict(rec.fused.most_common()),
        "cpu_fallback_on_npu": dict(rec.no_npu_kernel.most_common()),
        "rejected": dict(rec.rejected.most_common()),
        "unsupported_apis": dict(rec.unsupported_apis.most_common()),
        "float64_events": dict(rec.float64.most_common()),
        "fp16_overflow_events": dict(rec.fp16_overflow.most_common()),
        "hccl_rule_violations": dict(rec.hccl_rules.most_common()),
        "peak_memory_bytes": max((d["peak_bytes"] for d in devices), default=0),
        "memory": devices,
        "graph_mode": events.build(),
        "kernels": _kernels(),
    }


def _kernels() -> str:
    """Which kernels served: "c++" (ops/cfast.cpp, with the Python ones for what it hands over) or "python"
    with the reason."""
    from ascendify.emulator.ops import cfast

    if cfast.loaded():
        return "c++"
    return f"python ({cfast.why() or 'the C++ kernels were not loaded'})"


def render(rep: dict, console=None, top: int = 10) -> None:
    """Print ``rep`` (from :func:`build`) as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(stderr=True)
    t = Table(title="ascendify emulate: summary", show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("ops run on the emulated npu", f"{rep['ops_run']:,} ({rep['distinct_ops']} distinct)")
    fused = rep.get("fused_ops") or {}
    if fused:
        t.add_row("torch_npu fused operators", f"{sum(fused.values()):,} ({len(fused)} distinct)")
    t.add_row("ops a real NPU runs on its CPU fallback", str(sum(rep["cpu_fallback_on_npu"].values())))
    t.add_row("rejected (a setting in mode error)", str(sum(rep["rejected"].values())))
    t.add_row("APIs unsupported on every chip", str(sum(rep["unsupported_apis"].values())))
    t.add_row("float64 events", str(sum(rep["float64_events"].values())))
    t.add_row("fp16 overflow events", str(sum(rep["fp16_overflow_events"].values())))
    t.add_row("HCCL rule violations", str(sum(rep.get("hccl_rule_violations", {}).values())))
    t.add_row("peak device memory", format_bytes(rep["peak_memory_bytes"]))
    if rep.get("kernels"):
        t.add_row("kernels", rep["kernels"])
    g = rep.get("graph_mode")
    if g:
        t.add_row("torch.compile: graphs compiled", str(g["compiled_graphs"]))
        t.add_row("torch.compile: graph breaks", str(g["graph_breaks"]))
        t.add_row("torch.compile: recompilations", str(g["recompiles"]))
    console.print(t)
    for line in graph_mode_lines(g):
        console.print(line, markup=False, highlight=False)
    for key, title in (("fused_ops", "torch_npu fused operators (the ATen ops they ran: above)"),
                       ("cpu_fallback_on_npu", "ops with no NPU kernel (CPU fallback on hardware)"),
                       ("unsupported_apis", "APIs unsupported on every Ascend chip"),
                       ("float64_events", "float64 on npu"), ("fp16_overflow_events", "fp16/bf16 overflow"),
                       ("hccl_rule_violations", "HCCL rules a real NPU enforces (hccl_rules.json)"),
                       ("rejected", "rejected")):
        if rep.get(key):
            d = Table(title=title, title_justify="left", min_width=60)
            d.add_column("name")
            d.add_column("count", justify="right")
            for name, n in list(rep[key].items())[:top]:
                d.add_row(name, str(n))
            console.print(d)


def graph_mode_lines(g: dict | None) -> list[str]:
    """The graph-mode findings worth a line each: a recompile loop, a break storm, the first causes."""
    if not g:
        return []
    lines = []
    if g["recompile_loop"]:
        loop = g["recompile_loop"]
        lines.append(f"recompile loop: {loop['function']} recompiled {loop['recompiles']} times (Dynamo's "
                     f"recompile_limit {loop['limit']}: it then runs eagerly); first cause: {loop['reason']}")
    elif g["first_recompile"]:
        r = g["first_recompile"]
        lines.append(f"first recompilation: {r['function']}: {r['reason']}")
    if g["graph_breaks"]:
        kind = "graph-break storm" if g["break_storm"] else "graph breaks"
        lines.append(f"{kind}: {g['graph_breaks']} ({len(g['graph_break_causes'])} causes); first cause: "
                     f"{g['first_graph_break']}")
    return lines
