"""The outputs of ``ascendify port`` (and ``demo``) for people: ``report.html`` (one self-contained page linking every step's own outputs) and
the terminal summary (80 columns: a line per step, the checklist, the verdict)."""

from __future__ import annotations

import difflib
import html
import math
from pathlib import Path
from typing import Any

from ascendify import report
from ascendify.port import steps as st

_ANCHOR = {"doctor": "doctor", "migrate": "migrate", "train": "train", "compare": "compare", "bench": "bench",
           "checklist": "checklist", "report": "summary"}


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _secs(x: float) -> str:
    return f"{x:.1f} s" if x < 100 else f"{x:.0f} s"


def _links(sec: report.Section, res: st.StepResult) -> None:
    files = [f for f in res.files if f]
    if not files:
        return
    items = "".join(f'<li><a href="{_e(_rel(f))}">{_e(_rel(f))}</a></li>' for f in files)
    sec.html(f'<div class="outputs"><b>Outputs</b><ul>{items}</ul></div>')


def _rel(f: str) -> str:
    p = Path(f)
    if p.is_absolute():
        # logs are recorded with their absolute path; the page links them relative to OUT
        parts = p.parts
        if "logs" in parts:
            return "/".join(parts[parts.index("logs"):])
    return f


def _step_verdict(sec: report.Section, res: st.StepResult) -> None:
    status = {"error": "error", "fail": "fail", "warn": "warn", "ok": "ok"}.get(res.status, "skip")
    sec.verdict(status, res.headline or res.status,
                f"{_secs(res.seconds)} wall, {_secs(res.cpu_seconds)} CPU" if res.jobs else None)
    if res.error:
        sec.code(res.error, title="what went wrong")


def _commands(sec: report.Section, res: st.StepResult) -> None:
    lines = [wrap_command(j.shown) for j in res.jobs if j.shown]
    if lines:
        sec.code("\n".join(lines), title="commands (paths relative to the report folder)")


def wrap_command(cmd: str, width: int = 100) -> str:
    """A long shell command broken into ``\\``-continued lines at argument boundaries (``--flag value`` together).

    >>> print(wrap_command("ascendify run --to cpu train.py --steps 4 --batch-size 2", width=30))
    ascendify run --to cpu \\
        train.py --steps 4 \\
        --batch-size 2
    >>> wrap_command("cd runs/golden/tree/p && X='a b' ascendify run -- python t.py")  # the shell's own words
    "cd runs/golden/tree/p && X='a b' ascendify run -- python t.py"
    """
    import shlex
    import textwrap

    def quote(w: str) -> str:  # a word of the shell's own (&&, ;) stays what it is, NAME=VALUE an assignment
        if w in ("&&", "||", ";", "|"):
            return w
        name, eq, value = w.partition("=")
        return f"{name}={shlex.quote(value)}" if eq and name.isidentifier() else shlex.quote(w)

    try:
        words = shlex.split(cmd)
    except ValueError:  # a description, not a shell line
        return "\n".join(textwrap.wrap(cmd, width=width, subsequent_indent="    "))
    groups: list[str] = []
    for w in words:
        if groups and not w.startswith("-") and groups[-1].startswith("-") and " " not in groups[-1]:
            groups[-1] += " " + quote(w)
        else:
            groups.append(quote(w))
    lines, cur = [], ""
    for g in groups:
        if cur and len(cur) + 1 + len(g) > width - 2:
            lines.append(cur)
            cur = "    " + g
        else:
            cur = f"{cur} {g}" if cur else g
    lines.append(cur)
    return " \\\n".join(lines)


def html_report(result) -> report.HtmlReport:
    status, sentence = result.verdict
    name = result.project.name if result.project else "project"
    what = f"{'quick' if result.quick else 'default'} sizes" if result.verb == "demo" else " ".join(result.command)
    sites = ((result.steps.get("migrate").facts if result.steps.get("migrate") else {}).get("totals") or {}).get(
        "cuda_sites")
    kind = " (CUDA)" if sites else (" (no CUDA code)" if sites == 0 else "")  # what migrate found, not assumed
    page = report.HtmlReport(
        f"ascendify {result.verb}: {name}{kind} → Ascend NPU",
        subtitle=f"target: {st.TARGET_LABEL[result.target]} · {what} · exit {result.exit_code}",
    )
    _summary(page.section("Summary", anchor="summary"), result, status, sentence)
    _checklist(page.section("Migration checklist", anchor="checklist"), result)
    for step, fn in (("doctor", _doctor), ("migrate", _migrate), ("train", _train), ("compare", _compare),
                     ("bench", _bench)):
        res = result.steps[step]
        sec = page.section(f"{list(st.STEP_IDS).index(step) + 1}. {res.title}", anchor=_ANCHOR[step])
        _step_verdict(sec, res)
        if res.status not in ("skip", "error") or res.facts:
            try:
                fn(sec, res, result)
            except Exception as e:  # noqa: BLE001 (a partial section beats no report)
                sec.verdict("error", f"this section could not be drawn: {type(e).__name__}: {e}")
        _commands(sec, res)
        _links(sec, res)
    return page


