"""``ascendify run``: run an unmodified CUDA program with its CUDA calls redirected (no torch import here).

The program line is parsed by :mod:`ascendify.program`; the work is in :mod:`ascendify.auto.runner`.
"""

from __future__ import annotations

import argparse
import os
import sys

HELP = "run an unmodified CUDA script on the NPU (or the emulated NPU, or the CPU), recording every redirection"
DESCRIPTION = """\
Run an unmodified CUDA PyTorch program with its CUDA calls redirected at run time to the target device,
and report what was redirected (API, calls, first call site), what has no effect or no equivalent there,
and CUDA device values that could not be mapped.

examples:
  # a CUDA-only script on a laptop
  ascendify run --to cpu train.py --epochs 1
  # "python [options]" may be given; -u, -W, -B apply
  ascendify run --to cpu -- python -u train.py
  # a module, on the NPU (emulated when there is none)
  ascendify run --to npu -m mypkg.train --lr 0.1
  # every torchrun worker redirected
  ascendify run --to npu torchrun --nproc-per-node 2 train.py
  # a JSON report; unsupported calls raise at the call
  ascendify run --log run.json --strict train.py

Alternatively put `import ascendify.auto` on the first line of the entry script (target from
ASCENDIFY_TARGET, default auto). Details: docs/auto.md.
"""

def add_arguments(p: argparse.ArgumentParser) -> None:
    from ascendify.commands import add_device_argument

    add_device_argument(p, "redirect", flags=("--device", "--to"), dest="to", default=None,
                        help="where the CUDA calls go (default: $ASCENDIFY_TARGET, else auto; on CUDA: nothing "
                             "to redirect)")
    p.add_argument("--strict", action="store_true",
                   help="raise at the call for unsupported APIs (annotations included) and unmappable devices")
    p.add_argument("--log", metavar="FILE", help="write the run report as JSON (rank N > 0: NAME.rankN.json)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary at exit")
    p.add_argument("--check-collectives", action="store_true",
                   help="compare the ranks' torch.distributed collectives (op, shapes, dtypes, line) through the "
                        "process group's store: ranks out of step stop with one message naming them, not a hang "
                        "(any backend, a real NPU's hccl included; on by default on the emulated npu; "
                        "$ASCENDIFY_COLLECTIVE_TIMEOUT: seconds a rank may wait for a peer, default 10)")
    p.add_argument("--no-rewrite-checks", dest="rewrite_checks", action="store_false",
                   help="do not compile your own files with `x.type == \"cuda\"` / `get_backend() == \"nccl\"` "
                        "testing for the target (default: they are, in memory; see docs/auto.md)")
    p.add_argument("-m", dest="module_args", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as a script (like python -m); everything after it is its arguments")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="PROGRAM",
                   help="SCRIPT ARGS | python [OPTS] SCRIPT ARGS | python -m MODULE ARGS | torchrun [OPTS] SCRIPT ARGS")


def run(args: argparse.Namespace) -> int:
    from ascendify.commands import program_to_run

    prog = program_to_run("ascendify run", args, {"--log": args.log})
    if isinstance(prog, int):
        return prog

    target = args.to or os.environ.get("ASCENDIFY_TARGET") or "auto"
    from ascendify.auto import runner

    if prog.launches_workers:
        flags = ["--to", target] + (["--strict"] if args.strict else []) + (["--quiet"] if args.quiet else [])
        flags += [] if args.rewrite_checks else ["--no-rewrite-checks"]
        flags += ["--check-collectives"] if args.check_collectives else []
        if args.log:
            flags += ["--log", os.path.abspath(args.log)]
        return runner.run_torchrun(prog, flags)

    from ascendify.device.placement import DeviceError

    os.environ["ASCENDIFY_TARGET"] = target  # children that `import ascendify.auto` follow the same target
    try:
        runner.enable_for_process(target, strict=args.strict, log=args.log, entry=prog.path, quiet=args.quiet,
                                  at_exit=False, rewrite_checks=args.rewrite_checks)
    except DeviceError as e:
        print(f"ascendify run: --device {target}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # e.g. the emulator refused to start: say so, no traceback of ours
        print(f"ascendify run: cannot redirect to {target}: {e.__class__.__name__}: {e}", file=sys.stderr)
        return 2
    if args.check_collectives:
        _check_collectives()
    if prog.module is not None and not args.rewrite_checks:
        runner.scan_module(prog.module)
    from ascendify.commands import observe_if_asked

    observe_if_asked()
    try:
        return runner.run_program(prog)
    finally:
        runner.finish(log=args.log, quiet=args.quiet)


def _check_collectives() -> None:
    """Wrap torch.distributed's collective functions with the cross-rank check (ascendify run --check-collectives)."""
    os.environ["ASCENDIFY_CHECK_COLLECTIVES"] = "1"
    from ascendify.emulator.distributed import desync

    desync.install_function_wrappers()
