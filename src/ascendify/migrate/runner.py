"""One ``ascendify migrate`` run, from a checked request to the exit status (the front-end,
``ascendify/commands/migrate.py``, parses the command line, checks it and calls :func:`migrate`).

    plan the files (files.plan)          -> nothing to convert, two inputs onto one output: MigrateError (usage)
    lock the output and report folders   -> another run holds them, a foreign output: MigrateError (usage)
    mark the output incomplete, keep hand edits (-o)
    convert every file (files.run_tasks) -> swap the conversions in (--inplace), mark the output complete (-o);
                                            Ctrl-C / SIGTERM and a full disk leave the input as it was or the
                                            output marked incomplete, and say which
    build and write the report, print the JSON or the diff, the summary and the next steps

Torch is never imported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ascendify import report as shared
from ascendify.core.fileio import OutputLocked, folder_problem, output_lock

from . import files, handedits
from .engine import Options
from .files import OUTPUT_MARKER
from .native import NATIVE_SUFFIXES
from .render import build, next_steps, print_summary, write
from .workers import WorkerDied

EXIT_OK, EXIT_CHANGES, EXIT_USAGE, EXIT_SKIPPED, EXIT_IO = 0, 1, 2, 3, 4


class MigrateError(Exception):
    """A run that cannot go on: the message (one line) and the exit status (:data:`EXIT_USAGE` or
    :data:`EXIT_IO`)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Request:
    """What to migrate and how: the command line, checked (paths exist, rules known, folders apart)."""

    paths: tuple[Path, ...]
    output: Path | None = None  # -o OUTDIR
    inplace: bool = False
    diff: bool = False
    check: bool = False
    target: str = "npu"  # npu | portable
    report: Path | None = None  # --report DIR (default with -o: OUTDIR_migration_report)
    jobs: int = 0  # 0: by the tree's size
    select: tuple[str, ...] = ()  # rule IDs or prefixes, as given
    ignore: tuple[str, ...] = ()
    unsafe: bool = False
    force: bool = False
    max_size: int = files.DEFAULT_MAX_BYTES
    json: bool = False  # --format json: the report on stdout
    quiet: bool = False
    verbose: bool = False

    @property
    def mode(self) -> str:
        """What this run does (report.json's "mode"): --check (with --diff too, as black/ruff: print the diff
        and exit 1 when something would change), --diff, --inplace, -o (write), else analyse (nothing written)."""
        if self.check:
            return "check"
        if self.diff:
            return "diff"
        if self.inplace:
            return "inplace"
        return "write" if self.output is not None else "analyse"

    def options(self) -> Options:
        return Options(target=self.target, unsafe=self.unsafe, select=tuple(s.upper() for s in self.select),
                       ignore=tuple(s.upper() for s in self.ignore))


def migrate(req: Request) -> int:
    """Run ``req``; returns the exit status. Raises :class:`MigrateError` for a run that cannot go on."""
    mode = req.mode
    run_mode = "diff" if req.diff else "check" if mode in ("check", "analyse") else mode
    tasks = files.plan(list(req.paths), req.output, run_mode, req.options(), req.max_size)
    jobs = req.jobs if req.jobs > 0 else files.auto_jobs(tasks)
    _check_plan(req, tasks, mode)
    report_dir = req.report
    if report_dir is None and mode == "write":
        report_dir = req.output.parent / f"{req.output.name}_migration_report"
    with _locked(req, mode, report_dir):
        return _convert(req, tasks, mode, jobs, report_dir)


def _check_plan(req: Request, tasks: list, mode: str) -> None:
    """Refuse a plan with nothing to convert, two inputs written to one output file, or an unusable -o folder."""
    if not any((t.src.endswith((".py", ".pyi")) or Path(t.src).suffix.lower() in (".ipynb", *NATIVE_SUFFIXES))
               and not t.problem for t in tasks):
        readable = [t for t in tasks if not t.problem]
        what = "no file at all" if not readable else shared.plural(len(readable), "file") + ", none of them Python"
        if len(readable) < len(tasks):
            what += f" (and {shared.plural(len(tasks) - len(readable), 'folder')} it cannot read: " \
                    f"{', '.join(t.rel for t in tasks if t.problem)})"
        raise MigrateError(f"nothing to convert under {', '.join(map(str, req.paths))}: {what}")
    clash = files.clashes(tasks)
    if clash:
        raise MigrateError(f"two inputs would be written to the same output file: {clash[0]} (convert them "
                           "separately, or pass their common folder)")
    if mode == "write" and (problem := folder_problem(req.output)):
        raise MigrateError(f"-o {req.output}: {problem}")