_EXIT_TEXT = {
    "demo": {0: "proven: both runs made their steps and the lockstep matched", 1: "findings (see below)",
             3: "a step crashed", 5: "not proven (see the verdict)"},
    "port": {0: "proven: both runs made their steps and the lockstep matched", 1: "findings (see below)",
             4: "a step crashed, or the original program failed", 5: "not proven (see the verdict)"},
}


def _summary(sec, result, status, sentence) -> None:
    sec.verdict(status, sentence, result.target_reason)
    sec.kv({
        "target": st.TARGET_LABEL[result.target],
        **({"sizes": "quick (--quick)" if result.quick else "default"} if result.verb == "demo" else
           {"project": str(result.project.name if result.project else ""),
            "command": " ".join(result.command), "migrated copy": _shown_path(result.migrated)
            if result.migrated else ""}),
        "wall time": f"{result.seconds:.1f} s ({result.lanes} processes at a time)",
        "CPU time": f"{result.cpu_seconds:.1f} s (all processes)",
        "exit status": f"{result.exit_code}: " + _EXIT_TEXT[result.verb].get(result.exit_code, "see the docs"),
    })
    rows = []
    for i, (sid, res) in enumerate(result.steps.items(), 1):
        rows.append({"n": i, "step": sid, "status": res.status, "time": _secs(res.seconds),
                     "CPU": _secs(res.cpu_seconds) if res.jobs else "", "headline": res.headline})
    cols = [report.Column("n", "#", kind="number"), report.Column("step"), report.Column("status", kind="status"),
            report.Column("time", align="right"), report.Column("CPU", align="right"), report.Column("headline")]
    sec.table(cols, rows)
    figs = [(p, c) for p, c in ((loss_png(result), loss_caption(result)), (bench_png(result), bench_caption(result)))
            if p]
    if figs:
        sec.html(_figs_html(figs))
    nav = " · ".join(f'<a href="#{_ANCHOR[s]}">{_e(s)}</a>' for s in result.steps if s != "report")
    sec.html(f"<p>Jump to: {nav}</p>")


def _checklist(sec, result) -> None:
    marks = [i["mark"] for i in result.checklist]
    status = "fail" if "✗" in marks else "ok"
    sec.verdict(status, f"{marks.count('✓')} ✓ · {marks.count('✗')} ✗ · {marks.count('n/a')} not applicable",
                "Each item is evaluated from the steps below; 'see' links to the evidence.")
    from ascendify.port import checklist as cl

    for s in cl.sections():
        rows = [i for i in result.checklist if i["section"] == s["id"]]
        if not rows:
            continue
        body = []
        for i in rows:
            cls = {"✓": "st-ok", "✗": "st-fail"}.get(i["mark"], "st-skip")
            anchor = _ANCHOR.get(i.get("anchor") or i.get("step", ""), "summary")
            body.append(
                f'<tr data-item="{_e(i["id"])}" data-mark="{_e(i["mark"])}"><td class="{cls} mark">{_e(i["mark"])}'
                f'</td><td>{_e(i["question"])}<div class="how">{_e(i["id"])}: {_e(i["how"])}</div></td>'
                f'<td>{_e(i["evidence"])}</td><td><a href="#{_e(anchor)}">{_e(anchor)}</a></td></tr>')
        sec.html(
            f'<h3>{_e(s["title"])}</h3><div><table class="checklist"><thead><tr><th></th>'
            f"<th>question</th><th>evidence</th><th>see</th></tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    sec.html("<style>table.checklist td.mark{font-size:16px;text-align:center;width:3em}"
             "table.checklist{width:100%;table-layout:fixed}table.checklist th:nth-child(2){width:46%}"
             "table.checklist th:nth-child(4){width:6em}table.checklist th:first-child{width:3em}"
             "table.checklist .how{color:var(--muted);font-size:12px}"
             "div.figs{display:flex;gap:12px;flex-wrap:wrap}div.figs figure{flex:1 1 440px;margin:0}"
             "div.outputs ul{margin:4px 0;columns:2}div.outputs{font-size:13px}</style>")


