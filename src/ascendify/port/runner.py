"""The pipeline of ``ascendify port`` (and of ``ascendify demo``, which is port on the bundled example).

:func:`run_port` resolves the target, prepares the report folder, runs every step's child processes (two at a
time on a 2-core machine), reads their outputs back, evaluates the checklist, and writes ``report.html`` and
``report.json`` (the demo: ``demo.json``). The report is written even when a step crashed (the failure is shown
in it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ascendify.port import steps as st
from ascendify.port.jobs import Job, default_lanes, run_jobs

MARKER = ".ascendify-port"
OLD_MARKERS = (".ascendify-demo",)  # what earlier versions left in a demo folder
OWNED = ("doctor", "migrate", "runs", "train", "compare", "bench", "logs", "report.html", "report.json",
         "demo.json", MARKER, *OLD_MARKERS)
EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_STEP_FAILED, EXIT_SETUP, EXIT_NOT_PROVEN = 0, 1, 2, 3, 4, 5


class PortError(Exception):
    """A pipeline that cannot start: ``code`` is the exit status (2 usage, 3/4 setup)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


@dataclass
class PortOptions:
    project: Path  # the user's CUDA project
    command: list[str]  # the user's own command, paths relative to the project
    out: Path | None = None  # the migrated copy (default: PROJECT-npu beside the project)
    report: Path | None = None  # the report folder (default: OUT-report beside OUT)
    to: str = "npu"
    steps: int = 10
    seconds: float | None = None
    device: str = "auto"  # auto | npu | cuda | cpu
    skip: frozenset[str] = frozenset()
    force: bool = False
    seed: int = 1234
    lanes: int = field(default_factory=default_lanes)
    progress: TextIO | None = None  # where progress lines go (None: nowhere)
    verb: str = "port"  # "demo" when the demo runs it: names and file names follow
    quick: bool = False  # the demo's sizes (shown in its report)
    model: str | None = None  # --model: which discovered model to compare and bench, or FILE.py:FACTORY(...)
    overflow: bool = False  # --overflow: the migrated run under the overflow watch


