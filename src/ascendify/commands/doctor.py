"""``ascendify doctor``: check that this machine can run PyTorch on an Ascend NPU, and say exactly what to fix.

Torch-free front-end: ``run`` imports :mod:`ascendify.doctor` (which imports torch only for the device checks).
"""

from __future__ import annotations

import sys

HELP = "check the NPU environment (driver, CANN, torch_npu, versions, devices) and explain error logs"
DESCRIPTION = """\
Check the environment for running PyTorch on Ascend NPUs: OS, Python, torch, torch_npu (and that it matches
torch), the CANN toolkit, the variables set_env.sh sets, the libraries torch_npu loads, the driver and devices
(npu-smi, /dev/davinci*), processes holding NPUs, and the version matrix. Each check says ok / warn / fail / skip,
what it found and the exact fix. Device checks run smoke ops against the CPU and measure TFLOP/s and GB/s on the
real NPU, CUDA, the emulated npu (host speed) and the CPU.

  ascendify doctor                       all checks, device checks included
  ascendify doctor --skip-device         environment only (fast)
  ascendify doctor --bug-report          a Markdown block to paste into an issue
  ascendify doctor --json > doctor.json  the report as JSON on stdout
  ascendify doctor --out report/         doctor.json + doctor.md
  ascendify doctor --explain train.log   known errors in a log (or: --explain -)

exit status: 0 no check failed; 1 a check failed (--explain: 1 when nothing matched); 2 usage error (an
unreadable log, an --out that is a file); 3 the --out folder cannot be written (read-only, no permission).
"""


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print the report (or --explain result) as JSON on stdout")
    p.add_argument("--bug-report", action="store_true", help="print a Markdown block for a bug report")
    p.add_argument("--out", metavar="DIR", help="write DIR/doctor.json and DIR/doctor.md")
    p.add_argument("--skip-device", action="store_true", help="skip the device checks (smoke ops, speed)")
    p.add_argument(
        "--device",
        action="append",
        metavar="TARGET",
        help="device checks on these targets only: npu, cuda, emulated, cpu (repeatable)",
    )
    p.add_argument("--check", action="append", metavar="ID", help="run only this check (repeatable; see --list-checks)")
    p.add_argument("--list-checks", action="store_true", help="list the checks with their documentation")
    p.add_argument(
        "--explain",
        nargs="?",
        const="-",
        metavar="LOGFILE",
        help="explain known error messages in LOGFILE ('-' or nothing: stdin)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages on stderr")


def run(args) -> int:
    if args.explain is not None:
        return _explain(args)
    from ascendify import report
    from ascendify.doctor import REGISTRY, run_checks

    if args.list_checks:
        return _list_checks(REGISTRY, args)
    only = None
    if args.check:
        only = [c.strip() for x in args.check for c in x.split(",") if c.strip()]
        if not only:  # --check "" (an empty shell variable) ran every check, as if no --check were given
            print("ascendify doctor: --check needs a check id (see --list-checks)", file=sys.stderr)
            return 2
        unknown = [c for c in only if c not in REGISTRY and not c.startswith(("device", "smoke", "perf"))]
        if unknown:
            print(f"ascendify doctor: unknown check {', '.join(unknown)} (see --list-checks)", file=sys.stderr)
            return 2
        only = [("device" if c.startswith(("smoke", "perf")) else c) for c in only]
    targets = args.device
    if targets:
        bad = [t for t in targets if t.lower() not in ("npu", "cuda", "emulated", "cpu")]
        if bad:
            print(f"ascendify doctor: unknown --device {', '.join(bad)} (use npu, cuda, emulated, cpu)", file=sys.stderr)
            return 2
    if args.out:
        from ascendify.core.fileio import folder_problem

        if problem := folder_problem(args.out):  # before the facts are gathered
            print(f"ascendify doctor: --out {args.out}: {problem}", file=sys.stderr)
            # a file where the folder should be is a usage error (2); a folder that cannot be written (read-only,
            # no permission) is 3, as when writing it fails later (docs/doctor.md)
            return 2 if _under_a_file(args.out) else 3
    err = report.console(stderr=True)

    def progress(msg: str) -> None:
        if not args.quiet:
            err.print(f"[dim]doctor: {msg}...[/dim]")

    rep = run_checks(only=only, device=not args.skip_device, targets=targets, progress=progress)
    from ascendify.doctor import render

    if args.out:
        import os

        from ascendify.core.fileio import write_atomic

        try:
            os.makedirs(args.out, exist_ok=True)
            report.write_json(os.path.join(args.out, "doctor.json"), rep)
            write_atomic(os.path.join(args.out, "doctor.md"), render.markdown(rep), mode=0o644)
        except OSError as e:
            print(f"ascendify doctor: cannot write to {args.out}: {e}", file=sys.stderr)
            return 3
    if args.json:
        sys.stdout.write(report.dumps_json(rep) + "\n")
    elif args.bug_report:
        sys.stdout.write(render.bug_report(rep))
    else:
        render.print_report(rep)
        if args.out:
            print(f"wrote {args.out}/doctor.json and {args.out}/doctor.md")
    return 1 if rep["summary"]["fail"] else 0