@contextlib.contextmanager
def _locked(req: Request, mode: str, report_dir: Path | None):
    """One run at a time into an output (and its report): a second one is refused, never mixed in."""
    with contextlib.ExitStack() as held:
        locked: list[Path] = []
        for d in (req.output if mode == "write" else None, report_dir):
            if d is None or d.resolve() in locked:  # --report OUTDIR: one folder, one lock
                continue
            locked.append(d.resolve())
            try:
                held.enter_context(output_lock(d, "ascendify migrate"))
            except OutputLocked as e:
                raise MigrateError(str(e)) from None
            except OSError as e:
                raise MigrateError(f"{d}: cannot write here ({e.strerror or e})") from None
            if d is req.output and not req.force:  # checked with the lock held (before the report folder)
                foreign = files.foreign_output(req.output)
                if foreign:
                    raise MigrateError(f"the output folder {req.output} is not empty and was not written by "
                                       f"ascendify migrate (it holds {foreign}; no {OUTPUT_MARKER} marker): "
                                       "choose a new folder, or pass --force")
        yield


def _io_error(msg: str) -> MigrateError:
    return MigrateError(msg, EXIT_IO)


def _convert(req: Request, tasks: list, mode: str, jobs: int, report_dir: Path | None) -> int:
    """Convert ``tasks`` (the output and report folders are locked), write the output, the report, the summary."""
    inputs = [str(p) for p in req.paths]
    # the summary goes to stdout, unless stdout carries the diff or the JSON
    console = shared.console(stderr=req.diff or req.json)
    planned, kept = tasks, {}
    if mode == "write":
        tasks, kept = _prepare_output(req, tasks, inputs, console)
    t0 = time.perf_counter()
    pairs = _run(req, tasks, mode, jobs, planned, kept, inputs, console)
    results = [r for r, _ in pairs]
    report = build(results, target=req.target, seconds=time.perf_counter() - t0, inputs=inputs,
                   output=str(req.output) if req.output else None,
                   options={"mode": mode, "unsafe": req.unsafe, "select": list(req.select),
                            "ignore": list(req.ignore), "jobs": jobs})
    if report_dir is not None:
        try:
            write(report, results, report_dir)
        except OSError as e:
            raise _io_error(f"cannot write the report {e.filename or report_dir}: {e.strerror or e}") from None
    _show(req, report, pairs, mode, report_dir, console)
    t = report["totals"]
    if req.check and t["changed"]:
        return EXIT_CHANGES
    if t["skipped"]:
        return EXIT_SKIPPED
    return EXIT_OK


def _prepare_output(req: Request, tasks: list, inputs: list[str], console) -> tuple[list, dict]:
    """-o: say that an interrupted run is completed, keep hand edits (unless --force), and mark the output
    incomplete before anything is written. Returns the tasks left to run and the kept files."""
    out = req.output
    kept: dict = {}
    planned = tasks
    if files.marker_incomplete(out):
        console.print(f"{out} was left incomplete by an interrupted run: this run completes it",
                      highlight=False, soft_wrap=True)
    if not req.force:  # hand edits in an earlier output are kept, never overwritten
        tasks, kept = handedits.plan_keeps(out, tasks)
    else:
        handedits.drop_stale_beside(tasks)
    try:  # before anything is written: an output this run leaves half-written says so
        files.write_marker(out, target=req.target, inputs=inputs, complete=False,
                           files=handedits.untouched(out, planned, kept))
    except OSError as e:
        raise _io_error(f"cannot write {e.filename or out}: {e.strerror or e}") from None
    return tasks, kept


class _Terminated(SystemExit):
    """SIGTERM during the conversion: the workers are stopped and the output marked, then the exit (143)."""


def _run(req: Request, tasks: list, mode: str, jobs: int, planned: list, kept: dict, inputs: list[str],
         console) -> list:
    """Convert every file, swap the conversions in (--inplace) or mark the output complete (-o); returns
    (result, diff) pairs. Ctrl-C and SIGTERM leave the input as it was or the output marked incomplete, and a
    write error says what was written."""
    out = req.output
    progress = _progress_bar(console, tasks, req.quiet)
    rewritten: list[str] = []  # --inplace: the inputs already replaced by their conversion

    me = os.getpid()

    def terminated(signum, frame):  # SIGTERM (`timeout`, a job scheduler) ends the run as Ctrl-C does
        if os.getpid() != me:  # a worker forked with this handler, stopped before its own start replaced it:
            os._exit(128 + signum)  # raised there (in an after-fork hook) the exception is swallowed, and the
        raise _Terminated(128 + signum)  # worker would then wait for work forever, and the run with it

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread: SIGTERM keeps its action
        previous = None
    try:
        pairs = files.run_tasks(tasks, jobs, progress)
        results = [r for r, _ in pairs]
        if mode == "inplace":
            files.swap_inplace(results, tasks, rewritten)
        if mode == "write":
            handedits.mark_kept(results, kept)
            files.write_marker(out, target=req.target, inputs=inputs,
                               files=handedits.records(out, planned, kept, results))
    except (KeyboardInterrupt, _Terminated):
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.stop()
        _say_interrupted(mode, tasks, rewritten, out)
        raise
    except OSError as e:
        if progress is not None:
            progress.stop()
        raise _io_error(_write_failed(e, mode, tasks, rewritten, out)) from None
    except WorkerDied as e:  # the out-of-memory killer, a signal from outside: the other workers were stopped
        if progress is not None:
            progress.stop()
        raise _io_error(_worker_died(e, mode, tasks, out)) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.stop()
    return pairs


