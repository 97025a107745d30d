"""The train stage: the user's own command run twice, each in a scratch copy of its tree and watched by
:mod:`ascendify.port.observe` (the original under ``ascendify run --to cpu``, the migrated copy on the target),
read back from their :class:`~ascendify.port.observation.Observation`, drawn with their loss curves.

Its facts (``runs``: per side the history, the steps, how it stopped, its ranks, the emulator's record or the
reference run's redirections; ``models``; ``param_counts_agree``; with ``--overflow`` ``overflow``) feed the
compare stage, the checklist and :mod:`ascendify.port.proof`.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from ascendify import report
from ascendify.port.jobs import Job, child_env, tail
from ascendify.port.observation import Observation
from ascendify.port.options import TARGET_LABEL, Context
from ascendify.port.stages import fast, overflow
from ascendify.port.stages.base import (
    StageResult,
    add_job,
    cached_png,
    collect,
    count,
    emulated_devices,
    failure,
    load_json,
    number_text,
    secs,
)
from ascendify.port.stages.failures import first_user_frame, known_errors, last_line
from ascendify.port.stages.fast import advised
from ascendify.report.tables import plural

ID = "train"
SIDES = ("golden", "target")


BUDGET_MARGIN = 45.0  # seconds past --time-budget before port stops a run itself (interpreter and torch start-up)

_DEVICE_VALUE = re.compile(r"^(?:cuda|gpu)(:\d+)?$", re.IGNORECASE)

_DEVICE_FLAGS = ("--device", "--devices", "--accelerator", "device")

def port_command(argv: list[str], device: str = "npu") -> list[str]:
    """The user's command for the migrated run: a CUDA device given on the command line means the NPU there
    (``--device=cuda``, ``--device cuda:1``, ``--accelerator gpu``); everything else is left as it is.

    >>> port_command(["python", "train.py", "--device=cuda", "--lr", "3e-4"])
    ['python', 'train.py', '--device=npu', '--lr', '3e-4']
    >>> port_command(["train.py", "--device", "cuda:1", "--gpu", "0"])
    ['train.py', '--device', 'npu:1', '--gpu', '0']
    """
    out = []
    prev = ""
    for tok in argv:
        new = tok
        if "=" in tok and tok.lstrip("-").split("=", 1)[0] in {f.lstrip("-") for f in _DEVICE_FLAGS} \
                and tok.startswith("-"):
            key, value = tok.split("=", 1)
            m = _DEVICE_VALUE.match(value.strip("'\""))
            if m:
                new = f"{key}={device}{m.group(1) or ''}"
        elif prev in _DEVICE_FLAGS and prev.startswith("-"):
            m = _DEVICE_VALUE.match(tok)
            if m:
                new = f"{device}{m.group(1) or ''}"
        out.append(new)
        prev = tok
    return out

def observe_env(ctx: Context, side: str, root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that switch :mod:`ascendify.port.observe` on in a run; the project's folder also goes on
    ``PYTHONPATH`` (a command run from the project's root imports its packages, as ``pip install -e .`` or a
    ``PYTHONPATH=.`` in the user's shell would let it)."""
    path = (base or {}).get("PYTHONPATH")
    return {"PYTHONPATH": str(root) + (f":{path}" if path else ""), "ASCENDIFY_OBSERVE": str(ctx.runs / side),
            "ASCENDIFY_OBSERVE_STEPS": str(ctx.steps),
            "ASCENDIFY_OBSERVE_SECONDS": "" if ctx.seconds is None else str(ctx.seconds),
            "ASCENDIFY_OBSERVE_SEED": str(ctx.options.seed), "ASCENDIFY_OBSERVE_ROOT": str(root),
            "PYTHONHASHSEED": str(ctx.options.seed),
            **({"ASCENDIFY_OBSERVE_OVERFLOW": "1"} if ctx.overflow and side == "target" else {}),
            **({"ASCENDIFY_ADVISE": str(ctx.runs / "target" / "advise")} if side == "target" and advised(ctx) else {})}


