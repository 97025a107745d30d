"""``ascendify demo``: the whole mission in one command, on the embedded default (the emulated NPU).

:func:`run_demo` resolves the target, prepares the output folder, runs every step's child processes (two at a
time on a 2-core machine), reads their outputs back, evaluates the checklist, and writes ``report.html`` and
``demo.json``. The report is written even when a step crashed (the failure is shown in it).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ascendify.demo import steps as st
from ascendify.demo.jobs import Job, default_lanes, run_jobs

MARKER = ".ascendify-demo"
OWNED = ("doctor", "migrate", "train", "compare", "bench", "logs", "report.html", "demo.json", MARKER)
EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_STEP_FAILED, EXIT_SETUP = 0, 1, 2, 3, 4


class DemoError(Exception):
    """A demo that cannot start: ``code`` is the exit status (2 usage, 4 setup)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


@dataclass
class DemoOptions:
    out: Path
    quick: bool = False
    device: str = "auto"  # auto | npu | cuda | cpu
    skip: frozenset[str] = frozenset()
    force: bool = False
    lanes: int = field(default_factory=default_lanes)
    progress: TextIO | None = None  # where progress lines go (None: nowhere)


@dataclass
class DemoResult:
    out: Path
    target: str
    target_reason: str
    quick: bool
    steps: dict[str, st.StepResult]
    checklist: list[dict[str, Any]]
    seconds: float
    cpu_seconds: float
    lanes: int
    project: Path | None = None  # the bundled CUDA project the demo read

    @property
    def exit_code(self) -> int:
        if any(s.status == "error" for s in self.steps.values()):
            return EXIT_STEP_FAILED
        if any(s.status == "fail" for s in self.steps.values()) or any(i["mark"] == "✗" for i in self.checklist):
            return EXIT_FINDING
        return EXIT_OK

    @property
    def verdict(self) -> tuple[str, str]:
        """``(status, sentence)`` for the whole demo."""
        crashed = [s.id for s in self.steps.values() if s.status == "error"]
        if crashed:
            return "error", f"{', '.join(crashed)} failed to run: see the report (the other steps ran)"
        fails = [s.id for s in self.steps.values() if s.status == "fail"]
        xs = [i["id"] for i in self.checklist if i["mark"] == "✗"]
        where = st.TARGET_LABEL[self.target]
        if fails or xs:
            what = "; ".join(s.headline for s in self.steps.values() if s.status == "fail") or ", ".join(xs)
            return "fail", f"findings on the {where}: {what}"
        skipped = [s.id for s in self.steps.values() if s.status == "skip" and s.id in st.STEP_IDS]
        tail = f" ({', '.join(skipped)} skipped)" if skipped else ""
        return "ok", (f"the migrated project runs on the {where} and computes what the original computes"
                      f"{tail}")

    def to_dict(self) -> dict[str, Any]:
        from ascendify import __version__

        status, sentence = self.verdict
        marks = [i["mark"] for i in self.checklist]
        return {
            "schema": "ascendify.demo/1",
            "tool": f"ascendify {__version__}",
            "out": str(self.out),
            "target": self.target,
            "target_label": st.TARGET_LABEL[self.target],
            "target_reason": self.target_reason,
            "sizes": "quick" if self.quick else "default",
            "lanes": self.lanes,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "verdict": {"status": status, "text": sentence, "exit_code": self.exit_code},
            "steps": [s.to_dict() for s in self.steps.values()],
            "checklist": {"pass": marks.count("✓"), "fail": marks.count("✗"), "n/a": marks.count("n/a"),
                          "items": self.checklist},
        }


def find_project() -> Path:
    """The bundled CUDA example project: ``examples/cuda_project`` of the source checkout, else the copy an
    installed wheel carries (``ascendify/_examples/cuda_project``)."""
    here = Path(__file__).resolve()
    candidates = [base / "examples" / "cuda_project" for base in here.parents]
    candidates.append(here.parents[1] / "_examples" / "cuda_project")
    for cand in candidates:
        if (cand / st.SCRIPT).is_file() and (cand / "models.py").is_file():
            return cand
    raise DemoError("the bundled example project (examples/cuda_project) was not found: not in a source checkout "
                    f"above {here.parents[1]} nor inside the installed package; reinstall ascendify", EXIT_SETUP)


