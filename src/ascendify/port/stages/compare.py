"""The compare stage: the discovered model in lockstep (:mod:`ascendify.port.lockstep_job` in a child: forward
and gradients, after a weight check) and the two runs' loss curves (compared here: the histories are small),
read into one verdict each and drawn."""

from __future__ import annotations

from typing import Any

from ascendify import report
from ascendify.port import proof
from ascendify.port.jobs import Job, child_env, tail
from ascendify.port.options import Context
from ascendify.port.proof import random_in_forward
from ascendify.port.stages import train
from ascendify.port.stages.base import (
    StageResult,
    add_job,
    collect,
    failure,
    figs_html,
    finite,
    finite_points,
    load_json,
    number_text,
)

ID = "compare"
NEEDS = ("train",)  # read once the train stage is read: the curves are its histories
TOLERANCE = 0.05  # the curves' relative band
_LOCKSTEP_FILES = ["compare/lockstep/compare.html", "compare/lockstep/compare.json", "compare/lockstep/compare.csv",
                   "compare/lockstep/weights.json", "compare/lockstep/gradients.json"]


def jobs(ctx: Context) -> list[Job]:
    _, tsrc, _ = train.target_command(ctx)
    tdev = "cuda" if ctx.target == "cuda" else "npu"
    pick = ["--model", ctx.model] if ctx.model else []
    roots = ["--project", str(ctx.project), "--migrated", str(tsrc)] if ctx.model else []
    out: list[Job] = []
    add_job(ctx, out, Job("lockstep", ID, ["-m", "ascendify.port.lockstep_job", "--runs", str(ctx.runs),
                                           "--target-device", tdev, *pick, *roots, "-o",
                                           str(ctx.out / "compare" / "lockstep")],
                          python=True, deps=("train-golden", "train-target"), env=child_env(ctx.lanes), timeout=900))
    return out


def read(ctx: Context, jobs: list[Job], done: dict[str, StageResult]) -> StageResult:
    """Lockstep (from its child's compare.json) and curves (compared here)."""
    res = StageResult(ID)
    collect(res, jobs)
    (job,) = jobs
    trained = done.get("train")
    errors: list[str] = []
    facts: dict[str, Any] = {"lockstep": _lockstep_facts(ctx, res, job, errors)}
    if facts["lockstep"].get("gradients") is not None:
        facts["gradients"] = facts["lockstep"].pop("gradients")
    compiled = train.compiled_sides(trained)
    if compiled and facts["lockstep"].get("verdict"):
        facts["lockstep"]["eager_model"] = (
            f"the program compiles its model with torch.compile ({' and '.join(compiled)}); lockstep runs the "
            "eager model (torch.compile's OptimizedModule unwrapped), the training runs are the compiled ones")
    runs = (trained.facts.get("runs") if trained else None) or {}
    facts["curves"] = _curves_facts(ctx, res, trained, runs, errors)
    res.facts = facts
    if errors:
        res.status, res.error = "error", "\n\n".join(errors)
        res.headline = errors[0].splitlines()[0]
        return res
    verdicts = [facts[k].get("verdict") for k in ("lockstep", "curves") if facts.get(k, {}).get("verdict")]
    if not verdicts:
        res.headline = "; ".join(f"{k}: {facts[k].get('skipped')}" for k in ("lockstep", "curves"))
        return res
    res.status = "fail" if any(v not in ("match", "nothing to compare", "not comparable") for v in verdicts) else (
        "warn" if "not comparable" in verdicts else "ok")
    res.headline = "; ".join([_lockstep_text(facts), _curves_text(facts["curves"], runs)])
    return res