def _doctor(sec, res, result) -> None:
    checks = list((res.facts.get("checks") or {}).values())
    rows = [{"status": c.get("status"), "check": c.get("id"), "found": c.get("found")} for c in checks]
    sec.table([report.Column("status", kind="status"), report.Column("check"), report.Column("found")], rows)


def _migrate(sec, res, result) -> None:
    t = res.facts.get("totals", {})
    sec.kv({k: t.get(k) for k in ("python_files", "changed", "cuda_sites", "converted", "report_only",
                                   "unsupported", "api_notes", "advice", "native_ops") if k in t})
    rows = []
    for f in res.facts.get("files", []):
        s = f.get("summary") or {}
        if not s.get("cuda_sites") and f.get("status") in ("unchanged", "copied"):
            continue
        rows.append({"file": f.get("path"), "status": f.get("status"), "CUDA sites": s.get("cuda_sites"),
                     "converted": s.get("converted"), "reported": s.get("report_only"),
                     "unsupported": s.get("unsupported"), "advice": s.get("advice")})
    cols = [report.Column("file", kind="path"), report.Column("status"),
            *(report.Column(n, kind="number") for n in ("CUDA sites", "converted", "reported", "unsupported",
                                                         "advice"))]
    sec.table(cols, rows, caption="files with CUDA code")
    orig, new = _pair(result)
    if orig and new:
        diff = list(difflib.unified_diff(orig.read_text(encoding="utf-8").splitlines(),
                                         new.read_text(encoding="utf-8").splitlines(),
                                         f"{result.project.name}/{result.entry}",
                                         f"{result.migrated.name}/{result.entry}", lineterm="", n=1))
        if diff:
            sec.html(diff_html(diff[2:], limit=60, title=f"{result.entry}: what migrate changed (unified diff)",
                               more="see migrate/report/changes.csv and the migrated copy"))


def diff_html(lines: list[str], *, limit: int, title: str, more: str) -> str:
    """A unified diff as coloured lines (added green, removed red, hunk headers grey), ``limit`` lines at most.

    >>> "del" in diff_html(["@@ -1 +1 @@", "-a", "+b"], limit=10, title="t", more="")
    True
    """
    style = {"+": "background:#e6ffec", "-": "background:#ffebe9", "@": "color:#6e7781;background:#f6f8fa"}
    out = []
    for line in lines[:limit]:
        css = style.get(line[:1], "")
        tag = {"+": "ins", "-": "del"}.get(line[:1], "span")
        out.append(f'<{tag} class="line" style="display:block;text-decoration:none;padding:0 10px;{css}">'
                   f"{_e(line) or ' '}</{tag}>")
    if len(lines) > limit:
        out.append(f'<span class="line" style="display:block;padding:0 10px;color:#6e7781">… {len(lines) - limit} '
                   f"more lines: {_e(more)}</span>")
    return f'<div><code>{_e(title)}</code></div><pre class="code diff">{"".join(out)}</pre>'


def _pair(result) -> tuple[Path | None, Path | None]:
    if getattr(result, "project", None) is None or not result.entry or result.migrated is None:
        return None, None
    orig = result.project / result.entry
    new = result.migrated / result.entry
    return (orig, new) if orig.is_file() and new.is_file() else (None, None)


