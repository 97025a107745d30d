"""``ascendify migrate``: rewrite CUDA PyTorch code for Ascend NPUs (or device-agnostic PyTorch), with a report.

Nothing heavy is imported at module level (no torch, ever, on this path).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

HELP = "rewrite CUDA PyTorch code for Ascend NPUs (torch_npu) or device-agnostic PyTorch, with a full report"
DESCRIPTION = """\
Rewrite CUDA PyTorch code for Ascend NPUs (--to npu) or for device-agnostic PyTorch (--to portable).

Without -o/--inplace/--diff the run only analyses (nothing is written except --report).

examples:
  # convert a tree (report in out/src_npu_migration_report)
  ascendify migrate src/ -o out/src_npu
  ascendify migrate train.py --diff                     show what would change
  # exit 1 when changes are needed (CI)
  ascendify migrate src/ --check
  # device-agnostic code that runs everywhere
  ascendify migrate src/ --to portable -o out/portable
  ascendify migrate --explain ASC103                    what a rule does

exit codes: 0 ok; 1 changes needed (--check); 2 usage error (also: no Python file under PATH, or a
non-empty OUTDIR that ascendify did not write, without --force); 3 some files were skipped (bad input);
4 an output file could not be written (files already written are complete: writes are atomic)."""

EXIT_OK, EXIT_CHANGES, EXIT_USAGE, EXIT_SKIPPED, EXIT_IO = 0, 1, 2, 3, 4


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="files or directories to convert")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", type=Path, metavar="OUTDIR", help="write the converted tree here")
    out.add_argument("--inplace", action="store_true", help="rewrite the input files in place")
    out.add_argument("--diff", action="store_true", help="print a unified diff; write nothing")
    p.add_argument("--to", dest="target", choices=("npu", "portable"), default="npu",
                   help="npu: torch_npu code (default); portable: device-agnostic PyTorch")
    p.add_argument("--check", action="store_true", help="exit 1 when changes are needed; write nothing")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="report folder (default with -o: OUTDIR_migration_report beside the output)")
    p.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="parallel processes (default 0: one per CPU, fewer for a small tree)")
    p.add_argument("--select", action="append", default=[], metavar="RULE[,RULE]",
                   help="only these rules (IDs or prefixes, comma-separated or repeated: --select ASC1,ASC203)")
    p.add_argument("--ignore", action="append", default=[], metavar="RULE[,RULE]",
                   help="skip these rules (IDs or prefixes)")
    p.add_argument("--unsafe", action="store_true", help="also apply unsafe fixes")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty OUTDIR that is not an earlier ascendify migrate output")
    p.add_argument("--max-size", type=_size, default=5 * 1024 * 1024, metavar="BYTES",
                   help="skip (and copy) Python files larger than this (bytes; 512K, 5M, 1G also read)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="json: print the report (report.json's content) on stdout; with --diff each file's "
                        "diff is in it (files[].diff)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary table")
    p.add_argument("-v", "--verbose", action="store_true", help="list every file in the summary")
    p.add_argument("--explain", metavar="RULE", help="print a rule's documentation and exit")
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")


def _size(text: str) -> int:
    """``--max-size``: bytes, or with a K, M or G suffix (powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if scale > 1 else t) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (e.g. 5000000 or 5M)") from None