def resolve_target(device: str) -> tuple[str, str]:
    """``(target, why)``: ``npu`` (a real Ascend NPU), ``cuda`` or ``emulated``."""
    from ascendify import devices

    if device in ("auto", "npu") and devices.torch_npu_installed() and devices.is_npu_available():
        return "npu", "an Ascend NPU is present: every NPU step runs on it"
    if device == "npu":
        return "emulated", "no Ascend NPU here: the emulated NPU stands in (its speed is the host's)"
    if device in ("auto", "cuda") and shutil.which("nvidia-smi") and devices.is_cuda_available():
        return "cuda", ("a CUDA GPU is present and no Ascend NPU: the original runs on the GPU; the migrated copy "
                        "needs an NPU")
    if device == "cuda":
        raise DemoError("--device cuda: no CUDA GPU is usable here (try --device auto)")
    if device == "cpu":
        return "emulated", "--device cpu: the host only, the NPU side on the emulated NPU"
    return "emulated", "no Ascend NPU or GPU here: the emulated NPU (on the host CPU) stands in, at host speed"


def prepare_out(out: Path, force: bool) -> None:
    """Refuse a non-empty folder that no earlier demo wrote (unless ``force``); clear an earlier demo's outputs."""
    if out.exists() and not out.is_dir():
        raise DemoError(f"{out}: exists and is not a folder")
    if out.is_dir():
        entries = [p.name for p in out.iterdir()]
        if entries and MARKER not in entries and not force:
            raise DemoError(f"{out}: not empty and not written by ascendify demo ({', '.join(sorted(entries)[:5])}"
                            f"{', ...' if len(entries) > 5 else ''}); choose another --out or add --force")
        for name in OWNED:
            p = out / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
        from ascendify import __version__
        from ascendify.fileio import write_atomic

        write_atomic(out / MARKER, f"written by ascendify {__version__} demo; safe to delete\n")
    except OSError as e:
        raise DemoError(f"{out}: cannot write here ({e.strerror or e})", EXIT_SETUP) from None


class _Progress:
    def __init__(self, stream: TextIO | None, total: int):
        self.stream, self.total, self.done = stream, total, 0
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        if self.stream is not None:
            print(f"ascendify demo: {text}", file=self.stream, flush=True)

    def job(self, job: Job) -> None:
        if job.skipped:
            state = job.skipped
        elif job.timed_out:
            state = "timed out"
        else:
            state = f"exit {job.returncode}"
        self.say(f"  {job.name}: {state} ({job.seconds:.1f} s)")

    def step(self, res: st.StepResult) -> None:
        self.done += 1
        head = res.headline if len(res.headline) <= 90 else res.headline[:89] + "…"
        self.say(f"[{self.done}/{self.total}] {res.id}: {res.status} ({time.monotonic() - self.t0:.0f} s) {head}")