def _train(sec, res, result) -> None:
    runs = res.facts.get("runs", {})
    rows = []
    for side in ("target", "golden"):
        r = runs.get(side, {})
        h = r.get("history") or {}
        sps = r.get("samples_per_s")
        rows.append({"run": r.get("label") or side, "ranks": r.get("ranks"), "steps": len(h.get("step", [])),
                     "first loss": h["loss"][0] if h.get("loss") else None,
                     "final loss": h["loss"][-1] if h.get("loss") else None,
                     "step ms": 1000 * r["step_seconds"] if r.get("step_seconds") else None,
                     "samples/s": sps, "time": _secs(r.get("seconds") or 0),
                     "exit": r.get("returncode") if not r.get("skipped") else r.get("skipped")})
    sec.table([report.Column("run"), report.Column("ranks", kind="number"), report.Column("steps", kind="number"),
               report.Column("first loss", kind="number"), report.Column("final loss", kind="number"),
               report.Column("step ms", kind="number"), report.Column("samples/s", kind="number"),
               report.Column("time", align="right"), report.Column("exit")], rows,
              caption=f"step time: the median, the first step (warm-up, discovery) left out; the two runs ran "
                      f"side by side ({result.lanes} processes at a time), so their step times share the machine: "
                      "the bench below times each side alone")
    png = loss_png(result)
    if png:
        sec.image(png, caption=loss_caption(result))
    for side in ("target", "golden"):
        r = runs.get(side, {})
        if r.get("failure"):
            sec.kv({f"{r.get('label') or side} failed at": r["failure"]})
        for k in r.get("known_errors") or []:
            sec.kv({f"known error {k['id']}": f"{k['title']}: {k['fix']}"})
    models = res.facts.get("models") or {}
    sub = sec.section("What the runs are made of (found by watching them)", anchor="train-discovery")
    rows = models.get("golden") or models.get("target") or []
    if rows:
        cols = [report.Column("model"), report.Column("class"), report.Column("defined at", kind="path"),
                report.Column("params", kind="number"), report.Column("optimizer"), report.Column("batch",
                kind="number"), report.Column("inputs"), report.Column("AMP"), report.Column("mode")]
        sub.table(cols, rows, caption="root modules with parameters, as the original program called them")
        g = runs.get("golden", {})
        kv = {"loss (the tensor backward() ran on)": g.get("loss_fn") or "no backward() seen",
              "a step is": g.get("step_unit") or "no step seen (an inference program?)",
              "GradScaler": "used" if g.get("grad_scaler") else "not used (or disabled)",
              "loss columns": "; ".join(series_text(x) for x in g.get("loss_series") or [])
              or "loss: one backward() a step",
              "other root modules (no parameters)": ", ".join(f"{k} ×{v}" for k, v in (g.get("functions") or {})
                                                               .items()) or "none",
              "stopped": g.get("stopped"),
              "parameter counts agree (original vs migrated)": "yes" if res.facts.get("param_counts_agree") else
              "NO: the migrated run built other models"}
        sub.kv(kv)
        notes = [n for r in runs.values() for n in r.get("notes") or []]
        if notes:
            sub.code("\n".join(notes), title="notes")
    else:
        sub.verdict("skip", "no model (an nn.Module with parameters) was called in either run")
    emu = runs.get("target", {}).get("emulator")
    if emu:
        sub = sec.section("What the emulated NPU saw", anchor="train-emulator")
        sub.kv({"ops run": f"{emu.get('ops_run') or 0:,} ({emu.get('distinct_ops')} distinct)",
                "ops a real NPU runs on its CPU fallback": emu.get("cpu_fallback_on_npu"),
                "rejected": emu.get("rejected"), "APIs unsupported on every chip": emu.get("unsupported_apis"),
                "float64 events": emu.get("float64_events"), "fp16 overflow events": emu.get("fp16_overflow_events"),
                "peak device memory": report.format_bytes(emu.get("peak_memory_bytes") or 0)})
        gm = emu.get("graph_mode")
        if gm:  # torch.compile on the emulated NPU
            about = gm.get("recompile_loop") or gm.get("first_recompile") or {}
            sub.kv({"torch.compile: graphs compiled": gm.get("compiled_graphs"),
                    "graph breaks" + (" (a storm)" if gm.get("break_storm") else ""): gm.get("graph_breaks"),
                    "first graph break": gm.get("first_graph_break"),
                    "recompilations": gm.get("recompiles"),
                    "recompile loop" if gm.get("recompile_loop") else "first recompilation":
                        f"{about['function']}: {about['reason']}" if about else None})
    if res.facts.get("overflow"):
        _overflow(sec.section("Overflow check of the migrated run (--overflow)", anchor="train-overflow"),
                  res.facts["overflow"])
    g = runs.get("golden", {})
    if "redirected" in g:
        sec.kv({"CUDA APIs redirected to the CPU (ascendify run)": g.get("redirected"),
                "unsupported": g.get("unsupported"), "unmapped devices": g.get("unmapped")})
    if g.get("redirected_apis"):
        sec.table([report.Column("API"), report.Column("calls", kind="number"), report.Column("first at", kind="path"),
                   report.Column("answered with")],
                  [{"API": r["api"], "calls": r.get("count"), "first at": r.get("first_site"),
                    "answered with": r.get("to")} for r in g["redirected_apis"]],
                  caption="the original's own CUDA and torch.accelerator calls, answered for the CPU by ascendify "
                          "run: the branches it took are a GPU's (a device-agnostic program hears that an "
                          "accelerator is there)")


