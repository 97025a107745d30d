"""``port --overflow``: the migrated run's overflow check (``runs/target/overflow.json``, written by the observer),
read into the train stage's facts and drawn in its section."""

from __future__ import annotations

from typing import Any

from ascendify import report
from ascendify.port.options import Context
from ascendify.port.stages.base import StageResult, load_json, number_text


def overflow_text(o: dict[str, Any], short: bool = False) -> str:
    """One line on the overflow check of the migrated run (``facts["overflow"]``).

    >>> f = {"api": "mm", "direction": "forward", "module": "Net.attn", "module_class": "Attn",
    ...      "autograd_node": None, "file": "train.py", "line": 26, "dtype": "float16"}
    >>> overflow_text({"overflows": 3, "calls_checked": 900, "first": f, "skipped_steps": [], "gradscaler_updates": 0})
    '3 new inf/NaN in 900 calls, first mm (forward) in Net.attn (Attn) at train.py:26, float16'
    >>> overflow_text({"overflows": 0, "calls_checked": 900, "first": None}, short=True)
    'no new inf/NaN in 900 calls'
    """
    if o.get("skipped"):
        return f"not checked: {o['skipped']}"
    first = o.get("first")
    if not first:
        text = f"no new inf/NaN in {o.get('calls_checked') or 0:,} calls"
    else:
        n = o.get("overflows") or 0
        place = f"{first['module']} ({first['module_class']})" if first.get("module") else (
            first.get("autograd_node") or "no module")
        at = f"{first.get('file') or '?'}:{first.get('line') or '?'}"
        text = (f"{n:,} new inf/NaN in {o.get('calls_checked') or 0:,} calls, first {first['api']} "
                f"({first['direction']})")
        text += f" at {at}" if short else f" in {place} at {at}, {first.get('dtype')}"
    sk, ups = o.get("skipped_steps") or [], o.get("gradscaler_updates") or 0
    if ups:
        text += f"; GradScaler skipped {len(sk)} of {ups} steps"
    return text


def read_overflow(ctx: Context, train: StageResult) -> dict[str, Any]:
    """``--overflow``: the migrated run's ``runs/target/overflow.json`` (written by the observer, one per rank), in
    the fields of ``dump --overflow``'s overflow.json: ``first`` (the first new inf/NaN of rank 0, else of the
    first rank that had one), ``overflows`` and ``calls_checked`` (all ranks), ``npu_overflow_mode``,
    ``gradscaler_updates`` and ``skipped_steps`` (rank 0), ``findings`` (rank 0's first 20), with ``notes`` on what
    the watch changed in that run; or ``skipped`` saying why there is none."""
    target = (train.facts.get("runs") or {}).get("target") or {}
    files = sorted((ctx.runs / "target").glob("overflow*.json"))
    data = [d for d in (load_json(f) for f in files) if d is not None]
    if not data:
        if "train" in ctx.skip or target.get("skipped"):
            why = "the migrated run did not run" + (f" ({target['skipped']})" if target.get("skipped") else "")
        elif not target:
            why = "the migrated run did not run"
        else:
            why = ("the migrated run left no overflow.json (it ended before the program started: see its log)")
        return {"requested": True, "skipped": why}
    data.sort(key=lambda d: d.get("rank") or 0)
    main = data[0]
    first_of = next((d for d in data if d.get("first")), None)
    out: dict[str, Any] = {
        "requested": True,
        "file": ctx.rel(ctx.runs / "target" / "overflow.json"),
        "ranks": len(data),
        "overflows": sum(int(d.get("overflows") or 0) for d in data),
        "calls_checked": sum(int(d.get("calls_checked") or 0) for d in data),
        "first": first_of["first"] if first_of else None,
        "first_rank": first_of.get("rank") if first_of else None,
        "npu_overflow_mode": main.get("npu_overflow_mode"),
        "gradscaler_updates": main.get("gradscaler_updates") or 0,
        "skipped_steps": main.get("skipped_steps") or [],
        "steps_seen": main.get("steps_seen"),
        "findings": (main.get("findings") or [])[:20],
    }
    notes = ["the migrated run ran under the watch: its step time includes the check's cost, and the emulator's "
             "op counts include the check's reductions"]
    models = (train.facts.get("models") or {}).get("target") or []
    if any("(in OptimizedModule)" in (r.get("class") or "") for r in models):
        notes.append("the program compiles its model with torch.compile, which does not compile under the watch "
                     "(Dynamo skips frames while a TorchDispatchMode is active): the watched run ran eager; port "
                     "without --overflow to check the compiled run")
    if not models:
        notes.append("no model (an nn.Module with parameters) was called: every call of the run was still "
                     "watched, with no module to name")
    out["notes"] = notes
    return out


