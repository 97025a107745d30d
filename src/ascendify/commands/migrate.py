"""``ascendify migrate``: rewrite CUDA PyTorch code for Ascend NPUs (or device-agnostic PyTorch), with a report.

Nothing heavy is imported at module level (no torch, ever, on this path).
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--max-size", type=int, default=5 * 1024 * 1024, metavar="BYTES",
                   help="skip (and copy) Python files larger than this")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="json: print the report (report.json's content) on stdout; with --diff each file's "
                        "diff is in it (files[].diff)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary table")
    p.add_argument("-v", "--verbose", action="store_true", help="list every file in the summary")
    p.add_argument("--explain", metavar="RULE", help="print a rule's documentation and exit")
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")


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
    jobs = args.jobs

    from ascendify import report as shared
    from ascendify.core.fileio import folder_problem
    from ascendify.migrate.engine import Options
    from ascendify.migrate.native import NATIVE_SUFFIXES
    from ascendify.migrate.report import build, next_steps, print_summary, write
    from ascendify.migrate.runner import (
        OUTPUT_MARKER,
        auto_jobs,
        clashes,
        foreign_output,
        plan,
        run_tasks,
        write_marker,
    )

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
    if not any(t.src.endswith((".py", ".pyi")) or Path(t.src).suffix.lower() in NATIVE_SUFFIXES for t in tasks):
        what = "no file at all" if not tasks else shared.plural(len(tasks), "file") + ", none of them Python"
        return _usage(f"nothing to convert under {', '.join(map(str, args.paths))}: {what}")
    clash = clashes(tasks)
    if clash:
        return _usage(f"two inputs would be written to the same output file: {clash[0]} (convert them "
                      "separately, or pass their common folder)")
    if mode == "write" and (problem := folder_problem(args.output)):
        return _usage(f"-o {args.output}: {problem}")
    if mode == "write" and not args.force:
        foreign = foreign_output(args.output)
        if foreign:
            return _usage(f"the output folder {args.output} is not empty and was not written by ascendify "
                          f"migrate (it holds {foreign}; no {OUTPUT_MARKER} marker): choose a new folder, or "
                          "pass --force")
    planned, kept = tasks, {}
    if mode == "write" and not args.force:  # hand edits in an earlier output are kept, never overwritten
        from ascendify.migrate.handedits import plan_keeps

        tasks, kept = plan_keeps(args.output, tasks)
    elif mode == "write":
        from ascendify.migrate.handedits import drop_stale_beside

        drop_stale_beside(tasks)
    # the summary goes to stdout, unless stdout carries the diff or the JSON
    console = shared.console(stderr=args.diff or args.format == "json")
    t0 = time.perf_counter()
    progress = None
    if console.is_terminal and len(tasks) > 20 and not args.quiet:
        from rich.progress import Progress

        bar = Progress(console=console, transient=True)
        task_id = bar.add_task("migrating", total=len(tasks))
        bar.start()

        def progress(n: int) -> None:
            bar.update(task_id, completed=n)
    try:
        pairs = run_tasks(tasks, jobs, progress)
        if mode == "write":
            from ascendify.migrate.handedits import hashes, mark_kept

            mark_kept([r for r, _ in pairs], kept)
            write_marker(args.output, target=args.target, inputs=[str(p) for p in args.paths],
                         files=hashes(args.output, planned, kept))
    except OSError as e:
        print(f"ascendify migrate: error: cannot write {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return EXIT_IO
    finally:
        if progress is not None:
            bar.stop()
    seconds = time.perf_counter() - t0
    results = [r for r, _ in pairs]
    report = build(results, target=args.target, seconds=seconds, inputs=[str(p) for p in args.paths],
                   output=str(args.output) if args.output else None,
                   options={"mode": mode, "unsafe": args.unsafe, "select": args.select, "ignore": args.ignore,
                            "jobs": jobs})
    report_dir = args.report
    if report_dir is None and mode == "write":
        report_dir = args.output.parent / f"{args.output.name}_migration_report"
    if report_dir is not None:
        try:
            write(report, results, report_dir)
        except OSError as e:
            print(f"ascendify migrate: error: cannot write the report {e.filename or report_dir}: "
                  f"{e.strerror or e}", file=sys.stderr)
            return EXIT_IO
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
                copied = " (copied unchanged)" if mode == "write" else ""
                console.print(f"[yellow]skipped[/] {r.path}: {r.reason}{copied}", highlight=False)
            elif r.status == "kept":
                console.print(f"[cyan]kept[/] {r.path}: {r.reason}", highlight=False)
        for line in next_steps(report, results, mode=mode, output=args.output, inputs=list(args.paths),
                               report_dir=report_dir):
            console.print(line, highlight=False, soft_wrap=True)  # commands and paths stay copy-pasteable
    t = report["totals"]
    if args.check and t["changed"]:
        return EXIT_CHANGES
    if t["skipped"]:
        return EXIT_SKIPPED
    return EXIT_OK