def shown_env(ctx: Context, cmd: list[str]) -> str:
    """The ``NAME=VALUE`` words a run's command is shown with, so that it runs as shown: the command's own, and
    ``PYTHONPATH=.`` where the script sits below the project's root (the runs put the root on ``PYTHONPATH``:
    ``python projects/adder/adder.py`` imports the project's package from there).

    >>> from ascendify.port.options import PortOptions
    >>> c = Context(PortOptions(project=Path("/w/p"), command=[], lanes=1), out=Path("/w/p-npu-report"),
    ...             project=Path("/w/p"), migrated=Path("/w/p-npu"), command=[], target="emulated",
    ...             target_reason="", env={"PYTHONPATH": "/opt/deps", "X": "a b"})
    >>> shown_env(c, ["python", "projects/adder/adder.py"]), shown_env(c, ["python", "train.py"])
    ("PYTHONPATH=.:/opt/deps X='a b' ", "PYTHONPATH=/opt/deps X='a b' ")
    """
    env = dict(ctx.env)
    script = next((w for w in cmd if w.endswith(".py") and not w.startswith("-")), None)
    if script is not None and os.path.dirname(os.path.normpath(script)) not in ("", "."):
        env["PYTHONPATH"] = "." + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())


def jobs(ctx: Context) -> list[Job]:
    """Each side's scratch copy (``copy-golden``, ``copy-target``: :mod:`ascendify.port.copy_job`) and its run
    (``train-golden``, ``train-target``)."""
    out, env = ctx.out, child_env(ctx.lanes)
    golden_env = child_env(ctx.lanes, drop=("ASCENDIFY_EMULATE",))
    cmd, runs = list(ctx.command), ctx.runs
    added: list[Job] = []
    # --time-budget: each run's own timer stops it at the budget; a run stuck where that timer cannot reach (a C
    # call, a collective) is stopped from here a little later, as a Ctrl-C would (the start-up is not in its budget)
    budget = None if ctx.seconds is None else ctx.seconds + BUDGET_MARGIN
    # each run works in a scratch copy of its tree: the user's project and the migrated copy stay as they were;
    # the project's neighbours are linked beside the copy, so that ../data resolves as without port
    groot, troot = ctx.run_root("golden"), ctx.run_root("target")
    mirror = ["--mirror", str(ctx.project.parent)]
    leave_out = [str(ctx.migrated), str(out)]
    copy = ["-m", "ascendify.port.copy_job"]
    add_job(ctx, added, Job("copy-golden", ID, [*copy, str(ctx.project), str(groot), *mirror, *leave_out],
                            python=True, env=env, timeout=600, ok_codes=(0,),
                            shown=shlex.join(["python", *copy, str(ctx.project), str(groot), *mirror])))
    golden_shown = f"cd {ctx.rel(groot)} && " + shown_env(ctx, cmd) + shlex.join(["ascendify", "run", "--to", "cpu",
                                                                                 "--", *cmd])
    add_job(ctx, added, Job(
        "train-golden", ID, ["run", "--to", "cpu", "--log", str(runs / "golden" / "run.json"), "-q", "--", *cmd],
        deps=("copy-golden",), env={**golden_env, **ctx.env, **observe_env(ctx, "golden", groot,
                                                                          {**golden_env, **ctx.env})},
        cwd=str(groot), timeout=1800, ok_codes=(0,), shown=golden_shown, stop_after=budget))
    tcmd, tsrc, argv = target_command(ctx)
    add_job(ctx, added, Job("copy-target", ID, [*copy, str(tsrc), str(troot), *mirror, *leave_out], python=True,
                            deps=() if ctx.target == "cuda" else ("migrate",), env=env, timeout=600, ok_codes=(0,),
                            shown=shlex.join(["python", *copy, str(tsrc), str(troot), *mirror])))
    add_job(ctx, added, Job(
        "train-target", ID, argv, deps=("copy-target",),
        env={**env, **ctx.env, **observe_env(ctx, "target", troot, {**env, **ctx.env})}, cwd=str(troot),
        timeout=1800, ok_codes=(0,), stop_after=budget,
        shown=f"cd {ctx.rel(troot)} && " + shown_env(ctx, tcmd) + shlex.join(["ascendify", argv[0], *argv[1:3], "--",
                                                                              *tcmd])))
    return added


def target_command(ctx: Context) -> tuple[list[str], Path, list[str]]:
    """The target run's command, the tree it runs (the migrated copy; the project on a GPU) and its ascendify
    argv."""
    cmd = list(ctx.command)
    if ctx.target == "cuda":  # the original, unmodified, on the GPU
        return cmd, ctx.project, ["run", "--to", "cuda", "-q", "--", *cmd]
    tcmd = port_command(cmd, "npu")
    if ctx.target == "emulated":
        return tcmd, ctx.migrated, ["emulate", "--devices", str(emulated_devices(cmd)), "-q", "--json",
                                    str(ctx.runs / "target" / "emulate.json"), "--", *tcmd]
    return tcmd, ctx.migrated, ["run", "--to", "npu", "-q", "--", *tcmd]