def section(sub: report.Section, o: dict) -> None:
    """The migrated run under the overflow watch: the verdict, the first new inf/NaN in detail, the findings and
    GradScaler's skipped steps (the fields of dump --overflow's overflow.json)."""
    if o.get("skipped"):
        sub.verdict("skip", f"not checked: {o['skipped']}")
        return
    first = o.get("first")
    mode = o.get("npu_overflow_mode") or {}
    bad = bool(first or o.get("skipped_steps"))
    sub.verdict("fail" if bad else ("warn" if mode.get("mode") == "saturation" else "ok"), overflow_text(o),
                "every aten call of the run, forward and backward (optimizer and GradScaler included), checked for "
                "an output with inf/NaN that its inputs did not have")
    kv: dict[str, Any] = {}
    if first:
        place = f"{first['module']} ({first['module_class']})" if first.get("module") else (
            f"autograd node {first['autograd_node']}" if first.get("autograd_node") else "outside any module")
        o0 = (first.get("outputs") or [{}])[0]
        kv.update({"first new inf/NaN": f"{first['api']} ({first['direction']}, {first.get('op')})"
                   + (f", rank {o['first_rank']}" if o.get("ranks", 1) > 1 else ""),
                   "where": f"{first.get('file')}:{first.get('line')} in {place}",
                   "code": first.get("code"), "observed step": first.get("iteration"),
                   "output": f"{first.get('dtype')} {o0.get('shape')}: {o0.get('inf', 0):,} inf, "
                             f"{o0.get('nan', 0):,} NaN"})
        for i, d in enumerate((first.get("inputs") or [])[:4]):
            kv[f"input {i}"] = f"{d.get('dtype')} {d.get('shape')}" + (
                f": min {number_text(d.get('min'))} max {number_text(d.get('max'))}" if "min" in d else "")
        if first.get("scalars"):
            kv["scalars"] = ", ".join(number_text(x) for x in first["scalars"])
    if mode:
        kv["emulated NPU overflow mode"] = f"{mode.get('mode')} ({mode.get('device')}): {mode.get('note')}"
    if o.get("gradscaler_updates"):
        kv["GradScaler"] = f"{len(o.get('skipped_steps') or [])} of {o['gradscaler_updates']} steps skipped"
    sub.kv(kv)
    rows = [{"#": f.get("index"), "step": f.get("iteration"), "call": f.get("api"), "direction": f.get("direction"),
             "where": f.get("module") or f.get("autograd_node"), "line": f"{f.get('file')}:{f.get('line')}",
             "dtype": f.get("dtype"), "inf": sum(x.get("inf", 0) for x in f.get("outputs") or []),
             "NaN": sum(x.get("nan", 0) for x in f.get("outputs") or [])} for f in o.get("findings") or []]
    if rows:
        sub.table([report.Column("#", kind="number"), report.Column("step", kind="number"), report.Column("call"),
                   report.Column("direction"), report.Column("where"), report.Column("line", kind="path"),
                   report.Column("dtype"), report.Column("inf", kind="number"), report.Column("NaN", kind="number")],
                  rows, caption=f"new inf/NaN in call order (the first {len(rows)} of {o.get('overflows', 0):,}; "
                                f"all in {o.get('file')})")
    sk = o.get("skipped_steps") or []
    if sk:
        sub.table([report.Column("update", kind="number"), report.Column("scale before", kind="number"),
                   report.Column("scale after", kind="number"), report.Column("at", kind="path")],
                  [{"update": x.get("update"), "scale before": x.get("scale_before"),
                    "scale after": x.get("scale_after"),
                    "at": f"{(x.get('where') or {}).get('file')}:{(x.get('where') or {}).get('line')}"}
                   for x in sk[:50]],
                  caption="GradScaler steps skipped (the scale went down: inf/NaN gradients)")
    for n in o.get("notes") or []:
        sub.text(n)