def series_text(x: dict) -> str:
    """What one loss column is: which backward() before which optimizer's step, over which model.

    >>> series_text({"series": "loss_2", "optimizer": "Adam", "optimizer_index": 0, "models": ["netD"],
    ...              "backward": 2, "of": 2})
    'loss_2: backward() 2 of 2 before optimizer 1 (Adam).step(), of netD'
    >>> series_text({"series": "loss", "optimizer": "SGD", "models": ["model"]})
    'loss: the backward() before SGD.step(), of model'
    """
    opt = (f"optimizer {x['optimizer_index'] + 1} ({x['optimizer']})" if x.get("optimizer_index") is not None
           else x["optimizer"])
    which = f"backward() {x['backward']} of {x['of']}" if (x.get("of") or 1) > 1 else "the backward()"
    return (f"{x['series']}: {which} before {opt}.step(), of "
            f"{', '.join(x.get('models') or []) or 'parameters of no watched model'}")


def _overflow(sub, o: dict) -> None:
    """The migrated run under the overflow watch: the verdict, the first new inf/NaN in detail, the findings and
    GradScaler's skipped steps (the fields of dump --overflow's overflow.json)."""
    if o.get("skipped"):
        sub.verdict("skip", f"not checked: {o['skipped']}")
        return
    first = o.get("first")
    mode = o.get("npu_overflow_mode") or {}
    bad = bool(first or o.get("skipped_steps"))
    sub.verdict("fail" if bad else ("warn" if mode.get("mode") == "saturation" else "ok"), st.overflow_text(o),
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
                f": min {st.number_text(d.get('min'))} max {st.number_text(d.get('max'))}" if "min" in d else "")
        if first.get("scalars"):
            kv["scalars"] = ", ".join(st.number_text(x) for x in first["scalars"])
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


