"""What a run of ``ascendify port`` proved, and what it did not: the evidence its verdict OK needs.

A port is *proven* only when

* both runs made their steps: a training program (one that built an optimizer or called ``backward()``) made at
  least one training step on each side, an inference program called its model on each side;
* the losses are finite: a loss that is NaN or inf on both sides (the program's own bug, or a reference that
  proves nothing) is no evidence; NaN on the migrated side only is a finding of the curves, not a gap here;
* the lockstep compared the same model on both sides and matched.

:func:`gaps` lists what is missing, each a sentence that finishes "not proven: ..."; the pipeline's verdict is
``not proven`` (exit status 5) when the list is not empty and nothing worse (a finding, a crash) was found.

>>> from types import SimpleNamespace as Step  # a step result: status, headline, facts
>>> run = {"training": True, "history": {"step": [], "loss": []}, "stopped": "ended", "returncode": 0}
>>> train = Step(status="ok", headline="", facts={"runs": {"golden": run, "target": run}})
>>> gaps({"train": train})[0]
'neither run made a training step (the program ended by itself)'
"""

from __future__ import annotations

import math
from typing import Any

from ascendify.report.tables import plural

Steps = dict[str, Any]  # stage id -> its StageResult (ascendify.port.stages.base): status, headline, facts

SIDES = (("golden", "the original"), ("target", "the migrated copy"))


def is_training(run: dict[str, Any]) -> bool:
    """Whether a run is a training program: it built an optimizer or called ``backward()`` (an evaluation loop
    before the first step does not make it an inference program)."""
    return bool(run.get("training") or run.get("step_unit"))


def steps_made(run: dict[str, Any]) -> int:
    """Training steps a run made (its history's rows with a loss)."""
    h = run.get("history") or {}
    return len(h.get("loss") or []) if h.get("loss") is not None else 0


def model_calls(run: dict[str, Any]) -> int:
    return len((run.get("history") or {}).get("output_mean") or [])


def first_nonfinite(run: dict[str, Any]) -> tuple[int, str] | None:
    """``(step, value)`` of the first loss (any series) that is NaN or inf; a loss that went non-finite comes
    back from JSON as a string.

    >>> first_nonfinite({"history": {"step": [0, 1, 2], "loss": [1.0, "NaN", "NaN"]}})
    (1, 'NaN')
    >>> first_nonfinite({"history": {"step": [0], "loss": [1.0]}}) is None
    True
    """
    h = run.get("history") or {}
    steps = h.get("step") or []
    for i in range(len(steps)):
        for key, values in h.items():
            if not key.startswith("loss") or i >= len(values):
                continue
            v = values[i]
            bad = isinstance(v, str) or (isinstance(v, float) and not math.isfinite(v))
            if bad:
                return steps[i], str(v)
    return None


def constant_loss(run: dict[str, Any]) -> str | None:
    """The loss value when a run's loss is the same at every one of its (two or more) steps: such a curve agrees
    with anything and proves nothing about training.

    >>> constant_loss({"history": {"loss": [-0.0, -0.0, -0.0]}}), constant_loss({"history": {"loss": [1, 2]}})
    ('-0', None)
    """
    losses = (run.get("history") or {}).get("loss") or []
    if len(losses) < 2 or any(not isinstance(x, (int, float)) for x in losses):
        return None
    return f"{losses[0]:g}" if all(x == losses[0] for x in losses) else None


def why_no_step(run: dict[str, Any]) -> str:
    """Why a run made no step, from how it stopped: the budget, the program's own end (with its last line).

    >>> why_no_step({"stopped": "time budget of 60 s spent before the first step", "seconds_asked": 60})
    'within the time budget (60 s)'
    >>> why_no_step({"stopped": "ended", "returncode": 0, "last_line": "Exiting."})
    "(the program ended by itself after printing 'Exiting.')"
    """
    if "time budget" in (run.get("stopped") or ""):
        secs = run.get("seconds_asked")
        return f"within the time budget ({secs:g} s)" if isinstance(secs, (int, float)) else "within the time budget"
    if run.get("returncode") == 0:
        last = run.get("last_line")
        return f"(the program ended by itself after printing {last!r})" if last else "(the program ended by itself)"
    return ""