def run_demo(opts: DemoOptions) -> DemoResult:
    """Run the demo into ``opts.out``; raises :class:`DemoError` when it cannot start."""
    t0, cpu0 = time.monotonic(), _children_cpu()
    bad = sorted(set(opts.skip) - set(st.STEP_IDS))
    if bad:
        raise DemoError(f"--skip {', '.join(bad)}: unknown step (steps: {', '.join(st.STEP_IDS)})")
    project = find_project()
    target, why = resolve_target(opts.device)
    out = opts.out.resolve()
    prepare_out(out, opts.force)
    ctx = st.Context(out=out, project=project, target=target, target_reason=why,
                     sizes=st.QUICK if opts.quick else st.DEFAULT, lanes=opts.lanes, skip=frozenset(opts.skip))
    (out / "train").mkdir(exist_ok=True)
    prog = _Progress(opts.progress, len(st.ALL_STEPS))
    prog.say(f"{st.TARGET_LABEL[target]}: {why}")
    prog.say(f"{'quick' if opts.quick else 'default'} sizes, {opts.lanes} processes at a time; output in {out}")

    jobs = st.build_jobs(ctx)
    results: dict[str, st.StepResult] = {}
    readers = {"doctor": st.read_doctor, "migrate": st.read_migrate, "train": st.read_train, "bench": st.read_bench}

    def step_jobs(step: str) -> list[Job]:
        return [j for j in jobs if j.step == step]

    def finished(step: str) -> bool:
        return all(j.skipped or j.returncode is not None for j in step_jobs(step))

    def read_ready(_job: Job | None = None) -> None:
        if _job is not None and not (_job.skipped and _job.skipped.startswith("skipped")):
            prog.job(_job)
        for step in st.STEP_IDS:
            if step in results or not finished(step):
                continue
            if step == "compare":
                if "train" not in results:
                    continue
                res = _safely(step, lambda: st.read_compare(ctx, step_jobs("compare"), results["train"]))
            else:
                res = _safely(step, lambda s=step: readers[s](ctx, step_jobs(s)))
            results[step] = res
            prog.step(res)

    run_jobs(jobs, lanes=opts.lanes, log_dir=out / "logs", on_done=read_ready)
    read_ready()
    ordered = {s: results[s] for s in st.STEP_IDS}

    from ascendify.demo import checklist as cl

    t_check = time.monotonic()
    items = cl.evaluate(ordered, target)
    marks = [i["mark"] for i in items]
    ordered["checklist"] = st.StepResult(
        "checklist", status="fail" if "✗" in marks else "ok", seconds=time.monotonic() - t_check,
        headline=f"{marks.count('✓')} ✓, {marks.count('✗')} ✗, {marks.count('n/a')} not applicable "
                 f"of {len(marks)} items")
    prog.step(ordered["checklist"])
    ordered["report"] = st.StepResult("report", status="ok", headline="report.html and demo.json",
                                      files=["report.html", "demo.json"])
    result = DemoResult(out=out, target=target, target_reason=why, quick=opts.quick, steps=ordered,
                        checklist=items, seconds=0.0, cpu_seconds=0.0, lanes=opts.lanes, project=project)
    t_rep = time.monotonic()
    write_outputs(result, t0, cpu0, t_rep)
    prog.step(ordered["report"])
    return result


def _children_cpu() -> float:
    import resource

    self_ = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime


def _safely(step: str, fn) -> st.StepResult:
    """A reader that raises is the step's error, not the demo's end."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        import traceback

        return st.StepResult(step, status="error", headline=f"reading the {step} outputs failed: {e}",
                             error=traceback.format_exc())


def write_outputs(result: DemoResult, t0: float, cpu0: float, t_rep: float) -> None:
    """``report.html`` and ``demo.json`` (the report's time is measured up to the HTML, then both are written)."""
    from ascendify import report
    from ascendify.demo import render
    from ascendify.fileio import write_atomic

    png = render.loss_png(result)  # the training curves as a file of their own too
    if png:
        write_atomic(result.out / "train" / "loss.png", png, mode=0o644)
        result.steps["train"].files.append("train/loss.png")
    result.seconds = time.monotonic() - t0  # shown in the page: everything but drawing the page itself
    result.cpu_seconds = _children_cpu() - cpu0
    page = render.html_report(result)
    result.steps["report"].seconds = time.monotonic() - t_rep
    result.seconds = time.monotonic() - t0
    result.cpu_seconds = _children_cpu() - cpu0
    page.write(result.out / "report.html")
    os.chmod(result.out / "report.html", 0o644)
    report.write_json(result.out / "demo.json", result.to_dict())


def print_summary(result: DemoResult, file: TextIO | None = None, width: int | None = None) -> None:
    """The terminal summary: one line per step (status, time, headline), the checklist, the verdict."""
    from ascendify.demo import render

    print(render.summary_text(result, width=width), file=file or sys.stdout)