def side_label(ctx: Context, side: str) -> str:
    if side == "golden":
        return "original (unmodified) on the CPU, via ascendify run --to cpu"
    if ctx.target == "cuda":
        return "original on the CUDA GPU"
    return f"migrated copy on the {ctx.target_label}"


def compiled_sides(train: StageResult | None) -> list[str]:
    """The runs (``original``, ``migrated``) whose models ran inside torch.compile's ``OptimizedModule``."""
    models = ((train.facts if train else None) or {}).get("models") or {}
    return [label for side, label in (("golden", "original"), ("target", "migrated"))
            if any("(in OptimizedModule)" in (r.get("class") or "") for r in models.get(side) or [])]


def read(ctx: Context, jobs: list[Job], done: dict[str, StageResult]) -> StageResult:
    """The two runs (observe.json, history, the run reports); with ``--overflow`` also the migrated run's overflow
    check (``facts["overflow"]``), said at the end of the headline."""
    res = StageResult(ID)
    collect(res, jobs)
    runs: dict[str, dict[str, Any]] = {}
    found: dict[str, Observation] = {}
    errors: list[tuple[str, str]] = []
    for job in jobs:
        side = "golden" if job.name.endswith("-golden") else "target"
        if job.name.startswith("copy-"):
            if not job.skipped and job.returncode not in (0, None):
                errors.append((side, f"{job.name} (the scratch copy for the run) exited with status "
                                     f"{job.returncode}: {tail(job.output, 3)}"))
            continue
        runs[side], obs, error = _read_run(ctx, res, job, side)
        if obs is not None:
            found[side] = obs
        if error:
            errors.append((side, error))
    _emulator_facts(ctx, res, runs)
    _redirection_facts(ctx, res, runs)
    gm, tm = (found[s].model_rows() if s in found else [] for s in SIDES)
    res.facts = {"runs": runs, "target": ctx.target, "models": {"golden": gm, "target": tm},
                 "param_counts_agree": [r["params"] for r in gm] == [r["params"] for r in tm]}
    for side, r in runs.items():  # the observations stay in their files; the facts keep what the report shows
        r.update(_shown_of(found.get(side)))
    _judge(ctx, res, runs, errors, [j for j in jobs if j.name.startswith("train-")])
    res.facts["advise"] = fast.read(ctx, runs.get("target"))
    if not res.facts["advise"].get("skipped"):
        res.files.append(ctx.rel(ctx.runs / "target" / "advise" / "advise.json"))
    if ctx.overflow:
        o = res.facts["overflow"] = overflow.read_overflow(ctx, res)
        if (ctx.runs / "target" / "overflow.json").is_file():
            res.files.append(ctx.rel(ctx.runs / "target" / "overflow.json"))
        if res.headline and not o.get("skipped"):
            res.headline += "; overflow: " + overflow.overflow_text(o, short=True)
    return res


def _read_run(ctx: Context, res: StageResult, job: Job, side: str
              ) -> tuple[dict[str, Any], Observation | None, str | None]:
    """One run's facts, its observation, and the error that ended it (None when it ran to its end or was
    stopped: by its steps, its budget or a Ctrl-C)."""
    info: dict[str, Any] = {"command": job.shown, "returncode": job.returncode, "seconds": round(job.seconds, 2),
                            "skipped": job.skipped, "label": side_label(ctx, side)}
    stopped_by_hand = (job.skipped or "").startswith("interrupted")
    if job.skipped and not stopped_by_hand:
        return info, None, None
    obs = Observation.load(ctx.runs / side / "observe.json")
    stopped = obs.stopped if obs is not None else ""
    error = None
    if job.stopped_at is not None and not job.timed_out:  # past the budget, stopped from here: not a crash
        stopped = (f"time budget of {ctx.seconds:g} s spent" + ("" if obs is not None and obs.iterations else
                   " before the first step") + f" (stopped by port after {job.stopped_at:.0f} s)")
        info["stopped_by_port"] = True
        if obs is not None:
            obs.stopped, obs.seconds_asked = stopped, ctx.seconds
    elif not stopped_by_hand and (job.timed_out or job.returncode != 0):
        error = failure(job)
        info["failure"] = first_user_frame(job.output)
        info["known_errors"] = known_errors(job.output)
    if obs is None:
        if job.stopped_at is not None:
            info.update(stopped=stopped, seconds_asked=ctx.seconds)
        if not stopped_by_hand and not job.timed_out and job.returncode == 0:
            error = f"{job.name}: the run left no observe.json (see {ctx.rel(job.log or '')})"
        return info, None, error
    hist = obs.history()
    mm = obs.main_model()
    bs = mm.first_call.batch_size if mm is not None and mm.first_call is not None else None
    info.update(history=hist, stopped=stopped, step_unit=obs.step_unit, training=bool(obs.training or obs.step_unit),
                seconds_asked=obs.seconds_asked, last_line=last_line(job.output),
                ranks=1 + len(list((ctx.runs / side).glob("observe.rank*.json"))), step_seconds=obs.step_time(),
                main_model=mm.index if mm is not None else None, batch_size=bs)
    if info["step_seconds"] and bs:
        info["samples_per_s"] = bs / info["step_seconds"]
    if hist.get("step"):
        path = ctx.runs / side / "history.json"
        report.write_json(path, hist)
        info["history_file"] = ctx.rel(path)
        res.files.append(ctx.rel(path))
    res.files.append(ctx.rel(ctx.runs / side / "observe.json"))
    return info, obs, error