@dataclass
class PortResult:
    out: Path  # the report folder
    target: str
    target_reason: str
    quick: bool
    steps: dict[str, st.StepResult]
    checklist: list[dict[str, Any]]
    seconds: float
    cpu_seconds: float
    lanes: int
    project: Path | None = None  # the user's CUDA project
    migrated: Path | None = None
    command: list[str] = field(default_factory=list)
    verb: str = "port"
    entry: str | None = None
    interrupted: bool = False  # Ctrl-C: the report holds what was proven up to there

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if any(s.status == "error" for s in self.steps.values()):
            return EXIT_SETUP if self.verb == "port" else EXIT_STEP_FAILED
        if self._findings():
            return EXIT_FINDING
        if self.gaps:
            return EXIT_NOT_PROVEN
        return EXIT_OK

    @property
    def gaps(self) -> list[str]:
        """What this run did not prove (:mod:`ascendify.port.proof`); empty: proven."""
        from ascendify.port import proof

        return proof.gaps(self.steps)

    def _findings(self) -> list[str]:
        """The findings, as sentences: failed steps' headlines, the migrated copy's loss going NaN where the
        original's stays finite, failed checklist items."""
        from ascendify.port import proof

        out = [s.headline for s in self.steps.values() if s.status == "fail" and s.id in st.STEP_IDS]
        nan = proof.nan_on_target_only(self.steps)
        if nan:
            out.append(nan)
        if not out:
            out = [i["id"] for i in self.checklist if i["mark"] == "✗"]
        return out

    @property
    def verdict(self) -> tuple[str, str]:
        """``(status, sentence)`` for the whole run."""
        crashed = [s.id for s in self.steps.values() if s.status == "error"]
        if self.interrupted:
            done = [s.id for s in self.steps.values() if s.status in ("ok", "warn", "fail") and s.id in st.STEP_IDS
                    and not any((j.skipped or "").startswith("interrupted") for j in s.jobs)]
            return "error", ("interrupted (Ctrl-C): the children were stopped; this report holds what was proven "
                             f"up to there ({', '.join(done) or 'no step'} finished)")
        train = self.steps.get("train")
        if train is not None and "golden" in (train.facts.get("failed") or []):
            return "error", ("the original program failed under ascendify run --to cpu, so nothing could be "
                             "compared: not the port's fault (see the train step; the migrated copy is kept)")
        if crashed:
            return "error", f"{', '.join(crashed)} failed to run: see the report (the other steps ran)"
        where = st.TARGET_LABEL[self.target]
        findings = self._findings()
        if findings:
            return "fail", f"findings on the {where}: {'; '.join(findings)}"
        gaps = self.gaps
        if gaps:
            return "not proven", "not proven: " + "; ".join(gaps)
        skipped = [s.id for s in self.steps.values() if s.status == "skip" and s.id in st.STEP_IDS]
        tail = f" ({', '.join(skipped)} skipped)" if skipped else ""
        cv = (self.steps["compare"].facts.get("curves") or {}) if "compare" in self.steps else {}
        if cv.get("constant"):
            tail += f"; the loss is {cv['constant']} at every step, so its curves say nothing: the lockstep decides"
        from ascendify.port import proof

        return "ok", (f"proven: the migrated project runs on the {where} and computes what the original computes "
                      f"({proof.evidence(self.steps)}){tail}")

    def to_dict(self) -> dict[str, Any]:
        from ascendify import __version__

        status, sentence = self.verdict
        marks = [i["mark"] for i in self.checklist]
        out = {
            "schema": f"ascendify.{self.verb}/1",
            "tool": f"ascendify {__version__}",
            "out": str(self.out),
            "project": str(self.project) if self.project else None,
            "migrated": str(self.migrated) if self.migrated else None,
            "command": self.command,
            "target": self.target,
            "target_label": st.TARGET_LABEL[self.target],
            "target_reason": self.target_reason,
            "sizes": "quick" if self.quick else "default",
            "lanes": self.lanes,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "verdict": {"status": status, "text": sentence, "exit_code": self.exit_code},
            "interrupted": self.interrupted,
            "steps": [s.to_dict() for s in self.steps.values()],
            "checklist": {"pass": marks.count("✓"), "fail": marks.count("✗"), "n/a": marks.count("n/a"),
                          "items": self.checklist},
        }
        overflow = self.steps["train"].facts.get("overflow") if "train" in self.steps else None
        if overflow:  # --overflow only: the migrated run's overflow check (also in the train step's facts)
            out["overflow"] = overflow
        return out


def resolve_target(device: str) -> tuple[str, str]:
    """``(target, why)``: ``npu`` (a real Ascend NPU), ``cuda`` or ``emulated``."""
    from ascendify.core import devices

    if device in ("auto", "npu") and devices.torch_npu_installed() and devices.is_npu_available():
        return "npu", "an Ascend NPU is present: every NPU step runs on it"
    if device == "npu":
        return "emulated", "no Ascend NPU here: the emulated NPU stands in (its speed is the host's)"
    if device in ("auto", "cuda") and shutil.which("nvidia-smi") and devices.is_cuda_available():
        return "cuda", ("a CUDA GPU is present and no Ascend NPU: the original runs on the GPU; the migrated copy "
                        "needs an NPU")
    if device == "cuda":
        raise PortError("--device cuda: no CUDA GPU is usable here (try --device auto)")
    if device == "cpu":
        return "emulated", "--device cpu: the host only, the NPU side on the emulated NPU"
    return "emulated", "no Ascend NPU or GPU here: the emulated NPU (on the host CPU) stands in, at host speed"


