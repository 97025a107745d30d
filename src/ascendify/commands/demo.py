"""``ascendify demo``: the whole mission in one command (doctor, migrate, train, compare, bench, checklist,
report.html) on the bundled CUDA example project. See docs/demo.md."""

from __future__ import annotations

import argparse
import sys

HELP = "the whole mission on the bundled CUDA project: doctor, migrate, train, compare, bench, checklist, report"
DESCRIPTION = """Show the whole mission on the bundled CUDA example project, end to end, in one command:

  1. doctor     is this machine ready for PyTorch on Ascend?
  2. migrate    examples/cuda_project rewritten for torch_npu, with its report
  3. train      the migrated trainer on the NPU (the emulated NPU when there
                is none) and the unmodified original on the CPU (ascendify run
                --to cpu), same seed and sizes
  4. compare    lockstep on the model (CPU fp32 vs NPU bf16) and the two runs'
                loss curves
  5. bench      training speed on the CPU and the NPU (the emulated NPU's
                figures are host speed)
  6. checklist  the migration checklist, each item evaluated from the steps
                with its evidence
  7. report     OUT/report.html (one self-contained page linking everything),
                OUT/demo.json

examples:
  ascendify demo --out demo_out             1-3 minutes on a 2-core machine
  ascendify demo --out demo_out --quick     smallest sizes
  ascendify demo --out demo_out --skip bench --skip doctor

--device auto uses a real Ascend NPU where there is one, else a CUDA GPU, else the emulated NPU; npu: the
real NPU or the emulated one; cuda: the GPU (the original runs there; the migrated copy needs an NPU);
cpu: the host only (the emulated NPU), whatever hardware is present.

exit status: 0 proven (both runs trained, the lockstep matched); 1 a finding (a precision divergence, a failed doctor
check, a checklist item ✗); 2 usage error (also: a non-empty OUT that no demo wrote, without --force);
3 a step crashed (the report is still written, with the failure); 4 cannot start (no example project,
OUT not writable); 5 not proven (--skip compare or train: the verdict names what was not compared)."""

STEPS = ("doctor", "migrate", "train", "compare", "bench")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", "-o", default="demo_out", metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="smallest sizes (what the tests run)")
    from ascendify.commands import add_device_argument

    add_device_argument(p, "port", help="where the NPU side runs (see above)")
    p.add_argument("--skip", action="append", default=[], metavar="STAGE",
                   help=f"skip a stage (repeatable or comma-separated): {', '.join(STEPS)}")
    p.add_argument("--force", action="store_true", help="write into a non-empty folder that no demo wrote")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="child processes at a time (default: the CPU count, at most 2)")
    p.add_argument("--json", action="store_true", help="print demo.json on stdout instead of the summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ascendify.commands import parse_pipeline_options

    skip = parse_pipeline_options("ascendify demo", args, STEPS)
    if isinstance(skip, int):
        return skip
    from ascendify import demo
    from ascendify.port.jobs import default_lanes

    opts = demo.DemoOptions(out=Path(args.out), quick=args.quick, device=args.device, skip=frozenset(skip),
                            force=args.force, lanes=args.jobs or default_lanes(),
                            progress=None if args.quiet else sys.stderr)
    try:
        result = demo.run_demo(opts)
    except demo.DemoError as e:
        from ascendify.report.tables import fold

        print(fold(f"ascendify demo: {e}"), file=sys.stderr)
        return e.code
    if args.json:
        from ascendify import report

        print(report.dumps_json(result.to_dict()))
    else:
        demo.print_summary(result)
    return result.exit_code