def _compare(sec, res, result) -> None:
    ls, cv = res.facts.get("lockstep") or {}, res.facts.get("curves") or {}
    sub = sec.section("Lockstep: the model, layer by layer", anchor="compare-lockstep")
    if ls.get("verdict"):
        st_ = {"match": "ok", "not comparable": "warn"}.get(ls["verdict"], "fail")
        fd = ls.get("first_divergence")
        sub.verdict(st_, f"{ls['verdict'].upper()}: {ls.get('target')} vs {ls.get('golden')}",
                    f"first divergence: {fd}" if fd else
                    st.random_in_forward(ls["random_draws"]) + ": each run draws other numbers, whatever the port"
                    if ls.get("random_draws") else
                    f"{ls.get('matched', 0)} matched module calls, none over its limit")
        if ls.get("eager_model"):
            sub.text(ls["eager_model"])
        e2e = ls.get("end_to_end") or {}
        names = {"cosine": "cosine similarity", "rel_l2": "relative L2 error", "max_abs": "max absolute error",
                 "thousandth": "share within 1/1000", "five_thousandth": "share within 5/1000"}
        sub.kv({names[k]: (st.number_text(e2e[k], ".6f") if k == "cosine" else e2e[k]) for k in names
                if isinstance(e2e.get(k), (int, float))})
        w = ls.get("weights") or {}
        if w.get("differ") and not w.get("copied"):
            sub.table([report.Column("parameter"), report.Column("owner"), report.Column("max abs", kind="number"),
                       report.Column("rel L2", kind="number"), report.Column("why")],
                      [{"parameter": d["name"], "owner": d["owner"], "max abs": d.get("max_abs"),
                        "rel L2": d.get("rel_l2"), "why": d.get("why")} for d in w["differ"][:50]],
                      caption="weights that differ before the first step (a finding: the target kept its own)")
        elif w.get("copied"):
            sub.kv({"weights": "every parameter differed (two random initialisations): the golden's were copied"})
        gr = res.facts.get("gradients") or {}
        if gr.get("verdict"):
            bad = [{"where": d["name"], "rel L2": d["rel_l2"], "limit": d["limit"],
                    "why": d.get("why") or "over the limit"} for d in gr.get("differ") or []]
            bad += [{"where": d["name"], "rel L2": None, "limit": None,
                     "why": f"no gradient on the {d['side']}" + (f" ({d['why']})" if d.get("why") else "")}
                    for d in gr.get("missing") or []]
            sub.kv({"gradients (one backward, loss: mean of squared outputs, module by module)":
                    f"{gr['verdict']}: {st.gradients_counted(gr)} compared"
                    + (f", first divergence in backward order: {gr['first']}" if gr.get("first") else "")})
            if bad:
                sub.table([report.Column("where"), report.Column("rel L2", kind="number"),
                           report.Column("limit", kind="number"), report.Column("why")], bad[:50],
                          caption="gradients that differ (a call's own backward error, or a parameter without one)")
        sub.link("compare/lockstep/compare.html", "the full lockstep report (compare/lockstep/compare.html)")
    else:
        sub.verdict("skip", str(ls.get("skipped") or "not run"))
    sub = sec.section("Curves: the two training runs", anchor="compare-curves")
    if cv.get("verdict") == "not comparable":
        sub.verdict("warn", "NOT COMPARABLE", cv.get("why"))
    if cv.get("verdict"):
        series = cv.get("series") or {}
        keys = [k for k in series if k.startswith("loss")] or ["output_mean"]  # a GAN: loss, loss_2 (each plotted)
        key = ", ".join(keys)
        worst = max((float((series.get(k) or {}).get("max_rel_diff") or 0) for k in keys), default=0.0)
        first = cv.get("first")
        if cv["verdict"] == "nothing to compare":
            sub.verdict("skip", "NOTHING TO COMPARE: " + (f"the losses are {cv['nonfinite']}" if cv.get("nonfinite")
                                                          else "no loss column in common"),
                        f"A = {cv.get('a')}; B = {cv.get('b')}")
        elif cv["verdict"] != "not comparable":
            sub.verdict("ok" if cv["verdict"] == "match" else "fail",
                        f"{cv['verdict'].upper()}: {key} within {cv.get('tolerance', 0.05):g} (relative) at every "
                        "step" if not first else
                        f"{cv['verdict'].upper()}: {key} leaves the band at step {first.get('step')}",
                        f"A = {cv.get('a')}; B = {cv.get('b')}; largest relative difference {worst:.2%}")
        lines, diffs = {}, {}
        for k in keys:
            d = series.get(k) or {}
            x, a, b = d.get("x") or [], [_finite(v) for v in d.get("a") or []], [_finite(v) for v in d.get("b") or []]
            name = "" if len(keys) == 1 else f" {k}"
            lines[f"A: original, CPU{name}"] = _finite_points(x, a)
            lines[f"B: migrated, target{name}"] = _finite_points(x, b)
            pts = [(xi, abs(bi - ai) / max(abs(ai), abs(bi), 1e-30)) for xi, ai, bi in zip(x, a, b, strict=False)
                   if ai is not None and bi is not None]
            pts = [(xi, r) for xi, r in pts if r > 0]  # equal losses have no place on a log scale
            if pts:
                diffs[f"|B − A| / max(|A|, |B|){name}"] = ([xi for xi, _ in pts], [r for _, r in pts])
        if any(xs for xs, _ in lines.values()):
            png = report.plots.line_plot({n: v for n, v in lines.items() if v[0]},
                                         title=f"{key}: A vs B", xlabel="step", ylabel=keys[0] if len(keys) == 1
                                         else "loss", mark_x=first.get("step") if first else None, integer_x=True,
                                         mark_label="first step outside the band" if first else None)
            figs = [(png, "loss curves compared by ascendify compare --curves (NaN/inf steps left out)")]
            tol = float(cv.get("tolerance") or 0.05)
            if diffs:
                png = report.plots.line_plot(diffs, title="relative difference of the loss", xlabel="step",
                                             ylabel="relative difference", logy=True, hline=tol, integer_x=True,
                                             hline_label=f"tolerance {tol:g}")
                figs.append((png, "how far inside the band the runs stay (log scale; steps where the two losses "
                                  "are equal are left out)"))
            sub.html(_figs_html(figs))
        draws = cv.get("random_draws_on_device") or []
        if draws:
            sub.table([report.Column("random draw"), report.Column("device"), report.Column("calls", kind="number"),
                       report.Column("first at", kind="path")],
                      [{"random draw": d["api"], "device": d["device"], "calls": d["calls"],
                        "first at": d.get("first_at")} for d in draws],
                      caption="random draws the migrated run made on the device: they use its generator, the "
                              "original's the CPU's, so the runs cannot agree exactly whatever the seed")
        sub.link("compare/curves/curves.html", "the curves report (compare/curves/curves.html)")
    else:
        sub.verdict("skip", str(cv.get("skipped") or "not run"))


