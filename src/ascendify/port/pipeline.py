"""The pipeline of ``ascendify port`` (``ascendify demo`` runs it on its bundled example): :func:`run_port`
plans the run from its :class:`~ascendify.port.options.PortOptions`, prepares the report folder, runs every
stage's children (two at a time on a 2-core machine), reads each stage back as its children end, evaluates the
checklist, and writes ``report.html`` and the JSON report. The report is written even when a stage crashed or
the run was interrupted (the failure is shown in it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from ascendify.port import stages
from ascendify.port.jobs import Job, run_jobs
from ascendify.port.observation import Observation
from ascendify.port.options import ALL_STAGES, EXIT_SETUP, STAGE_IDS, Context, PortError, PortOptions, plan
from ascendify.port.result import PortResult
from ascendify.port.stages.base import StageResult

MARKER = ".ascendify-port"
OLD_MARKERS = (".ascendify-demo",)  # what earlier versions left in a demo folder
OWNED = ("doctor", "migrate", "runs", "train", "compare", "bench", "logs", "report.html", "report.json",
         "demo.json", MARKER, *OLD_MARKERS)


def run_port(opts: PortOptions) -> PortResult:
    """Run the pipeline; raises :class:`PortError` when it cannot start."""
    t0, cpu0 = time.monotonic(), _children_cpu()
    ctx = plan(opts)
    prepare_out(ctx.out, opts.force, opts)
    (ctx.runs).mkdir(exist_ok=True)
    progress = Progress(opts.progress, len(ALL_STAGES), opts.name, ctx.runs)
    progress.say(f"{ctx.target_label}: {ctx.target_reason}")
    progress.say(f"{opts.steps} steps a run, {opts.lanes} processes at a time; report in {ctx.out}")
    results, interrupted = run_stages(ctx, progress)
    result = PortResult(ctx, results, checklist=[], interrupted=interrupted)
    _add_checklist(result, progress)
    results["report"] = StageResult("report", status="ok", headline=f"report.html and {opts.report_json}",
                                    files=["report.html", opts.report_json])
    write_outputs(result, t0, cpu0, time.monotonic())
    progress.stage(results["report"])
    return result


def run_stages(ctx: Context, progress: Progress) -> tuple[dict[str, StageResult], bool]:
    """Every stage's children, each stage read back as soon as its children (and the stages it needs) are done;
    on Ctrl-C the children are stopped and every stage read again from what they left. Returns the stages' results
    in the report's order, and whether the run was interrupted."""
    jobs = stages.build_jobs(ctx)
    results: dict[str, StageResult] = {}

    def stage_jobs(sid: str) -> list[Job]:
        return [j for j in jobs if j.stage == sid]

    def read_ready(_job: Job | None = None) -> None:
        if _job is not None and not (_job.skipped and _job.skipped.startswith("skipped")):
            progress.job(_job)
        for sid in STAGE_IDS:
            module = stages.BY_ID[sid]
            if sid in results or not all(j.skipped or j.returncode is not None for j in stage_jobs(sid)):
                continue
            if any(n not in results for n in getattr(module, "NEEDS", ())):
                continue
            results[sid] = _safely(sid, lambda m=module, s=sid: m.read(ctx, stage_jobs(s), results))
            progress.stage(results[sid])

    interrupted = False
    try:
        run_jobs(jobs, lanes=ctx.lanes, log_dir=ctx.out / "logs", on_done=read_ready, on_tick=progress.waiting)
    except KeyboardInterrupt:  # the children are stopped by run_jobs; write what was proven up to here
        interrupted = True
        progress.say("interrupted: the children are stopped; writing the partial report")
        for j in jobs:
            stopped = j.returncode is None or (j.returncode in (130, -2) or j.returncode < 0) and not j.timed_out
            if not j.skipped and stopped:
                j.skipped = "interrupted (Ctrl-C)"
                j.returncode = None
        results.clear()  # read again: a stage read while its children were being stopped is stale
    read_ready()
    for sid in STAGE_IDS:
        results.setdefault(sid, StageResult(sid, status="skip", headline="interrupted"))
    return {s: results[s] for s in STAGE_IDS}, interrupted


def _add_checklist(result: PortResult, progress: Progress) -> None:
    from ascendify.port import checklist as cl

    t_check = time.monotonic()
    opts = result.context.options
    result.checklist = cl.evaluate(result.stages, result.target,
                                   flags=frozenset({"--overflow"} if opts.overflow else ()))
    marks = [i["mark"] for i in result.checklist]
    result.stages["checklist"] = StageResult(
        "checklist", status="fail" if "✗" in marks else "ok", seconds=time.monotonic() - t_check,
        headline=f"{marks.count('✓')} ✓, {marks.count('✗')} ✗, {marks.count('n/a')} not applicable "
                 f"of {len(marks)} items")
    progress.stage(result.stages["checklist"])


def prepare_out(out: Path, force: bool, opts: PortOptions) -> None:
    """Refuse a non-empty folder that ascendify did not write (unless ``force``); clear an earlier run's
    outputs."""
    if out.exists() and not out.is_dir():
        raise PortError(f"{out}: exists and is not a folder")
    if out.is_dir():
        entries = [p.name for p in out.iterdir()]
        ours = MARKER in entries or any(m in entries for m in OLD_MARKERS)
        if entries and not ours and not force:
            raise PortError(f"{out}: not empty and not written by ascendify {opts.name} ({', '.join(sorted(entries)[:5])}"
                            f"{', ...' if len(entries) > 5 else ''}); choose another folder or add --force")
        for name in (*OWNED, opts.report_json):
            p = out / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
        from ascendify import __version__
        from ascendify.core.fileio import write_atomic

        write_atomic(out / MARKER, f"written by ascendify {__version__} {opts.name}; safe to delete\n")
    except OSError as e:
        raise PortError(f"{out}: cannot write here ({e.strerror or e})", EXIT_SETUP) from None