def _shown_of(obs: Observation | None) -> dict[str, Any]:
    """What the report shows of a run's observation (the rest stays in observe.json)."""
    if obs is None:
        return {"optimizers": [], "loss_fn": None, "loss_series": [], "grad_scaler": None, "functions": {},
                "notes": [], "random_draws_on_device": []}
    return {"optimizers": [o.to_dict() for o in obs.optimizers], "loss_fn": obs.loss_fn,
            "loss_series": [x.to_dict() for x in obs.loss_series], "grad_scaler": obs.grad_scaler,
            "functions": obs.functions, "notes": obs.notes,
            "random_draws_on_device": [d.to_dict() for d in obs.random_draws]}


def _emulator_facts(ctx: Context, res: StageResult, runs: dict[str, dict[str, Any]]) -> None:
    """The emulated NPU's record of the target run (``emulate.json``)."""
    emu = load_json(ctx.runs / "target" / "emulate.json")
    if emu is None or "target" not in runs:
        return
    runs["target"]["emulator"] = {
        "ops_run": emu.get("ops_run"), "distinct_ops": emu.get("distinct_ops"),
        "cpu_fallback_on_npu": count(emu.get("cpu_fallback_on_npu")), "rejected": count(emu.get("rejected")),
        "unsupported_apis": count(emu.get("unsupported_apis")),
        "float64_events": count(emu.get("float64_events")),
        "fp16_overflow_events": count(emu.get("fp16_overflow_events")),
        "peak_memory_bytes": emu.get("peak_memory_bytes")}
    gm = emu.get("graph_mode")
    if gm:  # torch.compile on the emulated NPU: graphs, breaks and recompilations with their first cause
        runs["target"]["emulator"]["graph_mode"] = {k: gm.get(k) for k in (
            "compiled_graphs", "graph_breaks", "first_graph_break", "break_storm", "recompiles",
            "first_recompile", "recompile_loop")}
    res.files.append(ctx.rel(ctx.runs / "target" / "emulate.json"))


def _redirection_facts(ctx: Context, res: StageResult, runs: dict[str, dict[str, Any]]) -> None:
    """The reference run's record (``run.json``): the CUDA calls it redirected to the CPU."""
    redir = load_json(ctx.runs / "golden" / "run.json")
    if redir is None or "golden" not in runs:
        return
    runs["golden"]["redirected"] = count(redir.get("redirected"))
    # which calls the reference run's answers came from: the branch it took (torch.accelerator's, as on a GPU)
    runs["golden"]["redirected_apis"] = [{k: r.get(k) for k in ("api", "count", "first_site", "to")}
                                         for r in (redir.get("redirected") or [])[:30] if isinstance(r, dict)]
    runs["golden"]["unsupported"] = count(redir.get("unsupported"))
    runs["golden"]["unmapped"] = count(redir.get("unmapped"))
    res.files.append(ctx.rel(ctx.runs / "golden" / "run.json"))