def _lockstep_facts(ctx: Context, res: StageResult, job: Job, errors: list[str]) -> dict[str, Any]:
    """The lockstep child's verdict (its compare.json, weights.json and gradients.json), or why there is none."""
    if job.skipped:
        return {"skipped": job.skipped}
    if job.timed_out or job.returncode not in (0, 1):  # 1: a divergence (a finding)
        msg = tail(job.output)
        if job.returncode == 4:  # nothing to compare: said in its output
            last = msg.splitlines()[-1] if msg else "no model to compare"
            return {"skipped": last.removeprefix("lockstep: ")}
        errors.append(failure(job))
        return {"error": True}
    folder = ctx.out / "compare" / "lockstep"
    data = load_json(folder / "compare.json")
    if data is None:
        errors.append("compare/lockstep/compare.json: missing or not JSON")
        return {}
    ls = {k: data.get(k) for k in ("verdict", "golden", "target", "first_divergence", "matched", "end_to_end")}
    weights = load_json(folder / "weights.json") or {}
    ls["weights"] = {"differ": weights.get("differ") or [], "copied": weights.get("copied"),
                     "compared": weights.get("compared")}
    ls["model"] = (data.get("meta") or {}).get("model")
    if (data.get("meta") or {}).get("random_draws"):  # calls that draw in eval mode: not comparable
        ls["random_draws"] = data["meta"]["random_draws"]
    grads = load_json(folder / "gradients.json") or {}
    ls["gradients"] = grads
    if grads.get("verdict") == "divergence" and ls["verdict"] == "match":
        ls["verdict"] = "divergence"
    if weights.get("differ") and not weights.get("copied") and ls["verdict"] == "match":
        ls["verdict"] = "divergence"
    res.files += _LOCKSTEP_FILES
    return ls


def _curves_facts(ctx: Context, res: StageResult, trained: StageResult | None, runs: dict[str, Any],
                  errors: list[str]) -> dict[str, Any]:
    """The two runs' loss (or output) curves compared within :data:`TOLERANCE`, or why they were not."""
    a, b = runs.get("golden", {}).get("history"), runs.get("target", {}).get("history")
    if "train" in ctx.skip or not (a and b and a.get("step") and b.get("step")):
        idle = [label for (x, label) in ((a, "the original"), (b, "the migrated copy")) if x is not None and
                not x.get("step")]
        failed = (trained.facts.get("failed") if trained else None) or not (a is not None and b is not None)
        why = ("skipped (--skip train)" if "train" in ctx.skip else
               "needs both runs, which did not both finish" if failed or not idle else
               "no step to compare: " + ("neither run made a step" if len(idle) == 2 else f"{idle[0]} made none"))
        return {"skipped": why}
    try:
        from ascendify.precision.compare_report import write_curves_outputs
        from ascendify.precision.curves import compare_curves
    except ImportError as e:  # a build without the precision package
        return {"skipped": f"compare not available ({e})"}
    try:
        n = min(len(a["step"]), len(b["step"]))
        a = {k: v[:n] for k, v in a.items()}
        b = {k: v[:n] for k, v in b.items()}
        curves = compare_curves(a, b, tolerance=TOLERANCE)
        write_curves_outputs(curves, ctx.out / "compare" / "curves")
    except Exception as e:  # noqa: BLE001 (a crash in one stage is reported, the pipeline goes on)
        errors.append(f"curves: {type(e).__name__}: {e}")
        return {}
    d = curves.to_dict()
    what = "loss" if "loss" in a else "output"
    cv = {"verdict": d.get("verdict"), "tolerance": TOLERANCE, "first": d.get("first_outside"),
          "a": "original on the CPU", "b": f"migrated on the {ctx.target_label}", "series": d.get("series"),
          "what": what}
    flat = [v for v in (proof.constant_loss(runs.get(sd) or {}) for sd in ("golden", "target")) if v]
    if what == "loss" and flat:  # agrees with anything: said, and the lockstep decides
        cv["constant"] = flat[0]
    bad = [proof.first_nonfinite(runs.get(sd) or {}) for sd in ("golden", "target")]
    if all(bad):
        cv["nonfinite"] = f"{bad[0][1]} on both sides from step {min(bad)[0]}"
        if min(bad)[0] <= (a["step"] or [0])[0]:  # not one step where both are finite: no curve at all
            cv["verdict"] = "nothing to compare"
    draws = runs.get("target", {}).get("random_draws_on_device") or []
    cv["random_draws_on_device"] = draws
    if d.get("verdict") != "match" and draws and cv["verdict"] != "nothing to compare":
        cv["verdict"] = "not comparable"
        cv["why"] = not_comparable_why(draws, ctx.target_label)
    res.files += ["compare/curves/curves.html", "compare/curves/curves.json", "compare/curves/curves.csv"]
    return cv