def prepare_out(out: Path, force: bool, verb: str = "port") -> None:
    """Refuse a non-empty folder that ascendify did not write (unless ``force``); clear an earlier run's
    outputs."""
    if out.exists() and not out.is_dir():
        raise PortError(f"{out}: exists and is not a folder")
    if out.is_dir():
        entries = [p.name for p in out.iterdir()]
        ours = MARKER in entries or any(m in entries for m in OLD_MARKERS)
        if entries and not ours and not force:
            raise PortError(f"{out}: not empty and not written by ascendify {verb} ({', '.join(sorted(entries)[:5])}"
                            f"{', ...' if len(entries) > 5 else ''}); choose another folder or add --force")
        for name in OWNED:
            p = out / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
        from ascendify import __version__
        from ascendify.core.fileio import write_atomic

        write_atomic(out / MARKER, f"written by ascendify {__version__} {verb}; safe to delete\n")
    except OSError as e:
        raise PortError(f"{out}: cannot write here ({e.strerror or e})", EXIT_SETUP) from None


def check_migrated_out(out: Path, project: Path, force: bool) -> bool:
    """Whether migrate must be told ``--force`` for ``out``; raises :class:`PortError` for a folder it must not
    touch (the project itself, inside it, a file, or a non-empty folder ascendify did not write)."""
    from ascendify.migrate.runner import OUTPUT_MARKER

    p, o = project.resolve(), out.resolve()
    if o == p or p in o.parents:
        raise PortError(f"{out}: the migrated copy cannot be the project or inside it ({project}); choose another "
                        "-o")
    if o.exists() and not o.is_dir():
        raise PortError(f"{out}: exists and is not a folder")
    if o.is_dir() and any(o.iterdir()) and not (o / OUTPUT_MARKER).exists():
        if not force:
            raise PortError(f"{out}: not empty and not written by ascendify; choose another -o or add --force")
        return True
    return force


class _Progress:
    """Progress lines on stderr, folded to the terminal: each step once, numbered as in the report's table
    (``[2/7] migrate``, whichever finishes first), and while the training runs go on, their steps so far."""

    EVERY = 30.0  # seconds between two "still running" lines

    def __init__(self, stream: TextIO | None, total: int, verb: str = "port", runs: Path | None = None):
        self.stream, self.total, self.verb, self.runs = stream, total, verb, runs
        self.t0 = time.monotonic()
        self.announced: set[str] = set()
        self.next_wait = self.t0 + 2 * self.EVERY

    def say(self, text: str) -> None:
        if self.stream is not None:
            from ascendify.report.tables import fold

            print(fold(f"ascendify {self.verb}: {text}"), file=self.stream, flush=True)

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
        try:
            why = json.loads((self.runs / job.name.removeprefix("train-") / "observe.json").read_text()).get("stopped")
        except (OSError, ValueError, AttributeError):
            return None
        return why if isinstance(why, str) and why != "ended" else None

    def step(self, res: st.StepResult) -> None:
        if res.id in self.announced:  # read again after Ctrl-C: said once
            return
        self.announced.add(res.id)
        n = st.ALL_STEPS.index(res.id) + 1 if res.id in st.ALL_STEPS else len(self.announced)
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


def check_factory(project: Path, spec: str) -> None:
    """``--model FILE.py:FACTORY(...)``: FILE is in the project, FACTORY's name is defined at its top level, and
    importing FILE runs no program (a script without a ``__main__`` guard would start training when the model
    is built). Raises :class:`PortError` saying which."""
    import ast

    file, expr = spec.split(".py:", 1)
    path = project / f"{file}.py"
    if not path.is_file():
        raise PortError(f"--model {spec}: {file}.py is not in {project}")
    name = expr.split("(", 1)[0].split(".", 1)[0].strip()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except SyntaxError as e:
        raise PortError(f"--model {spec}: {file}.py does not parse ({e.msg}, line {e.lineno})") from None
    defined: set[str] = set()
    runs: list[int] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        elif not isinstance(node, ast.If):
            runs.append(node.lineno)
    if name not in defined:
        raise PortError(f"--model {spec}: {file}.py defines no {name!r} at its top level")
    if runs:
        raise PortError(f"--model {spec}: importing {file}.py runs the program (top-level code at line "
                        f"{runs[0]}, no `if __name__ == '__main__':` guard), so the model cannot be built from it; "
                        "name a discovered model instead (--model NAME or CLASS)")


