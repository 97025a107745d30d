"""The migration checklist, evaluated from the stage results of ``ascendify port``.

The items (id, section, question, how it is evaluated) are package data, ``data/migration_checklist.json``; each
has an evaluator here, registered under the same id: a small function whose docstring says what it reads. An
evaluator gets the stage results by id and returns a :class:`Verdict`: ``✓`` (pass), ``✗`` (fail) or ``n/a``
(not applicable here, or its step did not run), always with the evidence, and the report section that shows it.

>>> from ascendify.port.stages.base import StageResult
>>> doctor = StageResult("doctor", status="ok", facts={"summary": {"fail": 0, "ok": 8}, "checks": {}})
>>> evaluate_item("env.doctor-clean", {"doctor": doctor}, target="emulated").mark
'✓'
>>> evaluate_item("env.doctor-clean", {}, target="emulated").mark
'n/a'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascendify.core import knowledge
from ascendify.port.stages.base import StageResult, number_text
from ascendify.report.tables import plural

PASS, FAIL, NA = "✓", "✗", "n/a"


@dataclass
class Verdict:
    mark: str  # ✓ ✗ n/a
    evidence: str
    anchor: str = ""  # report section that shows the evidence

    @property
    def status(self) -> str:
        return {PASS: "pass", FAIL: "fail"}.get(self.mark, "n/a")


Stages = dict[str, StageResult]
Evaluator = Callable[[Stages, str], Verdict]
EVALUATORS: dict[str, Evaluator] = {}


def evaluator(item_id: str) -> Callable[[Evaluator], Evaluator]:
    def register(fn: Evaluator) -> Evaluator:
        EVALUATORS[item_id] = fn
        return fn

    return register


def items() -> list[dict[str, Any]]:
    """The checklist items, in order (package data)."""
    return list(knowledge.load("migration_checklist")["items"])


def sections() -> list[dict[str, str]]:
    return list(knowledge.load("migration_checklist")["sections"])


class _NotRun(Exception):
    def __init__(self, stage: str, why: str):
        super().__init__(f"not evaluated: the {stage} step {why}")
        self.stage = stage


def _need(stages: Stages, stage: str) -> StageResult:
    res = stages.get(stage)
    if res is None or res.status == "skip":
        raise _NotRun(stage, f"did not run ({res.headline})" if res is not None and res.headline else "did not run")
    if res.status == "error":
        raise _NotRun(stage, "failed (see its section)")
    return res


def evaluate_item(item_id: str, stages: Stages, target: str) -> Verdict:
    """One item's verdict (a missing step or evaluator gives ``n/a`` with the reason)."""
    fn = EVALUATORS.get(item_id)
    if fn is None:
        return Verdict(NA, f"no evaluator for {item_id}")
    try:
        return fn(stages, target)
    except _NotRun as e:
        return Verdict(NA, str(e), e.stage)
    except Exception as e:  # noqa: BLE001 (an evaluator's own bug: said on its item, the report still written)
        return Verdict(NA, f"not evaluated: {item_id}'s evaluator failed ({type(e).__name__}: {e})")


