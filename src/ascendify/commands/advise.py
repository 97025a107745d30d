"""``ascendify advise``: why a program will be slow on an Ascend NPU, and the fixes (no torch import here).

The work is in :mod:`ascendify.advise`; the program line is parsed by :mod:`ascendify.program`.
"""

from __future__ import annotations

import argparse
import os
import sys

HELP = "run a program for a few steps on the emulated NPU and say what will make it slow on an Ascend NPU"
DESCRIPTION = """\
Run your program (CUDA code is redirected as `ascendify run --to npu` does; torch_npu code runs as it is) on the
emulated NPU for a few training steps, watching every operator with its shapes, dtypes and the line of your code
that called it, and report what will be slow on an Ascend NPU: host-device syncs in the step, shapes that change
from step to step, operators with no NPU kernel and float64, hand-written RMSNorm / rotary / SwiGLU / attention
that one fused operator does, per-parameter optimizers, fp32 matmuls, unaligned matmul sizes, starved data
loaders. Each finding names your line, what was seen, why it is slow (with sources), the fix, and an estimate
of its weight in the step, from a roofline model of the target chip.

examples:
  ascendify advise -- python train.py --batch-size 32
  ascendify advise --steps 8 --json advise.json --html out/ -- python train.py
  # the estimate for another chip (data/device_peaks.json names)
  ascendify advise --device 910B4 -- python train.py
  # rewrite the fused-operator findings in a copy of the project, proven by lockstep
  ascendify advise --apply ../myproject-fast -- python train.py
  # a real NPU's profile (torch_npu.profiler's ASCEND_PROFILER_OUTPUT) instead of a run
  ascendify advise --profile prof/localhost_123_ascend_pt
  ascendify advise --explain ADV404

exit status: 0 the program ran (or was stopped after its steps) and was analysed, whatever was found; the
program's own status when it failed before a whole step; 2 a bad command line; 3 a package is missing.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=5, metavar="N",
                   help="training steps to watch (default 5; the first holds the warm-up and is not analysed)")
    p.add_argument("--device", metavar="NAME", help="the chip to estimate for (default: the emulated NPU's, "
                   "Ascend910B3); any name data/device_peaks.json knows, e.g. 910B4, 'NVIDIA H100'")
    p.add_argument("--dispatch-us", type=float, metavar="US", help="host time to deliver one operator (default: "
                   "the assumption in data/advise_facts.json)")
    p.add_argument("--json", metavar="FILE", help="write the findings and the estimate as JSON")
    p.add_argument("--html", metavar="DIR", help="write DIR/advise.html (with plots) and DIR/advise.json")
    p.add_argument("--trace", metavar="FILE", help="also write the op trace (JSON; --from-trace reads it)")
    p.add_argument("--from-trace", metavar="FILE", help="analyse a trace written by --trace instead of running")
    p.add_argument("--profile", metavar="DIR", help="read a real NPU's torch_npu profiler output (a folder with "
                   "ASCEND_PROFILER_OUTPUT/) instead of running")
    p.add_argument("--apply", metavar="OUT", help="write a copy of the project with the fused-operator findings "
                   "rewritten into OUT, with a diff, and prove it (lockstep, ops per step)")
    p.add_argument("--project", metavar="DIR", help="with --apply: the project folder to copy (default: the "
                   "current folder)")
    p.add_argument("--explain", metavar="RULE", help="print what a finding means (ADV101...) and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal summary (files only)")
    p.add_argument("-m", dest="module_args", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as a script (like python -m); what follows are its arguments")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="PROGRAM",
                   help="SCRIPT ARGS | python [OPTS] SCRIPT ARGS | python -m MODULE ARGS")


def run(args: argparse.Namespace) -> int:
    who = "ascendify advise"
    if args.explain:
        from ascendify.advise import rules

        try:
            print(rules.explain(args.explain))
        except KeyError as e:
            print(f"{who}: {e.args[0]}", file=sys.stderr)
            return 2
        return 0
    if args.steps is not None and args.steps < 1:
        print(f"{who}: --steps must be at least 1", file=sys.stderr)
        return 2
    from ascendify.commands import program_to_run, requires

    sources = [x for x in (args.from_trace, args.profile) if x]
    has_program = bool(args.program) or args.module_args is not None
    if len(sources) > 1 or (sources and has_program):
        print(f"{who}: give one of a program, --from-trace FILE or --profile DIR", file=sys.stderr)
        return 2
    from ascendify.core.fileio import output_problem

    for flag, path in (("--json", args.json), ("--trace", args.trace)):
        problem = path and output_problem(path)
        if problem:
            print(f"{who}: {flag} {path}: {problem}", file=sys.stderr)
            return 2
    if args.html:
        from ascendify.core.fileio import folder_problem

        problem = folder_problem(args.html)
        if problem:
            print(f"{who}: --html {args.html}: {problem}", file=sys.stderr)
            return 2
    if args.device:
        from ascendify.core import knowledge

        if knowledge.device_peaks(args.device) is None:
            names = ", ".join(d["display"] for d in knowledge.load("device_peaks")["devices"])
            print(f"{who}: --device {args.device}: no published peaks for it (known: {names})", file=sys.stderr)
            return 2
    if args.apply and (sources or not has_program):
        print(f"{who}: --apply needs the program to run (after --)", file=sys.stderr)
        return 2
    if args.apply:
        problem = _apply_problem(args)
        if problem:
            print(f"{who}: --apply {args.apply}: {problem}", file=sys.stderr)
            return 2
    if args.profile:
        return _from_profile(args, who)
    if not requires(who, "torch"):
        from ascendify.commands import EXIT_NEEDS_PACKAGE

        return EXIT_NEEDS_PACKAGE
    if args.from_trace:
        from ascendify.advise.runner import load_trace

        try:
            trace = load_trace(args.from_trace)
        except ValueError as e:
            print(f"{who}: {e}", file=sys.stderr)
            return 2
        return _report(args, trace, 0, who)
    prog = program_to_run(who, args, {})
    if isinstance(prog, int):
        return prog
    if prog.kind == "torchrun":
        print(f"{who}: a torchrun job: run one rank of it (advise watches one process), e.g. "
              f"`ascendify advise -- python {prog.path or '-m ' + str(prog.module)} ...`", file=sys.stderr)
        return 2
    from ascendify.advise.runner import trace_program

    if not args.quiet:
        print(f"{who}: watching {args.steps} step{'s' if args.steps != 1 else ''} of {prog.display()} on the "
              "NPU (emulated where none is present)...", file=sys.stderr)
    project_root = os.path.abspath(args.project or os.getcwd())
    try:
        code, trace, captured = trace_program(prog, steps=args.steps, capture_model=bool(args.apply))
    except RuntimeError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 2
    if code != 0 and not trace.steps:
        print(f"{who}: the program exited with status {code} before a whole step: nothing to analyse",
              file=sys.stderr)
        return code
    rc = _report(args, trace, code, who)
    if args.apply and rc == 0:
        from ascendify.advise import apply as apply_mod

        return apply_mod.run_apply(args, args._result, prog, project_root, captured, who)
    return rc


def _report(args, trace, code: int, who: str) -> int:
    from ascendify.advise.analysis import analyze
    from ascendify.advise.render import print_terminal as render_terminal
    from ascendify.advise.runner import summary_line, write_outputs

    try:
        result = analyze(trace, args.device, dispatch_us=args.dispatch_us)
    except ValueError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 2
    args._result = result
    written = write_outputs(result, trace, json_path=args.json, html_dir=args.html, trace_path=args.trace)
    if not args.quiet:
        sys.stdout.flush()
        render_terminal(result)
        print(summary_line(result, written), file=sys.stderr)
    return 0


def _from_profile(args, who: str) -> int:
    from ascendify.advise import profile

    try:
        result = profile.analyze_profile(args.profile, device=args.device)
    except ValueError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 2
    from ascendify.advise.render import print_terminal as render_terminal
    from ascendify.advise.runner import summary_line

    written = []
    from ascendify import report

    if args.json:
        report.write_json(args.json, result.to_dict())
        written.append(args.json)
    if args.html:
        from ascendify.advise.render import fill_section

        page = report.HtmlReport("ascendify advise", subtitle=f"profile {args.profile}")
        fill_section(page.section("Make it fast on the NPU", anchor="advise"), result)
        os.makedirs(args.html, exist_ok=True)
        page.write(os.path.join(args.html, "advise.html"))
        report.write_json(os.path.join(args.html, "advise.json"), result.to_dict())
        written += [os.path.join(args.html, "advise.html"), os.path.join(args.html, "advise.json")]
    if not args.quiet:
        render_terminal(result)
        print(summary_line(result, written), file=sys.stderr)
    return 0


def _apply_problem(args) -> str | None:
    out = os.path.abspath(args.apply)
    project = os.path.abspath(args.project or os.getcwd())
    if not os.path.isdir(project):
        return f"the project {project} is not a folder"
    if out == project or out.startswith(project + os.sep):
        return f"OUT may not be the project ({project}) or inside it"
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        return "exists and is not an empty folder"
    return None