def _lockstep_text(facts: dict[str, Any]) -> str:
    ls = facts.get("lockstep", {})
    if not ls.get("verdict"):
        return f"lockstep {ls.get('skipped', 'not run')}"
    cos = (ls.get("end_to_end") or {}).get("cosine")
    text = f"lockstep {ls['verdict'].upper()}" + (f" (cosine {number_text(cos, '.6f')})" if cos is not None else "")
    if ls.get("first_divergence"):
        fd = ls["first_divergence"]
        text += f" first at {fd.get('name', fd) if isinstance(fd, dict) else fd}"
    elif ls["verdict"] == "not comparable" and ls.get("random_draws"):
        text += f": {random_in_forward(ls['random_draws'])}"
    if ls.get("eager_model"):
        text += " on the eager model"
    gr = facts.get("gradients") or {}
    if gr.get("verdict") == "match":
        text += f", gradients match ({gradients_counted(gr)})"
    elif gr.get("verdict") == "divergence":
        bad = len(gr.get("differ") or []) + len(gr.get("missing") or [])
        text += f", {bad} gradient(s) differ, first {gr.get('first') or gr['missing'][0]['name']}"
    nw = len((ls.get("weights") or {}).get("differ") or [])
    if nw and not (ls.get("weights") or {}).get("copied"):
        text += f"; {nw} weight tensor(s) differ before the first step"
    return text


def _curves_text(cv: dict[str, Any], runs: dict[str, Any]) -> str:
    what = cv.get("what", "loss")
    if cv.get("verdict") == "not comparable":
        d0 = (runs.get("target", {}).get("random_draws_on_device") or [{}])[0]
        return f"{what} curves NOT COMPARABLE (random draws on the device: {d0.get('api')} at {d0.get('first_at')})"
    if cv.get("verdict") == "nothing to compare":
        why = f"the losses are {cv['nonfinite']}" if cv.get("nonfinite") else "no loss column in common"
        return f"{what} curves: nothing to compare ({why})"
    if not cv.get("verdict"):
        return f"curves: {cv.get('skipped', 'not run')}"
    text = f"{what} curves {cv['verdict'].upper()} within {cv.get('tolerance', TOLERANCE):g}"
    if cv.get("first"):
        text += f" (leaves at step {cv['first'].get('step')})"
    if cv.get("constant"):
        text += f", but the loss is {cv['constant']} at every step: the curves say nothing"
    if cv.get("nonfinite"):
        text += f", but the losses are {cv['nonfinite']}: nothing to compare there"
    draws = cv.get("random_draws_on_device") or []
    if draws:  # named, not hidden by the band: these runs cannot agree exactly
        text += (f" (not exactly: {sum(d['calls'] for d in draws)} random draws on the device, "
                 f"{draws[0]['api']} first at {draws[0]['first_at']})")
    return text



def gradients_counted(gr: dict[str, Any]) -> str:
    """What the gradient check counted: backward module calls, and the trainable tensors and parameters they cover.

    >>> gradients_counted({"compared": 36, "parameter_tensors": 6, "parameters": 3867})
    '36 backward module calls over 6 parameter tensors, 3,867 parameters'
    >>> gradients_counted({"compared": 4})
    '4 backward module calls'
    """
    text = f"{gr.get('compared') or 0} backward module calls"
    if gr.get("parameter_tensors") is not None:
        text += f" over {gr['parameter_tensors']} parameter tensors, {gr.get('parameters') or 0:,} parameters"
    return text

