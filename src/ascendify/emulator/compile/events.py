"""Graph breaks and recompilations under emulation, for the emulator's summary.

A user wants to know, before paying for NPU time, whether ``torch.compile`` really compiles the program: how
many graphs, how many graph breaks (and why), how many recompilations (and why). Graph breaks come from
Dynamo's own counters (``torch._dynamo.utils.counters["graph_break"]``, one entry per cause, in the order
met); recompilations from Dynamo's guard-failure reasons, taken where Dynamo computes them for a
recompilation (``convert_frame.get_and_maybe_log_recompilation_reasons``, wrapped).

A *recompile loop* is a function that hit Dynamo's ``recompile_limit`` (Dynamo then runs it eagerly; taken
where Dynamo checks it, ``convert_frame.exceeds_recompile_limit``, wrapped);
a *graph-break storm* is :data:`BREAK_STORM` graph breaks or more. Both are reported with their first cause.
"""

from __future__ import annotations

import functools

from ascendify.emulator import runtime

BREAK_STORM = 10  # graph breaks from which the summary calls it a storm
_state: dict = {"baseline": {}, "recompiles": [], "loops": {}}


def install() -> None:
    import torch._dynamo.convert_frame as cf
    from torch._dynamo.utils import counters

    _state["baseline"] = dict(counters["graph_break"])
    orig = cf.get_and_maybe_log_recompilation_reasons

    @functools.wraps(orig)
    def reasons(cache_entries, frame, *args, **kwargs):
        out = orig(cache_entries, frame, *args, **kwargs)
        if not kwargs.get("skip_logging"):
            _state["recompiles"].append((_where(frame.f_code), _first_line(out[0]) if out else
                                         "unknown guard failure"))
        return out

    orig_limit = cf.exceeds_recompile_limit

    @functools.wraps(orig_limit)
    def exceeds(cache_size, compile_id, *args, **kwargs):
        exceeded, limit_type = orig_limit(cache_size, compile_id, *args, **kwargs)
        if exceeded and _state["recompiles"]:
            from torch._dynamo import config

            fn = _state["recompiles"][-1][0]
            if fn not in _state["loops"]:
                _state["loops"][fn] = getattr(config, limit_type, None)
        return exceeded, limit_type

    runtime.patches.set(cf, "get_and_maybe_log_recompilation_reasons", reasons)
    runtime.patches.set(cf, "exceeds_recompile_limit", exceeds)


def _where(code) -> str:
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


def _first_line(text: str) -> str:
    """A cause in one line: Dynamo's messages run to hints, stack traces and links."""
    head = text.split("\n  Hint:", 1)[0].split("\nUser stack trace", 1)[0]
    return " ".join(head.split())


def reset() -> None:
    import sys

    _state["recompiles"].clear()
    _state["loops"].clear()
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None:
        _state["baseline"] = dict(utils.counters["graph_break"])


def build() -> dict | None:
    """The summary's ``graph_mode`` section, or None when nothing was compiled under emulation."""
    import sys

    rec = runtime.recorder
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    base = _state["baseline"]
    breaks: dict[str, int] = {}
    for k, n in utils.counters["graph_break"].items():
        if n > base.get(k, 0):
            cause = _first_line(k)
            breaks[cause] = breaks.get(cause, 0) + n - base.get(k, 0)
    recompiles = _state["recompiles"]
    if not (rec.compiled_graphs or breaks or recompiles):
        return None
    per_fn: dict[str, int] = {}
    for fn, _ in recompiles:
        per_fn[fn] = per_fn.get(fn, 0) + 1
    loops = _state["loops"]
    first_loop = next(((fn, why) for fn, why in recompiles if fn in loops), None)
    total_breaks = sum(breaks.values())
    return {
        "compiled_graphs": rec.compiled_graphs,
        "graph_ops": sum(rec.graph_ops.values()),
        "graph_breaks": total_breaks,
        "graph_break_causes": breaks,
        "first_graph_break": next(iter(breaks), None),
        "break_storm": total_breaks >= BREAK_STORM,
        "recompiles": len(recompiles),
        "first_recompile": {"function": recompiles[0][0], "reason": recompiles[0][1]} if recompiles else None,
        "recompile_loop": ({"function": first_loop[0], "reason": first_loop[1], "recompiles": per_fn[first_loop[0]],
                            "limit": loops[first_loop[0]]} if first_loop else None),
    }
