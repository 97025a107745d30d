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


_COUNTERS = ("ops", "cpu_fallback_on_npu", "rejected", "unsupported_apis", "float64_events", "fp16_overflow_events",
             "hccl_rule_violations")


def merge(reports: list[dict]) -> dict:
    """One report for the workers of a launcher job (each a :func:`build` report with ``rank``): counters added
    up, the largest peak, each device with its rank, and ``ranks``: one line per worker.

    >>> a = {"rank": 0, "ops": {"add": 2}, "ops_run": 2, "peak_memory_bytes": 5, "memory": [], "exit_code": 0}
    >>> b = {"rank": 1, "ops": {"add": 1, "mm": 1}, "ops_run": 2, "peak_memory_bytes": 9, "memory": [], "exit_code": 0}
    >>> m = merge([b, a])
    >>> m["ops"], m["ops_run"], m["distinct_ops"], m["peak_memory_bytes"], [r["rank"] for r in m["ranks"]]
    ({'add': 3, 'mm': 1}, 4, 2, 9, [0, 1])
    """
    reports = sorted(reports, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))
    out = dict(reports[0])
    for key in _COUNTERS:
        total: dict = {}
        for r in reports:
            for name, n in (r.get(key) or {}).items():
                total[name] = total.get(name, 0) + n
        out[key] = dict(sorted(total.items(), key=lambda kv: -kv[1]))
    out["ops_run"] = sum(r.get("ops_run", 0) for r in reports)
    out["distinct_ops"] = len(out["ops"])
    out["peak_memory_bytes"] = max((r.get("peak_memory_bytes", 0) for r in reports), default=0)
    out["memory"] = [dict(d, rank=r.get("rank")) for r in reports for d in r.get("memory", [])]
    graphs = [r["graph_mode"] for r in reports if r.get("graph_mode")]
    if graphs:
        out["graph_mode"] = dict(graphs[0], **{k: sum(g.get(k, 0) for g in graphs)
                                               for k in ("compiled_graphs", "graph_breaks", "recompiles")})
    out["workers"] = len(reports)
    out["ranks"] = [{"rank": r.get("rank"), "exit_code": r.get("exit_code"), "ops_run": r.get("ops_run", 0),
                     "peak_memory_bytes": r.get("peak_memory_bytes", 0),
                     "cpu_fallback_on_npu": sum((r.get("cpu_fallback_on_npu") or {}).values()),
                     "rejected": sum((r.get("rejected") or {}).values()), "program": r.get("program")}
                    for r in reports]
    out.pop("rank", None)
    return out


def render(rep: dict, console=None, top: int = 10) -> None:
    """Print ``rep`` (from :func:`build`) as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(stderr=True)
    workers = rep.get("workers")
    title = f"ascendify emulate: summary of {workers} worker(s)" if workers else "ascendify emulate: summary"
    t = Table(title=title, show_header=False, title_justify="left")
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
    if rep.get("ranks"):
        w = Table(title="per worker", title_justify="left")
        for name in ("rank", "exit", "ops run", "CPU fallback", "rejected", "peak memory"):
            w.add_column(name, justify="right")
        for r in rep["ranks"]:
            w.add_row("-" if r["rank"] is None else str(r["rank"]),
                      "-" if r["exit_code"] is None else str(r["exit_code"]), f"{r['ops_run']:,}",
                      str(r["cpu_fallback_on_npu"]), str(r["rejected"]), format_bytes(r["peak_memory_bytes"]))
        console.print(w)
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