def _under_a_file(path: str) -> bool:
    """True when ``path`` or the nearest of its folders that exists is a file."""
    from pathlib import Path

    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe.exists() and not probe.is_dir()


def _list_checks(registry, args) -> int:
    if args.json:
        from ascendify import report

        rows = [{"id": c.id, "title": c.title, "section": c.section, "doc": c.doc} for c in registry.values()]
        rows.append({"id": "smoke:<target>", "title": "Smoke ops vs a float64 CPU reference", "section": "device", "doc": ""})
        rows.append({"id": "perf:<target>", "title": "Matmul TFLOP/s, event timing, host<->device GB/s", "section": "device", "doc": ""})
        sys.stdout.write(report.dumps_json(rows) + "\n")
        return 0
    import shutil
    import textwrap

    width = max(40, min(shutil.get_terminal_size((100, 24)).columns, 120))
    for c in registry.values():
        print(textwrap.fill(f"{c.id}: {c.title}", width, subsequent_indent="    "))
        for para in c.doc.split("\n\n"):  # paragraphs re-wrapped to the terminal (they were ~115 wide)
            text = " ".join(para.split())
            print(textwrap.fill(text, width, initial_indent="    ", subsequent_indent="      ") if text else "")
            print()
    print(textwrap.fill("smoke:<target>, perf:<target>: device checks (targets npu, cuda, emulated, cpu); --check "
                        "device runs them", width, subsequent_indent="    "))
    return 0


def _explain(args) -> int:
    from ascendify.doctor import explain, render

    src = args.explain
    try:
        if src == "-":
            name = "stdin"
            result = explain.scan(sys.stdin)
        else:
            name = src
            with open(src, encoding="utf-8", errors="replace") as f:
                result = explain.scan(f)  # streamed: a log of any size, read to its last line
    except FileNotFoundError:
        print(f"ascendify doctor --explain: {src}: no such file", file=sys.stderr)
        return 2
    except IsADirectoryError:
        print(f"ascendify doctor --explain: {src}: is a folder, not a log file", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"ascendify doctor --explain: cannot read {src}: {e.strerror or e}", file=sys.stderr)
        return 2
    if result.unread:  # what was read is still explained, and it is said that the rest was not
        print(f"ascendify doctor --explain: {name}: {result.unread}; the lines before it are explained",
              file=sys.stderr)
    groups = explain.summarize(result.hits, result.counts)
    if args.json:
        from ascendify import report

        sys.stdout.write(report.dumps_json({"source": name, "lines": result.lines, "unread": result.unread,
                                            "matches": groups}) + "\n")
    else:
        sys.stdout.write(render.explain_text(groups, name))
    return 0 if groups else 1
