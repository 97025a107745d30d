"""``ascendify port``: the whole mission on the user's own project, in one command (see docs/port.md)."""

from __future__ import annotations

import argparse
import sys

HELP = "port your own CUDA project and prove it: migrate, run both, find the model, compare, bench, report"
DESCRIPTION = """\
Port a CUDA PyTorch project to Ascend NPUs and prove the port right and fast,
with the project's own command, unmodified:

  1. doctor     is this machine ready? (short)
  2. migrate    PROJECT rewritten into OUT (default: PROJECT-npu beside it)
  3. train      the original command under `ascendify run --to cpu` (the
                reference) and the same command on OUT on the target (the
                NPU, else the emulated NPU), each in a scratch copy (PROJECT
                and OUT are never written), stopped after --steps training
                steps; same seeds; a --device=cuda in the command means the
                NPU for the migrated run
  4. discover   by watching the runs: the models (parameter counts), the
                optimizers, the loss, the first batch, the AMP policy, the
                step time
  5. compare    the discovered model in lockstep on the captured batch (CPU
                fp32 vs the target with the run's AMP), and the loss curves
  6. bench      the discovered model at the captured batch, CPU and target
  7. report     REPORT/report.html, REPORT/report.json (REPORT: OUT-report)

examples:
  # a script configured by flags
  ascendify port ~/src/word_lm -- python main.py --cuda --epochs 1
  # --key=value overrides; 20 steps a run
  ascendify port nanoGPT --steps 20 -- python train.py --device=cuda
  # a module, the migrated copy and the report where you want them
  ascendify port proj -o proj-npu --report port-report -- -m pkg.train
  # the migrated run also watched for inf/NaN (fp16 overflows, GradScaler skips)
  ascendify port proj --overflow -- python train.py --amp

exit status: 0 proven: both runs made their steps with finite losses and the
lockstep matched; 1 a finding (a divergence, a crash of the migrated copy
only, the migrated loss NaN, a failed check); 2 usage error; 3 a missing
dependency; 4 a step crashed, or the original program itself failed (then
nothing can be compared: the report says so); 5 not proven: a run made no
step, the losses are NaN on both sides, or the lockstep did not compare
(the verdict names what is missing)."""

STEPS = ("doctor", "migrate", "train", "compare", "bench")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("project", metavar="PROJECT", help="the CUDA project's folder (read only)")
    p.add_argument("-o", "--out", metavar="OUT", help="the migrated copy (default: PROJECT-npu beside PROJECT)")
    p.add_argument("--report", metavar="DIR", help="the report folder (default: OUT-report beside OUT)")
    p.add_argument("--to", choices=("npu", "portable"), default="npu",
                   help="torch_npu code, or device-agnostic PyTorch (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, metavar="N",
                   help="training steps a run (an optimizer step, or a backward() where the program updates "
                        "by hand; default: %(default)s)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="also stop each run after S seconds, wherever it is (before its first step too)")
    from ascendify.commands import add_device_argument

    add_device_argument(p, "port", help="where the NPU side runs (cpu: the host only, the emulated NPU)")
    p.add_argument("--model", metavar="NAME|FILE:FACTORY",
                   help="the model to compare and bench: a discovered one's name or class (netG, Generator), or "
                        "FILE.py:FACTORY(...) to build (in the project and in OUT); default: the model the first "
                        "optimizer trains")
    p.add_argument("--overflow", action="store_true",
                   help="run the migrated copy under the overflow check: the first call whose output has inf/NaN "
                        "its inputs had not, forward or backward, and GradScaler's skipped steps (report.json "
                        "'overflow', a checklist item); that run is slower and does not torch.compile")
    p.add_argument("--seed", type=int, default=1234, help="the seed both runs start with (default: %(default)s)")
    p.add_argument("--skip", action="append", default=[], metavar="STAGE",
                   help=f"skip a stage (repeatable or comma-separated): {', '.join(STEPS)}")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty OUT or report folder that ascendify did not write, and "
                   "overwrite files in OUT edited by hand since the last port (kept otherwise)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="child processes at a time (default: the CPU count, at most 2)")
    p.add_argument("--json", action="store_true", help="print report.json on stdout instead of the summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("command", nargs="*", metavar="-- COMMAND",
                   help="the project's own command, paths relative to PROJECT: python train.py ARGS, -m pkg ARGS, "
                        "torchrun ... ARGS")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ascendify.commands import requires

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("ascendify port: no command: give the project's own command after --, e.g.\n"
              "  ascendify port PROJECT -- python train.py --lr 3e-4", file=sys.stderr)
        return 2
    from ascendify.commands import parse_pipeline_options

    skip = parse_pipeline_options("ascendify port", args, STEPS)
    if isinstance(skip, int):
        return skip
    if args.steps < 1:
        print("ascendify port: --steps must be at least 1", file=sys.stderr)
        return 2
    if args.time_budget is not None and not 0 < args.time_budget < float("inf"):
        print(f"ascendify port: --time-budget must be a number of seconds above 0, not {args.time_budget:g}",
              file=sys.stderr)
        return 2
    if not requires("ascendify port", "torch", "cloudpickle"):
        return 3
    from ascendify.port.jobs import default_lanes
    from ascendify.port.options import PortError, PortOptions
    from ascendify.port.runner import print_summary, run_port

    opts = PortOptions(project=Path(args.project), command=command, out=Path(args.out) if args.out else None,
                       report=Path(args.report) if args.report else None, to=args.to, steps=args.steps,
                       seconds=args.time_budget, device=args.device, skip=frozenset(skip), force=args.force,
                       seed=args.seed, lanes=args.jobs or default_lanes(), model=args.model, overflow=args.overflow,
                       progress=None if args.quiet else sys.stderr)
    try:
        result = run_port(opts)
    except PortError as e:
        from ascendify.report.tables import fold

        print(fold(f"ascendify port: {e}"), file=sys.stderr)
        return e.code
    if args.json:
        from ascendify import report

        print(report.dumps_json(result.to_dict()))
    else:
        print_summary(result)
    return result.exit_code
