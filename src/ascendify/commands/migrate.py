"""``ascendify migrate``: rewrite CUDA PyTorch code for Ascend NPUs (or device-agnostic PyTorch), with a report.

Nothing heavy is imported at module level (no torch, ever, on this path).
"""

from __future__ import annotations

import argparse
import sys
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
    from ascendify.migrate.runner import EXIT_USAGE

    print(f"ascendify migrate: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    """Parse and check the command line, then hand the run to :func:`ascendify.migrate.runner.migrate`."""
    from ascendify.migrate.rules import RULES
    from ascendify.migrate.runner import EXIT_OK, MigrateError, Request, migrate

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
    req = Request(paths=tuple(args.paths), output=args.output, inplace=args.inplace, diff=args.diff,
                  check=args.check, target=args.target, report=args.report, jobs=args.jobs,
                  select=tuple(args.select), ignore=tuple(args.ignore), unsafe=args.unsafe, force=args.force,
                  max_size=args.max_size, json=args.format == "json", quiet=args.quiet, verbose=args.verbose)
    try:
        return migrate(req)
    except MigrateError as e:
        print(f"ascendify migrate: error: {e}", file=sys.stderr)
        return e.code