def evaluate(stages: Stages, target: str, flags: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Every item with its verdict: dicts with id, section, question, how, mark, status, evidence, anchor. An item
    with a ``when`` (the option that asks for its check, e.g. ``--overflow``) is listed only when ``flags`` holds
    it."""
    out = []
    for item in items():
        if item.get("when") and item["when"] not in flags:
            continue
        v = evaluate_item(item["id"], stages, target)
        out.append({**item, "mark": v.mark, "status": v.status, "evidence": v.evidence,
                    "anchor": v.anchor or item.get("step", "")})
    return out


def _check(stages: Stages, cid: str) -> dict[str, Any]:
    return _need(stages, "doctor").facts.get("checks", {}).get(cid) or {}


# --- environment -------------------------------------------------------------------------------------------------


@evaluator("env.python-torch")
def _python_torch(stages: Stages, target: str) -> Verdict:
    """Doctor's ``python`` and ``torch`` checks: both ok (warn counts as a pass with its text)."""
    found = [(c, _check(stages, c)) for c in ("python", "torch")]
    bad = [f"{c}: {d.get('found', 'missing')}" for c, d in found if d.get("status") not in ("ok", "warn")]
    if bad:
        return Verdict(FAIL, "; ".join(bad), "doctor")
    return Verdict(PASS, "; ".join(d.get("found", "") for _, d in found), "doctor")


@evaluator("env.torch-npu-cann")
def _torch_npu_cann(stages: Stages, target: str) -> Verdict:
    """Doctor's ``torch-npu``, ``cann``, ``driver`` and ``matrix`` checks; n/a when they all skip (no NPU here)."""
    found = {c: _check(stages, c) for c in ("torch-npu", "cann", "driver", "matrix")}
    statuses = {c: d.get("status", "skip") for c, d in found.items()}
    if all(s == "skip" for s in statuses.values()):
        return Verdict(NA, "no NPU stack on this host (" + found["torch-npu"].get("found", "torch-npu absent")
                       + "); the emulated NPU stands in", "doctor")
    failed = [f"{c}: {found[c].get('found', '')}" for c, s in statuses.items() if s == "fail"]
    if failed:
        return Verdict(FAIL, "; ".join(failed), "doctor")
    return Verdict(PASS, "; ".join(f"{c} {s}" for c, s in statuses.items()), "doctor")


@evaluator("env.device-smoke")
def _device_smoke(stages: Stages, target: str) -> Verdict:
    """Doctor's smoke check of the NPU side (``smoke:npu``, ``smoke:emulated``; ``smoke:cuda`` for a GPU)."""
    want = {"npu": "smoke:npu", "emulated": "smoke:emulated", "cuda": "smoke:cuda"}[target]
    d = _check(stages, want)
    if not d:
        return Verdict(NA, f"doctor ran no {want} check", "doctor")
    if d.get("status") == "ok":
        return Verdict(PASS, d.get("found", ""), "doctor")
    return Verdict(FAIL if d.get("status") == "fail" else NA, f"{d.get('status')}: {d.get('found', '')}", "doctor")


@evaluator("env.doctor-clean")
def _doctor_clean(stages: Stages, target: str) -> Verdict:
    """Doctor's summary: no failed check."""
    s = _need(stages, "doctor").facts.get("summary", {})
    text = f"{s.get('ok', 0)} ok, {s.get('warn', 0)} warn, {s.get('fail', 0)} fail, {s.get('skip', 0)} skipped"
    return Verdict(FAIL if s.get("fail") else PASS, text, "doctor")


# --- code migration ----------------------------------------------------------------------------------------------


def _totals(stages: Stages) -> dict[str, Any]:
    return _need(stages, "migrate").facts.get("totals", {})


# the table of migrate's report.md that lists the sites not converted (``ascendify.migrate.report.NEEDS_A_PERSON``,
# spelled out here so that the checklist does not import the migration rules; a test keeps them equal)
NEEDS_A_PERSON = "Not converted: needs a person"


@evaluator("code.sites-accounted")
def _sites_accounted(stages: Stages, target: str) -> Verdict:
    """migrate's totals: every CUDA site converted or reported (``accounted_share`` 1), no file skipped. The
    parts named add up to the sites: the unclaimed ones (what keeps the share under 1) with where they are."""
    t = _totals(stages)
    share, skipped = float(t.get("accounted_share") or 0.0), int(t.get("skipped") or 0)
    unclaimed = int(t.get("unclaimed") or 0)
    where = (" (rule ASC099, severity review: migrate/report/report.md, table "
             f"\"{NEEDS_A_PERSON}\", and unsupported.csv)") if unclaimed else ""
    text = (f"{t.get('cuda_sites', 0)} CUDA sites: {t.get('converted', 0)} converted, "
            f"{t.get('report_only', 0)} reported, {t.get('unsupported', 0)} unsupported, "
            f"{unclaimed} unclaimed{where}; {share:.0%} accounted for, {skipped} files skipped")
    return Verdict(PASS if share >= 1.0 and not skipped else FAIL, text, "migrate")


@evaluator("code.unsupported-listed")
def _unsupported_listed(stages: Stages, target: str) -> Verdict:
    """migrate's totals: ``unclaimed`` 0 (every site a rule saw is in a report row with advice)."""
    t = _totals(stages)
    unclaimed = int(t.get("unclaimed") or 0)
    text = (f"{t.get('unsupported', 0)} unsupported sites and {t.get('api_notes', 0)} API notes in "
            f"unsupported.csv; {unclaimed} unclaimed")
    return Verdict(PASS if not unclaimed else FAIL, text, "migrate")


@evaluator("code.custom-ops")
def _custom_ops(stages: Stages, target: str) -> Verdict:
    """migrate's totals: custom CUDA ops (``native_ops``) are listed in cuda_ops.csv for an Ascend C port."""
    n = int(_totals(stages).get("native_ops") or 0)
    if not n:
        return Verdict(NA, "no custom CUDA kernels in the project", "migrate")
    return Verdict(PASS, f"{n} custom op registrations listed in cuda_ops.csv (they need an Ascend C port; "
                         "the trainer's default path does not use them)", "migrate")


def _runs(stages: Stages) -> dict[str, Any]:
    return _need(stages, "train").facts.get("runs", {})


@evaluator("code.runs-on-target")
def _runs_on_target(stages: Stages, target: str) -> Verdict:
    """The target run exited 0 (or was stopped after its steps) and made its steps with a finite final loss (or,
    an inference program, its model calls); a training program that made no step proves nothing (✗); a CUDA
    target runs the original: n/a."""
    from ascendify.port import proof

    r = _runs(stages).get("target", {})
    if target == "cuda":
        return Verdict(NA, "the target is a CUDA GPU: the migrated copy needs an NPU (real or emulated)", "train")
    if r.get("skipped") and not r.get("history"):
        return Verdict(NA, str(r["skipped"]), "train")
    hist = r.get("history") or {}
    where = "the emulated NPU" if target == "emulated" else "the Ascend NPU"
    if r.get("returncode") not in (0, None) and not (r.get("skipped") or r.get("stopped_by_port")):
        return Verdict(FAIL, f"exit status {r.get('returncode')}", "train")
    g = _runs(stages).get("golden", {})
    if proof.is_training(r) or proof.is_training(g) or "time budget" in (r.get("stopped") or ""):
        n = proof.steps_made(r)
        if not n:  # a finding where the original trained; no evidence at all where neither run did
            other = proof.steps_made(g)
            return Verdict(FAIL if other else NA, f"no training step made on {where} {proof.why_no_step(r)}".rstrip()
                           + ("" if other else "; the original made none either"), "train")
        bad = proof.first_nonfinite(r)
        if bad:  # a finding where the original's loss stays finite; no evidence where it is NaN too
            both = proof.first_nonfinite(_runs(stages).get("golden", {}))
            return Verdict(NA if both else FAIL, f"{plural(n, 'step')} on {where}, but the loss is {bad[1]} from step "
                           f"{bad[0]}" + ("; the original's too: nothing to compare" if both else ""), "train")
        return Verdict(PASS, f"{plural(n, 'step')} on {where}, final loss {_num(hist['loss'][-1])}", "train")
    if proof.model_calls(r):
        return Verdict(PASS, f"{proof.model_calls(r)} model calls on {where} (no training step)", "train")
    return Verdict(FAIL, f"no model call on {where}", "train")


def _num(x) -> str:
    """A loss to 4 decimals; inf/NaN come back from JSON as strings: as they are."""
    return f"{x:.4f}" if isinstance(x, (int, float)) else str(x)


@evaluator("code.no-cpu-fallback")
def _no_cpu_fallback(stages: Stages, target: str) -> Verdict:
    """The emulator's record of the target run: no CPU fallback, rejection or API unsupported on every chip."""
    emu = _runs(stages).get("target", {}).get("emulator")
    if emu is None:
        return Verdict(NA, "needs the emulated NPU's record (the target was not the emulated NPU)", "train")
    bad = {k: emu.get(k, 0) for k in ("cpu_fallback_on_npu", "rejected", "unsupported_apis") if emu.get(k)}
    text = (f"{emu.get('ops_run', 0):,} ops ({emu.get('distinct_ops', 0)} distinct) on the emulated NPU; "
            + (", ".join(f"{k}: {v}" for k, v in bad.items()) if bad else "none falls back to the CPU"))
    return Verdict(FAIL if bad else PASS, text, "train")


@evaluator("code.auto-migration")
def _auto_migration(stages: Stages, target: str) -> Verdict:
    """``ascendify run --to cpu`` on the original: exit 0, no unmapped device, and its steps made (or its model
    called): a program that exited on its own before training took another branch than on a GPU."""
    from ascendify.port import proof

    r = _runs(stages).get("golden", {})
    if r.get("skipped") and not r.get("history"):
        return Verdict(NA, str(r["skipped"]), "train")
    if r.get("returncode") not in (0, None) and not (r.get("skipped") or r.get("stopped_by_port")):
        return Verdict(FAIL, f"exit status {r.get('returncode')}", "train")
    count = proof.steps_made if proof.is_training(r) else proof.model_calls
    if not count(r):  # no evidence that it ran as on a GPU (the verdict says "not proven")
        what = "training step" if proof.is_training(r) else "model call"
        return Verdict(NA, f"no evidence: the unmodified original made no {what} under ascendify run --to cpu "
                           f"{proof.why_no_step(r)}".rstrip(), "train")
    unmapped = int(r.get("unmapped") or 0)
    text = (f"unmodified original ran on the CPU: {r.get('redirected', '?')} CUDA APIs redirected, "
            f"{r.get('unsupported', 0)} unsupported, {unmapped} unmapped devices")
    return Verdict(FAIL if unmapped else PASS, text, "train")


# --- performance -------------------------------------------------------------------------------------------------


@evaluator("perf.measured")
def _perf_measured(stages: Stages, target: str) -> Verdict:
    """Bench on the target: at least one record, every record ok (an OOM in a sweep is a result)."""
    b = _need(stages, "bench").facts
    recs = b.get("records", {}).get("target")
    if not recs:
        return Verdict(NA, "no bench run on the target", "bench")
    bad = [r for r in recs if r.get("status") not in ("ok", "oom")]
    best = b.get("best", {}).get("target", 0.0)
    label = " (emulated NPU: host speed)" if b.get("meta", {}).get("target", {}).get("emulated") else ""
    text = f"{len(recs)} run{'s' if len(recs) != 1 else ''}, best {best:.3g} samples/s{label}"
    return Verdict(FAIL if bad else PASS, text + (f"; {len(bad)} failed" if bad else ""), "bench")


@evaluator("perf.baseline")
def _perf_baseline(stages: Stages, target: str) -> Verdict:
    """Bench on the CPU and the target: the ratio, only where the target is a real device."""
    b = _need(stages, "bench").facts
    best = b.get("best", {})
    if "cpu" not in best or "target" not in best:
        return Verdict(NA, "needs bench runs on both the CPU and the target", "bench")
    if b.get("meta", {}).get("target", {}).get("emulated"):
        return Verdict(NA, f"the emulated NPU runs at host speed ({best['target']:.3g} vs CPU {best['cpu']:.3g} "
                           "samples/s): a speed comparison needs a real NPU", "bench")
    if not best["cpu"]:
        return Verdict(FAIL, "the CPU baseline measured nothing", "bench")
    unstable = b.get("unstable") or {}
    if unstable:  # a busy machine: no speed-up is claimed from figures that moved that much
        return Verdict(NA, "unstable figures (" + ", ".join(f"{k}: repeats differ {v:.2g}x" for k, v in unstable.items())
                       + "): the machine was busy; bench again on an idle machine", "bench")
    return Verdict(PASS, f"{best['target'] / best['cpu']:.2f}x the CPU ({best['target']:.3g} vs "
                         f"{best['cpu']:.3g} samples/s)", "bench")


@evaluator("perf.mfu")
def _perf_mfu(stages: Stages, target: str) -> Verdict:
    """Bench records' ``mfu`` on the target (known only with a real device whose peak is known)."""
    recs = _need(stages, "bench").facts.get("records", {}).get("target") or []
    mfus = [r["mfu"] for r in recs if r.get("mfu") is not None]
    if not mfus:
        why = "the emulated NPU has no chip peak" if target == "emulated" else "no published peak for this device"
        return Verdict(NA, why, "bench")
    return Verdict(PASS, f"MFU up to {max(mfus):.1%}", "bench")


@evaluator("perf.advice")
def _perf_advice(stages: Stages, target: str) -> Verdict:
    """The performance advice for the NPU: ``ascendify advise``'s analysis of the migrated run (the train stage's
    ``advise`` facts: its findings at the lines of the code, with their estimated weight) where it ran, and
    migrate's advice items (advice.csv)."""
    from ascendify.port.stages import fast

    advice = (stages.get("train").facts.get("advise") if stages.get("train") else None) or {}
    n = int(_totals(stages).get("advice") or 0) if stages.get("migrate") and stages["migrate"].status != "skip" \
        else None
    from_migrate = (f"; {n} advice items in advice.csv" if n else "; no migrate advice") if n is not None else ""
    if advice and not advice.get("skipped"):
        top = (advice.get("findings") or [{}])[0]
        first = f" (first: {top.get('title')} at {top.get('where')})" if top.get("title") else ""
        return Verdict(PASS, f"advise on the migrated run: {fast.headline(advice)}{first}{from_migrate}", "advise")
    if n is None:
        raise _NotRun("migrate", "did not run") if not advice else _NotRun("train", advice["skipped"])
    return Verdict(PASS, f"{n} advice items in advice.csv" if n else "no performance advice for this project",
                   "migrate")


# --- precision ---------------------------------------------------------------------------------------------------


def _compare(stages: Stages, key: str) -> dict[str, Any]:
    d = _need(stages, "compare").facts.get(key) or {}
    if d.get("skipped") or not d.get("verdict"):
        raise _NotRun("compare", f"ran no {key} comparison ({d.get('skipped') or 'no verdict'})")
    return d


@evaluator("prec.lockstep")
def _prec_lockstep(stages: Stages, target: str) -> Verdict:
    """Lockstep ``compare_models`` verdict: match."""
    d = _compare(stages, "lockstep")
    if d.get("verdict") == "not comparable":  # a model that draws in its forward: no evidence either way
        from ascendify.port.proof import random_in_forward

        return Verdict(NA, "not comparable: " + (random_in_forward(d["random_draws"]) if d.get("random_draws")
                                                 else "random calls drew differently"), "compare")
    e2e = d.get("end_to_end") or {}
    text = f"{d.get('verdict')}: {d.get('matched', 0)} matched calls"
    if e2e.get("cosine") is not None:
        text += (f", end-to-end cosine {number_text(e2e['cosine'], '.6f')}, relative L2 "
                 f"{number_text(e2e.get('rel_l2', 0), '.2e')}")
    if d.get("first_divergence"):
        fd = d["first_divergence"]
        text += f"; first divergence at {fd.get('name', fd) if isinstance(fd, dict) else fd}"
    return Verdict(PASS if d.get("verdict") == "match" else FAIL, text, "compare")


@evaluator("prec.curves")
def _prec_curves(stages: Stages, target: str) -> Verdict:
    """Curves comparison verdict: match (every loss step within the relative band)."""
    d = _compare(stages, "curves")
    if d.get("verdict") == "not comparable":
        return Verdict(NA, f"not comparable: {d.get('why')}", "compare")
    if d.get("nonfinite"):
        return Verdict(NA, f"nothing to compare: the losses are {d['nonfinite']}", "compare")
    if d.get("constant"):
        return Verdict(NA, f"the loss is {d['constant']} at every step: a constant curve agrees with anything and "
                           "proves nothing (the lockstep decides)", "compare")
    loss = (d.get("series") or {}).get("loss", {})
    text = f"{d.get('verdict')} within {d.get('tolerance', 0.05):g}"
    if loss:
        text += f" over {plural(loss.get('steps', 0), 'step')}, largest relative difference {loss.get('max_rel_diff', 0):.2%}"
    if d.get("first"):
        text += f"; leaves the band at step {d['first'].get('step')}"
    return Verdict(PASS if d.get("verdict") == "match" else FAIL, text, "compare")


@evaluator("prec.dtype-events")
def _prec_dtype_events(stages: Stages, target: str) -> Verdict:
    """The emulator's record: no float64 on the NPU, no fp16 overflow."""
    emu = _runs(stages).get("target", {}).get("emulator")
    if emu is None:
        return Verdict(NA, "needs the emulated NPU's record (the target was not the emulated NPU)", "train")
    f64, ovf = int(emu.get("float64_events") or 0), int(emu.get("fp16_overflow_events") or 0)
    return Verdict(PASS if not (f64 or ovf) else FAIL, f"{f64} float64 events, {ovf} fp16 overflow events", "train")


@evaluator("prec.overflow")
def _prec_overflow(stages: Stages, target: str) -> Verdict:
    """``port --overflow``: the train step's ``overflow`` facts (the migrated run under the overflow watch): no new
    inf/NaN and no skipped GradScaler step; n/a where the run was not watched or under the emulated NPU's
    saturation mode (nothing turns inf there, so nothing can be seen)."""
    from ascendify.port.stages.overflow import overflow_text

    o = _need(stages, "train").facts.get("overflow")
    if not o:
        return Verdict(NA, "the migrated run was not watched (port without --overflow)", "train")
    if o.get("skipped"):
        return Verdict(NA, f"not checked: {o['skipped']}", "train")
    mode = o.get("npu_overflow_mode") or {}
    if mode.get("mode") == "saturation" and not o.get("first"):
        return Verdict(NA, f"the emulated NPU ran in saturation mode ({mode.get('device')}): overflows saturate, "
                           "none can be seen; rerun with ASCENDIFY_EMULATE_OVERFLOW_MODE=inf_nan", "train")
    bad = bool(o.get("first") or o.get("overflows") or o.get("skipped_steps"))
    return Verdict(FAIL if bad else PASS, overflow_text(o), "train")


# --- deployment --------------------------------------------------------------------------------------------------


@evaluator("deploy.backend")
def _deploy_backend(stages: Stages, target: str) -> Verdict:
    """No string literal 'nccl' left in the migrated Python files."""
    hits = _need(stages, "migrate").facts.get("nccl_literals", [])
    if hits:
        return Verdict(FAIL, "'nccl' still at " + ", ".join(hits[:5]), "migrate")
    return Verdict(PASS, "no 'nccl' left in the migrated code (torch.distributed uses hccl)", "migrate")


@evaluator("deploy.visible-devices")
def _deploy_visible(stages: Stages, target: str) -> Verdict:
    """No read of CUDA_VISIBLE_DEVICES from the environment in the migrated Python files."""
    hits = _need(stages, "migrate").facts.get("cuda_visible_reads", [])
    if hits:
        return Verdict(FAIL, "CUDA_VISIBLE_DEVICES still read at " + ", ".join(hits[:5]), "migrate")
    return Verdict(PASS, "device selection reads ASCEND_RT_VISIBLE_DEVICES", "migrate")


@evaluator("deploy.real-npu")
def _deploy_real_npu(stages: Stages, target: str) -> Verdict:
    """Whether the target was a real Ascend NPU."""
    if target != "npu":
        return Verdict(NA, "no Ascend NPU here: run `ascendify port` on an Ascend host to close this item", "train")
    r = _runs(stages).get("target", {})
    ok = r.get("returncode") == 0
    return Verdict(PASS if ok else FAIL, "trained on the Ascend NPU" if ok else f"exit {r.get('returncode')}", "train")