def _say_interrupted(mode: str, tasks: list, rewritten: list[str], out: Path | None) -> None:
    if mode == "inplace" and not rewritten:
        files.discard_inplace(tasks)
        print("ascendify migrate: interrupted before any file was rewritten: the input is as it was",
              file=sys.stderr)
    elif mode == "inplace":
        print(f"ascendify migrate: interrupted after the conversion was swapped in: "
              f"{shared.plural(len(rewritten), 'file')} rewritten", file=sys.stderr)
    elif mode == "write":
        print(f"ascendify migrate: interrupted: {out} is incomplete (its marker says so); run the same "
              "command again to complete it", file=sys.stderr)


def _write_failed(e: OSError, mode: str, tasks: list, rewritten: list[str], out: Path | None) -> str:
    """The message for a write that failed during the conversion (--inplace: the inputs are put back first)."""
    where = f"cannot write {e.filename}" if e.filename else "cannot write"
    msg = f"{where}: {e.strerror or e}"
    if mode == "write":
        msg += f"; {out} is incomplete (its marker says so): run the same command again once it can be written"
    elif mode == "inplace":
        files.discard_inplace(tasks)
        msg += ("; no input file was rewritten" if not rewritten else
                f"; {shared.plural(len(rewritten), 'file')} had been rewritten already: " + ", ".join(rewritten))
    return msg


def _worker_died(e: WorkerDied, mode: str, tasks: list, out: Path | None) -> str:
    msg = f"{e} (out of memory?)"
    if mode == "write":
        msg += f"; {out} is incomplete (its marker says so): run the same command again (--jobs 1: no worker)"
    elif mode == "inplace":
        files.discard_inplace(tasks)
        msg += "; no input file was rewritten"
    return msg


def _show(req: Request, report: dict, pairs: list, mode: str, report_dir: Path | None, console) -> None:
    """The JSON or the diff on stdout; the summary, the skipped and kept files and the next steps after them."""
    results = [r for r, _ in pairs]
    if req.json:
        if req.diff:  # the diffs go inside the JSON, so stdout stays one JSON document
            for entry, (_, d) in zip(report["files"], pairs, strict=True):
                entry["diff"] = d or ""
        sys.stdout.write(shared.dumps_json(report))
        sys.stdout.flush()
    elif req.diff:
        for _, d in pairs:
            if d:
                sys.stdout.write(d)
    if req.quiet:
        return
    print_summary(report, results, console, verbose=req.verbose)  # on stderr after the JSON or the diff
    for r in results:
        if r.status == "skipped":
            copied = " (copied unchanged)" if r.copied else ""
            console.print(f"[yellow]skipped[/] {r.path}: {r.reason}{copied}", highlight=False)
        elif r.status == "kept":
            console.print(f"[cyan]kept[/] {r.path}: {r.reason}", highlight=False)
    for line in next_steps(report, results, mode=mode, output=req.output, inputs=list(req.paths),
                           report_dir=report_dir):
        console.print(line, highlight=False, soft_wrap=True)  # commands and paths stay copy-pasteable


class _Bar:
    """The terminal's progress bar, started at the first news (after the worker processes are started: no
    thread of its own runs while they are forked)."""

    def __init__(self, console, what: str):
        self.console, self.what, self.bar, self.task = console, what, None, None

    def __call__(self, done: float, total: float) -> None:
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(console=self.console, transient=True)
            self.task = self.bar.add_task(f"migrating {self.what}", total=total)
            self.bar.start()
        self.bar.update(self.task, completed=done)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _progress_bar(console, tasks: list, quiet: bool) -> _Bar | None:
    """A progress bar on a terminal, for a tree of more than 20 files or a large file (a second or more)."""
    if quiet or not console.is_terminal:
        return None
    if len(tasks) <= 20 and not any(_bytes(t.src) > files.BIG_FILE for t in tasks):
        return None
    return _Bar(console, Path(tasks[0].rel).name if len(tasks) == 1 else shared.plural(len(tasks), "file"))


def _bytes(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