def _judge(ctx: Context, res: StageResult, runs: dict[str, dict[str, Any]], errors: list[tuple[str, str]],
           trains: list[Job]) -> None:
    """The stage's status and headline: skipped, the original failed (an error: not the port's fault), only the
    migrated copy failed (a finding), or what each run made."""
    if trains and all(j.skipped for j in trains):
        res.headline = trains[0].skipped or "skipped"
        made = {s: len((r.get("history") or {}).get("step") or []) for s, r in runs.items() if r.get("history")}
        if made:
            res.headline += ": " + ", ".join(f"{'original' if s == 'golden' else 'migrated'} {plural(n, 'step')}"
                                             for s, n in made.items())
        return
    if errors:
        if any(side == "golden" for side, _ in errors):
            res.status = "error"
            known = (runs.get("golden") or {}).get("known_errors") or []
            why = f": {known[0]['title']} ({known[0]['fix']})" if known else ""
            where = (runs.get("golden") or {}).get("failure")
            res.error = ("the original program itself failed under ascendify run --to cpu"
                         + (f" ({where})" if where else "") + ", nothing the port did (the migrated copy is kept)"
                         f"{why}\n\n" + "\n\n".join(e for _, e in errors))
        else:
            res.status = "fail"
            where = (runs.get("target") or {}).get("failure")
            res.error = ("only the migrated copy failed" + (f" ({where})" if where else "")
                         + ": a finding of the port\n\n" + "\n\n".join(e for _, e in errors))
        res.facts["failed"] = [side for side, _ in errors]
        res.headline = res.error.splitlines()[0]
        return
    parts = [f"{label}: {_made(runs.get(side, {}))}" for side, label in (("target", ctx.target_label),
                                                                        ("golden", "CPU"))]
    res.status = "ok" if not any(r.get("skipped") for r in runs.values()) else "warn"
    gm, tm = res.facts["models"]["golden"], res.facts["models"]["target"]
    if not res.facts["param_counts_agree"] and gm and tm:
        res.status = "fail"
        parts.append("the two runs' models differ in parameter count")
    res.headline = "; ".join(parts)


def _made(r: dict[str, Any]) -> str:
    """What one run made, in a few words: its steps and last loss, or why it made none."""
    h = r.get("history") or {}
    if h.get("loss"):
        ranks = f" on {r['ranks']} ranks" if (r.get("ranks") or 1) > 1 else ""
        return f"{plural(len(h['step']), 'step')}{ranks}, loss {number_text(h['loss'][-1])}"
    if r.get("training"):
        return "no training step" + (" within the time budget" if "time budget" in (r.get("stopped") or "") else "")
    if h.get("output_mean"):
        return f"{len(h['step'])} model calls, no training step"
    if r.get("skipped"):
        return str(r["skipped"])
    return "no model call seen"


# -- the section ----------------------------------------------------------------------------------------------


def section(sec: report.Section, res: StageResult, result) -> None:
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
                     "samples/s": sps, "time": secs(r.get("seconds") or 0),
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
    _discovery(sec.section("What the runs are made of (found by watching them)", anchor="train-discovery"), res)
    emu = runs.get("target", {}).get("emulator")
    if emu:
        _emulator_saw(sec.section("What the emulated NPU saw", anchor="train-emulator"), emu)
    if res.facts.get("overflow"):
        overflow.section(sec.section("Overflow check of the migrated run (--overflow)", anchor="train-overflow"),
                         res.facts["overflow"])
    _redirections(sec, runs.get("golden", {}))


def _discovery(sub: report.Section, res: StageResult) -> None:
    runs = res.facts.get("runs", {})
    models = res.facts.get("models") or {}
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


def _emulator_saw(sub: report.Section, emu: dict[str, Any]) -> None:
    """The emulated NPU's record of the migrated run: ops, CPU fallbacks, dtype events, memory, graph mode."""
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


def _redirections(sec: report.Section, g: dict[str, Any]) -> None:
    """The reference run's record: the original's own CUDA and torch.accelerator calls answered for the CPU."""
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


LOSS_CAPTION = "loss per step: the migrated copy on the target vs the unmodified original on the CPU"


def loss_png(result) -> bytes | None:
    """Both training runs' loss per step in one plot (None when neither ran)."""
    def draw() -> bytes | None:
        runs = result.stages["train"].facts.get("runs", {})
        series = {}
        key = "loss"
        for side, label in (("target", f"migrated, {TARGET_LABEL[result.target]}"),
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

    return cached_png(result, "loss", draw)


def loss_caption(result) -> str:
    """The loss plot's caption; says when the two curves lie on top of each other."""
    loss = ((result.stages["compare"].facts.get("curves") or {}).get("series") or {}).get("loss") or {}
    worst = loss.get("max_rel_diff")
    if isinstance(worst, (int, float)) and worst < 0.005:
        return LOSS_CAPTION + f"; the curves overlap (largest relative difference {worst:.2%})"
    return LOSS_CAPTION