class Progress:
    """Progress lines on stderr, folded to the terminal: each stage once, numbered as in the report's table
    (``[2/7] migrate``, whichever finishes first), and while the training runs go on, their steps so far."""

    EVERY = 30.0  # seconds between two "still running" lines

    def __init__(self, stream: TextIO | None, total: int, name: str = "port", runs: Path | None = None):
        self.stream, self.total, self.name, self.runs = stream, total, name, runs
        self.t0 = time.monotonic()
        self.announced: set[str] = set()
        self.next_wait = self.t0 + 2 * self.EVERY

    def say(self, text: str) -> None:
        if self.stream is not None:
            from ascendify.report.tables import fold

            print(fold(f"ascendify {self.name}: {text}"), file=self.stream, flush=True)

    def job(self, job: Job) -> None:
        if job.skipped:
            state = job.skipped
        elif job.stopped_at is not None and not job.timed_out:
            state = f"stopped at the time budget, exit {job.returncode}"
        elif job.timed_out:
            state = "timed out"
        else:
            state = f"exit {job.returncode}"
            why = self._stopped(job) if job.returncode == 0 else None
            if why:  # the run's own stop: after its steps, at the budget (an exit 0 alone hides which)
                state = f"{why}, {state}"
        self.say(f"  {job.name}: {state} ({job.seconds:.1f} s)")

    def _stopped(self, job: Job) -> str | None:
        """Why a training run stopped, as its observer wrote it (``10 steps done``, ``time budget of 60 s spent
        before the first step``); None where it ended by itself or wrote nothing."""
        if self.runs is None or not job.name.startswith("train-"):
            return None
        obs = Observation.load(self.runs / job.name.removeprefix("train-") / "observe.json")
        why = obs.stopped if obs is not None else None
        return why if isinstance(why, str) and why != "ended" else None

    def stage(self, res: StageResult) -> None:
        if res.id in self.announced:  # read again after Ctrl-C: said once
            return
        self.announced.add(res.id)
        n = ALL_STAGES.index(res.id) + 1 if res.id in ALL_STAGES else len(self.announced)
        head = short_headline(res.headline)
        self.say(f"[{n}/{self.total}] {res.id}: {res.status} ({time.monotonic() - self.t0:.0f} s) {head}")

    def waiting(self, running: list[Job]) -> None:
        """Every :attr:`EVERY` seconds while a training run goes on (the first after a minute): its steps so far,
        or that it has made none yet."""
        now = time.monotonic()
        trains = [j for j in running if j.name.startswith("train-")]
        if now < self.next_wait or not trains or self.runs is None:
            return
        self.next_wait = now + self.EVERY
        parts = []
        for j in trains:
            side = j.name.removeprefix("train-")
            try:
                n = int(json.loads((self.runs / side / "progress.json").read_text()).get("steps") or 0)
            except (OSError, ValueError, AttributeError):
                n = 0
            label = "original" if side == "golden" else "migrated"
            parts.append(f"{label} {n} step{'s' if n != 1 else ''} so far" if n else
                         f"{label}: no step yet after {now - j.started:.0f} s")
        self.say("  train: " + ", ".join(parts))


def short_headline(text: str, limit: int = 90) -> str:
    """A step's headline for its progress line: whole, or cut at the last clause that fits (never inside a number
    or a word), the cut said by "…"; the summary table and the report have it whole.

    >>> short_headline("emulated NPU (host CPU): 1 step on 2 ranks, loss 0.897; CPU: 1 step on 2 ranks, loss 0.897",
    ...                limit=70)
    'emulated NPU (host CPU): 1 step on 2 ranks, loss 0.897 …'
    """
    if len(text) <= limit:
        return text
    cut = text[: limit - 2]
    for sep in ("; ", ", ", " ("):
        i = cut.rfind(sep)
        if i > limit // 2:
            return cut[:i] + " …"
    return cut.rsplit(" ", 1)[0] + " …"


def _children_cpu() -> float:
    import resource

    self_ = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime


def _safely(sid: str, fn) -> StageResult:
    """A reader that raises is the stage's error, not the pipeline's end."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        import traceback

        return StageResult(sid, status="error", headline=f"reading the {sid} outputs failed: {e}",
                             error=traceback.format_exc())



def write_outputs(result: PortResult, t0: float, cpu0: float, t_rep: float) -> None:
    """``report.html`` and the JSON report; the report's time is measured up to the HTML, then both are
    written."""
    from ascendify import report
    from ascendify.core.fileio import write_atomic
    from ascendify.port import page
    from ascendify.port.stages import train

    png = train.loss_png(result)  # the training curves as a file of their own too
    if png:
        write_atomic(result.out / "runs" / "loss.png", png, mode=0o644)
        result.stages["train"].files.append("runs/loss.png")
    result.seconds = time.monotonic() - t0  # shown in the page: everything but drawing the page itself
    result.cpu_seconds = _children_cpu() - cpu0
    html = page.html_report(result)
    result.stages["report"].seconds = time.monotonic() - t_rep
    result.seconds = time.monotonic() - t0
    result.cpu_seconds = _children_cpu() - cpu0
    html.write(result.out / "report.html")
    os.chmod(result.out / "report.html", 0o644)
    report.write_json(result.out / result.context.options.report_json, result.to_dict())


def print_summary(result: PortResult, file: TextIO | None = None, width: int | None = None) -> None:
    """The terminal summary: one line per stage (status, time, headline), the checklist, the verdict."""
    from ascendify.port import page

    print(page.summary_text(result, width=width), file=file or sys.stdout)