def _finite(v: Any) -> float | None:
    """A loss value as a float, None where it is NaN or inf (JSON brings them back as strings)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _finite_points(x: list, y: list) -> tuple[list, list]:
    pts = [(xi, yi) for xi, yi in zip(x, y, strict=False) if yi is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


LOSS_CAPTION = "loss per step: the migrated copy on the target vs the unmodified original on the CPU"
_PNG_CACHE: dict[str, tuple[object, bytes | None]] = {}  # plot -> (the result it was drawn for, PNG)


def _cached(result, name: str, draw) -> bytes | None:
    hit = _PNG_CACHE.get(name)
    if hit is None or hit[0] is not result:
        _PNG_CACHE[name] = hit = (result, draw())
    return hit[1]


def loss_png(result) -> bytes | None:
    """Both training runs' loss per step in one plot (None when neither ran)."""
    def draw() -> bytes | None:
        runs = result.steps["train"].facts.get("runs", {})
        series = {}
        key = "loss"
        for side, label in (("target", f"migrated, {st.TARGET_LABEL[result.target]}"),
                            ("golden", "original, CPU")):
            h = runs.get(side, {}).get("history") or {}
            key = "loss" if h.get("loss") else "output_mean"
            # every loss column (a GAN's D and G losses), each named by its column
            keys = [k for k in h if k.startswith("loss")] if key == "loss" else [key]
            for k in keys:
                ys = [y if isinstance(y, (int, float)) else float("nan") for y in h.get(k) or []]
                if h.get("step") and ys:
                    series[label if len(keys) == 1 else f"{label}: {k}"] = (h["step"], ys)
        if not series:
            return None
        what = "training loss per step" if key == "loss" else "model output mean per call (no training step)"
        return report.plots.line_plot(series, title=f"{what} ({result.entry or 'the program'})", xlabel="step",
                                      ylabel=key.replace("_", " "), markers=len(next(iter(series.values()))[0]) <= 40,
                                      integer_x=True)

    return _cached(result, "loss", draw)


def loss_caption(result) -> str:
    """The loss plot's caption; says when the two curves lie on top of each other."""
    loss = ((result.steps["compare"].facts.get("curves") or {}).get("series") or {}).get("loss") or {}
    worst = loss.get("max_rel_diff")
    if isinstance(worst, (int, float)) and worst < 0.005:
        return LOSS_CAPTION + f"; the curves overlap (largest relative difference {worst:.2%})"
    return LOSS_CAPTION


def bench_png(result) -> bytes | None:
    """Best training throughput per device, as bars (None when bench did not run)."""
    def draw() -> bytes | None:
        facts = result.steps["bench"].facts
        best, meta = facts.get("best", {}), facts.get("meta", {})
        if not best:
            return None
        labels = ["CPU" if k == "cpu" else ("emulated NPU (host speed)" if meta.get(k, {}).get("emulated")
                                             else st.TARGET_LABEL[result.target]) for k in best]
        model = next((r.get("model") for v in facts.get("records", {}).values() for r in v), "model")
        return report.plots.bar_plot(labels, list(best.values()), title=f"step throughput ({model})",
                                     ylabel="samples/s", colors=["#4c72b0", "#dd8452"][: len(best)])

    return _cached(result, "bench", draw)


def bench_caption(result) -> str:
    emulated = result.steps["bench"].facts.get("meta", {}).get("target", {}).get("emulated")
    return "samples/s, warm-up excluded" + ("; the emulated NPU's figure is the host's speed, not an NPU's"
                                            if emulated else "")


def _figs_html(figs: list[tuple[bytes, str]]) -> str:
    import base64

    parts = [f'<figure><img alt="{_e(c)}" src="data:image/png;base64,{base64.b64encode(p).decode("ascii")}">'
             f"<figcaption>{_e(c)}</figcaption></figure>" for p, c in figs]
    return f'<div class="figs">{"".join(parts)}</div>'