def _usage(msg: str) -> int:
    print(f"ascendify migrate: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    from ascendify.migrate.rules import RULES

    if args.explain:
        rule = RULES.get(args.explain.upper())
        if rule is None:
            return _usage(f"unknown rule {args.explain!r} (see --list-rules)")
        print(rule.explain())
        return EXIT_OK
    if args.list_rules:
        for r in RULES.values():
            print(f"{r.id}  {r.name:<30} {r.safety:<12} {'/'.join(r.targets):<13} {r.summary}")
        return EXIT_OK
    if not args.paths:
        return _usage("no PATH given")
    for p in args.paths:
        if not p.exists() and not p.is_symlink():
            return _usage(f"{p}: no such file or directory")
    args.select = [x.strip() for v in args.select for x in v.split(",") if x.strip()]
    args.ignore = [x.strip() for v in args.ignore for x in v.split(",") if x.strip()]
    unknown = [s for s in args.select + args.ignore if not any(r.startswith(s.upper()) for r in RULES)]
    if unknown:
        return _usage(f"unknown rule(s): {', '.join(unknown)}")
    if args.output is not None:
        for p in args.paths:
            if p.is_dir() and _inside(args.output, p):
                return _usage(f"the output {args.output} is inside the input {p}: choose another folder")
            if _inside(p, args.output):
                return _usage(f"the input {p} is inside the output {args.output}")
    if args.report is not None:
        for p in args.paths:
            if p.is_dir() and _inside(args.report, p) and not args.inplace:
                return _usage(f"the report folder {args.report} is inside the input {p}")
    if args.max_size is not None and args.max_size < 1:
        return _usage(f"--max-size {args.max_size}: give a size in bytes, 1 or more")
    if args.jobs < 0:
        return _usage(f"--jobs {args.jobs}: give a number of processes, or 0 for one per CPU")
    jobs = args.jobs

    from ascendify import report as shared
    from ascendify.core.fileio import OutputLocked, folder_problem, output_lock
    from ascendify.migrate.engine import Options
    from ascendify.migrate.native import NATIVE_SUFFIXES
    from ascendify.migrate.runner import OUTPUT_MARKER, auto_jobs, clashes, foreign_output, plan

    options = Options(target=args.target, unsafe=args.unsafe, select=tuple(s.upper() for s in args.select),
                      ignore=tuple(s.upper() for s in args.ignore))
    # what this run does (report.json's "mode"): --check (with --diff too, as black/ruff: print the diff and
    # exit 1 when something would change), --diff, --inplace, -o (write), else analyse (nothing written)
    mode = "check" if args.check else "diff" if args.diff else "inplace" if args.inplace else \
        "write" if args.output is not None else "analyse"
    run_mode = "diff" if args.diff else "check" if mode in ("check", "analyse") else mode
    tasks = plan(list(args.paths), args.output, run_mode, options, args.max_size)
    if jobs <= 0:
        jobs = auto_jobs(tasks)
    if not any((t.src.endswith((".py", ".pyi")) or Path(t.src).suffix.lower() in (".ipynb", *NATIVE_SUFFIXES))
               and not t.problem for t in tasks):
        readable = [t for t in tasks if not t.problem]
        what = "no file at all" if not readable else shared.plural(len(readable), "file") + ", none of them Python"
        if len(readable) < len(tasks):
            what += f" (and {shared.plural(len(tasks) - len(readable), 'folder')} it cannot read: " \
                    f"{', '.join(t.rel for t in tasks if t.problem)})"
        return _usage(f"nothing to convert under {', '.join(map(str, args.paths))}: {what}")
    clash = clashes(tasks)
    if clash:
        return _usage(f"two inputs would be written to the same output file: {clash[0]} (convert them "
                      "separately, or pass their common folder)")
    if mode == "write" and (problem := folder_problem(args.output)):
        return _usage(f"-o {args.output}: {problem}")
    report_dir = args.report
    if report_dir is None and mode == "write":
        report_dir = args.output.parent / f"{args.output.name}_migration_report"
    # one run at a time into an output (and its report): a second one is refused, never mixed in
    with contextlib.ExitStack() as held:
        locked: list[Path] = []
        for d in (args.output if mode == "write" else None, report_dir):
            if d is None or d.resolve() in locked:  # --report OUTDIR: one folder, one lock
                continue
            locked.append(d.resolve())
            try:
                held.enter_context(output_lock(d, "ascendify migrate"))
            except OutputLocked as e:
                return _usage(str(e))
            except OSError as e:
                return _usage(f"{d}: cannot write here ({e.strerror or e})")
            if d is args.output and not args.force:  # checked with the lock held (before the report folder)
                foreign = foreign_output(args.output)
                if foreign:
                    return _usage(f"the output folder {args.output} is not empty and was not written by "
                                  f"ascendify migrate (it holds {foreign}; no {OUTPUT_MARKER} marker): choose a "
                                  "new folder, or pass --force")
        return _convert(args, tasks, mode, jobs, report_dir)


def _convert(args: argparse.Namespace, tasks: list, mode: str, jobs: int, report_dir: Path | None) -> int:
    """Convert ``tasks`` (the output and report folders are locked), write the output, the report, the summary."""
    from ascendify import report as shared
    from ascendify.migrate.report import build, next_steps, print_summary, write
    from ascendify.migrate.runner import (
        discard_inplace,
        marker_incomplete,
        run_tasks,
        swap_inplace,
        write_marker,
    )

    out = args.output
    inputs = [str(p) for p in args.paths]
    planned, kept = tasks, {}
    console = shared.console(stderr=args.diff or args.format == "json")
    if mode == "write":
        from ascendify.migrate import handedits

        if marker_incomplete(out):
            console.print(f"{out} was left incomplete by an interrupted run: this run completes it",
                          highlight=False, soft_wrap=True)
        if not args.force:  # hand edits in an earlier output are kept, never overwritten
            tasks, kept = handedits.plan_keeps(out, tasks)
        else:
            handedits.drop_stale_beside(tasks)
        try:  # before anything is written: an output this run leaves half-written says so
            write_marker(out, target=args.target, inputs=inputs, complete=False,
                         files=handedits.untouched(out, planned, kept))
        except OSError as e:
            return _io_error(f"cannot write {e.filename or out}: {e.strerror or e}")
    # the summary goes to stdout, unless stdout carries the diff or the JSON
    t0 = time.perf_counter()
    progress = _progress_bar(console, tasks, args.quiet)
    rewritten: list[str] = []  # --inplace: the inputs already replaced by their conversion
    import signal

    def terminated(signum, frame):  # SIGTERM (`timeout`, a job scheduler) ends the run as Ctrl-C does
        raise _Terminated(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread: SIGTERM keeps its action
        previous = None
    try:
        pairs = run_tasks(tasks, jobs, progress)
        results = [r for r, _ in pairs]
        if mode == "inplace":
            swap_inplace(results, tasks, rewritten)
        if mode == "write":
            from ascendify.migrate import handedits

            handedits.mark_kept(results, kept)
            write_marker(out, target=args.target, inputs=inputs, files=handedits.records(out, planned, kept, results))
    except (KeyboardInterrupt, _Terminated):
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.stop()
        if mode == "inplace" and not rewritten:
            discard_inplace(tasks)
            print("ascendify migrate: interrupted before any file was rewritten: the input is as it was",
                  file=sys.stderr)
        elif mode == "inplace":
            print(f"ascendify migrate: interrupted after the conversion was swapped in: "
                  f"{shared.plural(len(rewritten), 'file')} rewritten", file=sys.stderr)
        elif mode == "write":
            print(f"ascendify migrate: interrupted: {out} is incomplete (its marker says so); run the same "
                  "command again to complete it", file=sys.stderr)
        raise
    except OSError as e:
        if progress is not None:
            progress.stop()
        where = f"cannot write {e.filename}" if e.filename else "cannot write"
        msg = f"{where}: {e.strerror or e}"
        if mode == "write":
            msg += f"; {out} is incomplete (its marker says so): run the same command again once it can be written"
        elif mode == "inplace":
            discard_inplace(tasks)
            msg += ("; no input file was rewritten" if not rewritten else
                    f"; {shared.plural(len(rewritten), 'file')} had been rewritten already: " + ", ".join(rewritten))
        return _io_error(msg)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.stop()
    seconds = time.perf_counter() - t0
    report = build(results, target=args.target, seconds=seconds, inputs=inputs,
                   output=str(out) if out else None,
                   options={"mode": mode, "unsafe": args.unsafe, "select": args.select, "ignore": args.ignore,
                            "jobs": jobs})
    if report_dir is not None:
        try:
            write(report, results, report_dir)
        except OSError as e:
            return _io_error(f"cannot write the report {e.filename or report_dir}: {e.strerror or e}")
    if args.format == "json":
        if args.diff:  # the diffs go inside the JSON, so stdout stays one JSON document
            for entry, (_, d) in zip(report["files"], pairs, strict=True):
                entry["diff"] = d or ""
        sys.stdout.write(shared.dumps_json(report))
        sys.stdout.flush()
    elif args.diff:
        for _, d in pairs:
            if d:
                sys.stdout.write(d)
    if not args.quiet:  # on stderr after the JSON or the diff
        print_summary(report, results, console, verbose=args.verbose)
        for r in results:
            if r.status == "skipped":
                copied = " (copied unchanged)" if r.copied else ""
                console.print(f"[yellow]skipped[/] {r.path}: {r.reason}{copied}", highlight=False)
            elif r.status == "kept":
                console.print(f"[cyan]kept[/] {r.path}: {r.reason}", highlight=False)
        for line in next_steps(report, results, mode=mode, output=out, inputs=list(args.paths),
                               report_dir=report_dir):
            console.print(line, highlight=False, soft_wrap=True)  # commands and paths stay copy-pasteable
    t = report["totals"]
    if args.check and t["changed"]:
        return EXIT_CHANGES
    if t["skipped"]:
        return EXIT_SKIPPED
    return EXIT_OK


class _Terminated(SystemExit):
    """SIGTERM during the conversion: the workers are stopped and the output marked, then the exit (143)."""


def _io_error(msg: str) -> int:
    print(f"ascendify migrate: error: {msg}", file=sys.stderr)
    return EXIT_IO


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
    from ascendify.migrate.runner import BIG_FILE

    if len(tasks) <= 20 and not any(_bytes(t.src) > BIG_FILE for t in tasks):
        return None
    from ascendify.report import plural

    return _Bar(console, Path(tasks[0].rel).name if len(tasks) == 1 else plural(len(tasks), "file"))


def _bytes(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