def gaps(steps: Steps) -> list[str]:
    """What the run did not prove (empty: the port is proven)."""
    out: list[str] = []
    train = steps.get("train")
    runs = (train.facts.get("runs") if train is not None else None) or {}
    if train is None or train.status == "skip" and all(r.get("skipped") and not r.get("history")
                                                       for r in runs.values()):
        why = train.headline if train is not None and train.headline else "did not run"
        return ["the runs did not run (" + why.replace("skipped (--skip)", "--skip train") + ")"]
    training = any(is_training(runs.get(side) or {}) for side, _ in SIDES)
    nonfinite = {}
    idle: dict[str, str] = {}  # side -> why it made no step
    for side, label in SIDES:
        r = runs.get(side) or {}
        if r.get("skipped") and not r.get("history"):
            out.append(f"{label} did not run ({r['skipped']})")
            continue
        budget = "time budget" in (r.get("stopped") or "")
        if training or budget:
            if not (steps_made(r) or (not training and model_calls(r))):
                idle[side] = f"made no training step {why_no_step(r)}".rstrip()
            else:
                bad = first_nonfinite(r)
                if bad:
                    nonfinite[side] = bad
        elif not model_calls(r):
            idle[side] = f"called no model {why_no_step(r)}".rstrip()
    if len(idle) == 2 and idle["golden"] == idle["target"]:
        out.append("neither run " + idle["golden"].replace("made no", "made a", 1).replace("called no", "called a",
                                                                                              1))
    else:
        out += [f"{label} {idle[side]}" for side, label in SIDES if side in idle]
    if "golden" in nonfinite and "target" in nonfinite:
        (gs, gv), (ts, tv) = nonfinite["golden"], nonfinite["target"]
        out.append(f"the losses are {gv} on both sides (the original's from step {gs}, the migrated copy's from "
                   f"step {ts})" if (gs, gv) != (ts, tv) else f"the losses are {gv} on both sides from step {gs}")
    elif "golden" in nonfinite:
        gs, gv = nonfinite["golden"]
        out.append(f"the original's loss is {gv} from step {gs}: the reference proves nothing from there")
    compare = steps.get("compare")
    ls = (compare.facts.get("lockstep") if compare is not None else None) or {}
    if compare is None or compare.status == "skip" and not ls:
        out.append(f"the lockstep did not run ({compare.headline if compare is not None else 'no compare step'})")
    elif ls.get("skipped"):
        why = str(ls["skipped"])
        out.append("the lockstep did not run (--skip compare)" if why.startswith("skipped (--skip)") else
                   f"the lockstep compared nothing ({why.removeprefix('nothing to compare: ')})")
    elif ls.get("verdict") == "not comparable" and ls.get("random_draws"):
        out.append(f"the lockstep cannot compare the model: {random_in_forward(ls['random_draws'])}")
    elif ls.get("verdict") not in ("match", "divergence") and not ls.get("error"):
        out.append(f"the lockstep gave no verdict ({ls.get('verdict') or 'not run'})")
    elif ls.get("verdict") == "match" and train.facts.get("param_counts_agree") is False:
        out.append("the two runs' models differ, so the lockstep did not compare the same model")
    return out


def nan_on_target_only(steps: Steps) -> str | None:
    """A finding: the migrated copy's loss went NaN/inf where the original's stayed finite."""
    train = steps.get("train")
    runs = (train.facts.get("runs") if train is not None else None) or {}
    g, t = runs.get("golden") or {}, runs.get("target") or {}
    bad_t = first_nonfinite(t) if steps_made(t) else None
    if bad_t and not first_nonfinite(g) and steps_made(g):
        return f"the migrated copy's loss is {bad_t[1]} from step {bad_t[0]} (the original's is finite)"
    return None


def evidence(steps: Steps) -> str:
    """What a proven run rests on, in a few words: the steps (or model calls) each run made, its ranks, and the
    comparisons that agreed.

    >>> run = {"training": True, "history": {"step": [0, 1], "loss": [2.0, 1.0]}, "ranks": 2}
    >>> from types import SimpleNamespace as Step
    >>> train = Step(facts={"runs": {"golden": run, "target": run}})
    >>> compare = Step(facts={"lockstep": {"verdict": "match"}, "curves": {"verdict": "match"}})
    >>> evidence({"train": train, "compare": compare})
    'both runs made 2 training steps on 2 ranks each; lockstep MATCH; loss curves MATCH'
    """
    runs = (steps["train"].facts.get("runs") if "train" in steps else None) or {}
    g, t = runs.get("golden") or {}, runs.get("target") or {}
    training = is_training(g) or is_training(t)
    count, unit = (steps_made, "training step") if training else (model_calls, "model call")
    ng, nt = count(g), count(t)
    parts = [f"both runs made {plural(ng, unit)}" if ng == nt else
             f"the original made {plural(ng, unit)}, the migrated copy {nt}"]
    ranks = max(int(g.get("ranks") or 1), int(t.get("ranks") or 1))
    if ranks > 1:
        parts[0] += f" on {ranks} ranks each"
    facts = steps["compare"].facts if "compare" in steps else {}
    ls, cv = facts.get("lockstep") or {}, facts.get("curves") or {}
    if ls.get("verdict"):
        parts.append(f"lockstep {ls['verdict'].upper()}")
    if cv.get("verdict"):
        parts.append(f"{cv.get('what', 'loss')} curves {cv['verdict'].upper()}"
                     + (" (random draws on the device)" if cv["verdict"] == "not comparable" else ""))
    return "; ".join(parts)


def random_in_forward(draws: list[dict[str, Any]]) -> str:
    """Why a lockstep is not comparable: the model draws random numbers in its forward (the lockstep's
    ``random_draws``).

    >>> random_in_forward([{"module": "(root)", "api": "torch.randn_like", "calls": 4, "first_at": "main.py:62"}])
    'the model draws random numbers in its forward, in eval mode too (torch.randn_like at main.py:62)'
    """
    d = draws[0]
    return f"the model draws random numbers in its forward, in eval mode too ({d['api']} at {d['first_at']})"