def _bench(sec, res, result) -> None:
    recs = res.facts.get("records", {})
    meta = res.facts.get("meta", {})
    rows = []
    for key in ("cpu", "target"):
        for r in recs.get(key, []):
            m = meta.get(key, {})
            dev = m.get("device_name") or r.get("device")
            if m.get("emulated"):
                dev = f"{dev} (emulated: host speed)"
            rows.append({"device": dev, "model": r.get("model"), "mode": r.get("mode"),
                         "batch": r.get("batch_size"), "precision": r.get("precision"), "status": r.get("status"),
                         "samples/s": r.get("throughput"),
                         "spread": (f"{r['spread_ratio']:.2g}x" + ("" if r.get("stable", True) else " unstable"))
                         if r.get("spread_ratio") else None,
                         "p50 ms": (r.get("latency_ms") or {}).get("p50"),
                         "p90 ms": (r.get("latency_ms") or {}).get("p90"),
                         "peak MiB": r["peak_memory_bytes"] / 2**20 if r.get("peak_memory_bytes") else None})
    cols = [report.Column("device"), report.Column("model"), report.Column("mode"),
            report.Column("batch", kind="number"), report.Column("precision"), report.Column("status", kind="status"),
            report.Column("samples/s", kind="number"), report.Column("spread"), report.Column("p50 ms", kind="number"),
            report.Column("p90 ms", kind="number"), report.Column("peak MiB", kind="number")]
    sec.table(cols, rows, caption="the model each run called, at the batch it received, with the run's AMP policy "
                                  "(training: forward, a proxy loss, backward, an optimizer step); spread: the "
                                  "fastest timed window over the slowest (over 1.3x after more tries: unstable, "
                                  "the machine was busy, and no speed-up is claimed from it)")
    runs = result.steps["train"].facts.get("runs", {})
    real = {r.get("label"): r.get("step_seconds") for r in runs.values() if r.get("step_seconds")}
    if real:
        sec.kv({f"step time in the real run: {k}": f"{1000 * v:.3g} ms" for k, v in real.items()})
    png = bench_png(result)
    if png:
        sec.image(png, caption=bench_caption(result))


# ---------------------------------------------------------------------------------------------------------------
# terminal


def summary_text(result, width: int | None = None) -> str:
    """The terminal summary, at most ``width`` columns (default: the terminal's, at most 80)."""
    from ascendify.report.tables import terminal_width

    width = width or min(80, terminal_width())
    status, sentence = result.verdict
    what = f"{'quick' if result.quick else 'default'} sizes" if result.verb == "demo" else (
        result.project.name if result.project else "")
    lines = [_wrap(f"ascendify {result.verb}: {st.TARGET_LABEL[result.target]}, {what}, {result.seconds:.0f} s "
                   f"wall, {result.cpu_seconds:.0f} s CPU", width)]
    rows = [{"step": sid, "status": r.status, "time": _secs(r.seconds), "headline": r.headline}
            for sid, r in result.steps.items()]
    cols = [report.Column("step"), report.Column("status", kind="status"), report.Column("time", align="right"),
            report.Column("headline")]
    lines.append(report.table_text(cols, rows, width=width).rstrip("\n"))
    for sid, r in result.steps.items():
        if r.status == "error" and r.error:
            logs = [_rel(f) for f in r.files if "logs/" in _rel(f)]
            lines.append(_wrap(f"{sid} failed: {r.error.splitlines()[0]}"
                               + (f" (log: {', '.join(logs)})" if logs else ""), width))
    ov = result.steps["train"].facts.get("overflow") if "train" in result.steps else None
    if ov:
        lines.append(_wrap("overflow (migrated run): " + st.overflow_text(ov), width))
        first = ov.get("first")
        if first and first.get("code"):
            lines.append(_wrap(f"  {first.get('file')}:{first.get('line')}: {first['code']}", width))
    for item in result.checklist:
        if item["mark"] == "✗":
            lines.append(_wrap(f"✗ {item['id']}: {item['evidence']}", width))
    lines.append(_wrap(f"{status.upper()}: {sentence.removeprefix(status + ': ')}", width))
    lines.append(_wrap(f"report: {_shown_path(result.out / 'report.html')}", width))
    return "\n".join(lines)


def _shown_path(path: Path) -> str:
    """``path`` relative to the working folder when it is inside it (what the user typed), else absolute."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False,
                                   break_long_words=True))