def split_assignments(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """The ``NAME=VALUE`` words a shell command begins with (the environment of both runs), and the rest.

    >>> split_assignments(["PYTHONPATH=.", "CUDA_VISIBLE_DEVICES=0", "python", "t.py", "--x=1"])
    ({'PYTHONPATH': '.', 'CUDA_VISIBLE_DEVICES': '0'}, ['python', 't.py', '--x=1'])
    """
    import re

    env: dict[str, str] = {}
    i = 0
    while i < len(command) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[i]):
        k, v = command[i].split("=", 1)
        env[k] = v
        i += 1
    return env, command[i:]


def entry_script(command: list[str]) -> str | None:
    """The script the command runs (relative to the project), when it names one.

    >>> entry_script(["python", "-u", "train.py", "--lr", "3"]), entry_script(["-m", "pkg.train"])
    ('train.py', None)
    >>> entry_script(["torchrun", "--nproc-per-node", "2", "main.py", "--cuda"])
    'main.py'
    """
    from ascendify.program import Program, ProgramError

    try:
        prog = Program.parse(command, check=False)
    except (ProgramError, ImportError):
        return None
    return prog.path


def run_port(opts: PortOptions) -> PortResult:
    """Run the pipeline; raises :class:`PortError` when it cannot start."""
    t0, cpu0 = time.monotonic(), _children_cpu()
    bad = sorted(set(opts.skip) - set(st.STEP_IDS))
    if bad:
        raise PortError(f"--skip {', '.join(bad)}: unknown step (steps: {', '.join(st.STEP_IDS)})")
    project = opts.project.resolve()
    if not project.is_dir():
        raise PortError(f"{opts.project}: no such folder (give the project's folder, then -- and its command)")
    if not opts.command:
        raise PortError("no command: give the project's own command after --, e.g. -- python train.py --lr 3e-4")
    if opts.steps < 1:
        raise PortError("--steps must be at least 1")
    if opts.seconds is not None and not 0 < opts.seconds < float("inf"):
        raise PortError(f"--time-budget must be a number of seconds above 0, not {opts.seconds:g}")
    from ascendify.program import Program, ProgramError

    env, command = split_assignments(list(opts.command))
    if not command:
        raise PortError("the command only sets variables: give the program after them, e.g. -- NAME=1 python "
                        "train.py")
    try:
        prog = Program.parse(command, check=False)
    except ProgramError as e:
        raise PortError(f"the command: {e}") from None
    if opts.model and ".py:" in opts.model:
        check_factory(project, opts.model)
    if prog.path and not (project / prog.path).is_file():
        raise PortError(f"the command runs {prog.path}, which is not in {opts.project} (paths in the command are "
                        "relative to the project)")
    migrated = (opts.out or project.parent / f"{project.name}-npu").resolve()
    report_dir = (opts.report or migrated.parent / f"{migrated.name}-report").resolve()
    force_migrate = check_migrated_out(migrated, project, opts.force)
    if report_dir == migrated or migrated in report_dir.parents:
        raise PortError(f"--report {report_dir}: the report folder cannot be the migrated copy ({migrated}) nor "
                        "inside it; choose another --report")
    if report_dir == project or project in report_dir.parents:
        raise PortError(f"{report_dir}: the report folder cannot be inside the project; choose another --report")
    target, why = resolve_target(opts.device)
    prepare_out(report_dir, opts.force, opts.verb)
    ctx = st.Context(out=report_dir, project=project, migrated=migrated, command=command, target=target,
                     target_reason=why, lanes=opts.lanes, steps=opts.steps, seconds=opts.seconds, to=opts.to,
                     seed=opts.seed, skip=frozenset(opts.skip), title=opts.verb, force_migrate=force_migrate,
                     entry=prog.path, model=opts.model, env=env, overflow=opts.overflow)
    (report_dir / "runs").mkdir(exist_ok=True)
    prog_ = _Progress(opts.progress, len(st.ALL_STEPS), opts.verb, report_dir / "runs")
    prog_.say(f"{st.TARGET_LABEL[target]}: {why}")
    prog_.say(f"{opts.steps} steps a run, {opts.lanes} processes at a time; report in {report_dir}")

    jobs = st.build_jobs(ctx)
    results: dict[str, st.StepResult] = {}
    interrupted = False
    readers = {"doctor": st.read_doctor, "migrate": st.read_migrate, "train": st.read_train, "bench": st.read_bench}

    def step_jobs(step: str) -> list[Job]:
        return [j for j in jobs if j.step == step]

    def finished(step: str) -> bool:
        return all(j.skipped or j.returncode is not None for j in step_jobs(step))

    def read_ready(_job: Job | None = None) -> None:
        if _job is not None and not (_job.skipped and _job.skipped.startswith("skipped")):
            prog_.job(_job)
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
            prog_.step(res)

    try:
        run_jobs(jobs, lanes=opts.lanes, log_dir=report_dir / "logs", on_done=read_ready, on_tick=prog_.waiting)
    except KeyboardInterrupt:  # the children are stopped by run_jobs; write what was proven up to here
        interrupted = True
        prog_.say("interrupted: the children are stopped; writing the partial report")
        for j in jobs:
            stopped = j.returncode is None or (j.returncode in (130, -2) or j.returncode < 0) and not j.timed_out
            if not j.skipped and stopped:
                j.skipped = "interrupted (Ctrl-C)"
                j.returncode = None
        results.clear()  # read again: a step read while its children were being stopped is stale
    read_ready()
    for step in st.STEP_IDS:
        results.setdefault(step, st.StepResult(step, status="skip", headline="interrupted"))
    ordered = {s: results[s] for s in st.STEP_IDS}

    from ascendify.port import checklist as cl

    t_check = time.monotonic()
    items = cl.evaluate(ordered, target, flags=frozenset({"--overflow"} if opts.overflow else ()))
    marks = [i["mark"] for i in items]
    ordered["checklist"] = st.StepResult(
        "checklist", status="fail" if "✗" in marks else "ok", seconds=time.monotonic() - t_check,
        headline=f"{marks.count('✓')} ✓, {marks.count('✗')} ✗, {marks.count('n/a')} not applicable "
                 f"of {len(marks)} items")
    prog_.step(ordered["checklist"])
    json_name = "demo.json" if opts.verb == "demo" else "report.json"
    ordered["report"] = st.StepResult("report", status="ok", headline=f"report.html and {json_name}",
                                      files=["report.html", json_name])
    result = PortResult(out=report_dir, target=target, target_reason=why, quick=opts.quick, steps=ordered,
                        checklist=items, seconds=0.0, cpu_seconds=0.0, lanes=opts.lanes, project=project,
                        migrated=migrated, command=list(opts.command), verb=opts.verb, entry=prog.path,
                        interrupted=interrupted)
    t_rep = time.monotonic()
    write_outputs(result, t0, cpu0, t_rep)
    prog_.step(ordered["report"])
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