def not_comparable_why(draws: list[dict[str, Any]], where: str) -> str:
    """Why two runs' curves cannot be compared: random draws the migrated run made on the device.

    >>> not_comparable_why([{"api": "torch.multinomial", "device": "npu", "calls": 100, "first_at": "m.py:3"}],
    ...                    "NPU")[:80]
    'random draws on the NPU (torch.multinomial ×100, first at m.py:3) use the device'
    """
    what = ", ".join(f"{d['api']} ×{d['calls']}" + (f", first at {d['first_at']}" if d.get("first_at") else "")
                     for d in draws[:3])
    return (f"random draws on the {where} ({what}) use the device's generator and the reference run the CPU's, "
            "which no seed makes agree; the lockstep (eval mode, no draw) is the comparison that holds. To "
            "compare the curves too: dropout p=0 or eval mode, or draw on the CPU and move the result")


# -- the section ----------------------------------------------------------------------------------------------


def section(sec: report.Section, res: StageResult, result) -> None:
    _lockstep_section(sec.section("Lockstep: the model, layer by layer", anchor="compare-lockstep"), res.facts)
    _curves_section(sec.section("Curves: the two training runs", anchor="compare-curves"), res.facts)


def _lockstep_section(sub: report.Section, facts: dict[str, Any]) -> None:
    ls = facts.get("lockstep") or {}
    if ls.get("verdict"):
        st_ = {"match": "ok", "not comparable": "warn"}.get(ls["verdict"], "fail")
        fd = ls.get("first_divergence")
        sub.verdict(st_, f"{ls['verdict'].upper()}: {ls.get('target')} vs {ls.get('golden')}",
                    f"first divergence: {fd}" if fd else
                    random_in_forward(ls["random_draws"]) + ": each run draws other numbers, whatever the port"
                    if ls.get("random_draws") else
                    f"{ls.get('matched', 0)} matched module calls, none over its limit")
        if ls.get("eager_model"):
            sub.text(ls["eager_model"])
        e2e = ls.get("end_to_end") or {}
        names = {"cosine": "cosine similarity", "rel_l2": "relative L2 error", "max_abs": "max absolute error",
                 "thousandth": "share within 1/1000", "five_thousandth": "share within 5/1000"}
        sub.kv({names[k]: (number_text(e2e[k], ".6f") if k == "cosine" else e2e[k]) for k in names
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
        gr = facts.get("gradients") or {}
        if gr.get("verdict"):
            bad = [{"where": d["name"], "rel L2": d["rel_l2"], "limit": d["limit"],
                    "why": d.get("why") or "over the limit"} for d in gr.get("differ") or []]
            bad += [{"where": d["name"], "rel L2": None, "limit": None,
                     "why": f"no gradient on the {d['side']}" + (f" ({d['why']})" if d.get("why") else "")}
                    for d in gr.get("missing") or []]
            sub.kv({"gradients (one backward, loss: mean of squared outputs, module by module)":
                    f"{gr['verdict']}: {gradients_counted(gr)} compared"
                    + (f", first divergence in backward order: {gr['first']}" if gr.get("first") else "")})
            if bad:
                sub.table([report.Column("where"), report.Column("rel L2", kind="number"),
                           report.Column("limit", kind="number"), report.Column("why")], bad[:50],
                          caption="gradients that differ (a call's own backward error, or a parameter without one)")
        sub.link("compare/lockstep/compare.html", "the full lockstep report (compare/lockstep/compare.html)")
    else:
        sub.verdict("skip", str(ls.get("skipped") or "not run"))


def _curves_section(sub: report.Section, facts: dict[str, Any]) -> None:
    cv = facts.get("curves") or {}
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
            x, a, b = d.get("x") or [], [finite(v) for v in d.get("a") or []], [finite(v) for v in d.get("b") or []]
            name = "" if len(keys) == 1 else f" {k}"
            lines[f"A: original, CPU{name}"] = finite_points(x, a)
            lines[f"B: migrated, target{name}"] = finite_points(x, b)
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
            sub.html(figs_html(figs))
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