def write_outputs(result: PortResult, t0: float, cpu0: float, t_rep: float) -> None:
    """``report.html`` and ``report.json`` (the demo: ``demo.json``); the report's time is measured up to the
    HTML, then both are written."""
    from ascendify import report
    from ascendify.core.fileio import write_atomic
    from ascendify.port import render

    png = render.loss_png(result)  # the training curves as a file of their own too
    if png:
        write_atomic(result.out / "runs" / "loss.png", png, mode=0o644)
        result.steps["train"].files.append("runs/loss.png")
    result.seconds = time.monotonic() - t0  # shown in the page: everything but drawing the page itself
    result.cpu_seconds = _children_cpu() - cpu0
    page = render.html_report(result)
    result.steps["report"].seconds = time.monotonic() - t_rep
    result.seconds = time.monotonic() - t0
    result.cpu_seconds = _children_cpu() - cpu0
    page.write(result.out / "report.html")
    os.chmod(result.out / "report.html", 0o644)
    report.write_json(result.out / ("demo.json" if result.verb == "demo" else "report.json"), result.to_dict())


def print_summary(result: PortResult, file: TextIO | None = None, width: int | None = None) -> None:
    """The terminal summary: one line per step (status, time, headline), the checklist, the verdict."""
    from ascendify.port import render

    print(render.summary_text(result, width=width), file=file or sys.stdout)
