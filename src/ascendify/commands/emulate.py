"""``ascendify emulate``: run a torch_npu program on the emulated ``npu`` device (no torch import here).

The program line is parsed by :mod:`ascendify.program`; the work is in :mod:`ascendify.emulator.runner`.
"""

from __future__ import annotations

import argparse
import os
import sys

HELP = "run torch_npu code on an emulated npu device on the CPU (no NPU needed), with a fidelity report"
DESCRIPTION = """\
Run a PyTorch program written for Ascend NPUs (torch_npu) on an emulated `npu` device backed by the CPU,
unmodified, and print at exit what ran: ops, ops a real NPU would run on its CPU fallback or reject, float64
and fp16-overflow events, APIs unsupported on every chip, peak device memory.

examples:
  ascendify emulate -- python train.py --epochs 1
  # "python" may be left out
  ascendify emulate train.py --epochs 1
  # fail where a real NPU would fall back to the CPU
  ascendify emulate --fidelity error -m mypkg.train
  ascendify emulate --json emu.json --memory 16G train.py
  # every worker emulated (hccl over gloo), one summary of them all
  ascendify emulate -- torchrun --nproc-per-node 2 train.py
  ascendify emulate -- accelerate launch --num_processes 2 train.py

Settings also come from the environment (ASCENDIFY_EMULATE_FIDELITY, _FLOAT64, _FP16_OVERFLOW, _MEMORY,
_DEVICES, _CANN; TORCH_NPU_FALLBACK_CPU_DISABLE=1 means --fidelity error). Details: docs/emulator.md.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fidelity", choices=("warn", "error"), help="ops with no NPU kernel / unsupported APIs")
    p.add_argument("--float64", choices=("allow", "warn", "error"), help="float64 on npu")
    p.add_argument("--fp16-overflow", choices=("off", "warn", "error"), help="check fp16/bf16 results for inf/nan")
    p.add_argument("--memory", metavar="SIZE", help="emulated device memory, e.g. 16G (default 64G)")
    p.add_argument("--devices", type=int, metavar="N", help="number of emulated devices (default 8)")
    p.add_argument("--cann", metavar="VERSION", help="the CANN release whose HCCL rules hccl enforces (default 9.1.0)")
    p.add_argument("--json", metavar="FILE", help="write the summary as JSON (a launcher job: every worker's, "
                   "gathered)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary table at exit")
    p.add_argument("--no-check-collectives", dest="check_collectives", action="store_false",
                   help="do not compare the ranks' collectives (on by default: ranks out of step stop with one "
                        "message naming the ranks, calls and lines)")
    p.add_argument("--collective-timeout", metavar="SECONDS", type=_seconds,
                   help="how long a rank may wait in a collective a peer has not reached (default 10; 0: no limit)")
    p.add_argument("-m", dest="module_args", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as a script (like python -m); what follows are its arguments")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="PROGRAM",
                   help="SCRIPT ARGS | python [OPTS] SCRIPT ARGS | python -m MODULE ARGS | torchrun [OPTS] SCRIPT ARGS | "
                        "accelerate launch [OPTS] SCRIPT ARGS")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more seconds, not {text}")
    return value


def _settings_env(args: argparse.Namespace) -> dict[str, str]:
    env = {}
    for flag, var in (("fidelity", "FIDELITY"), ("float64", "FLOAT64"), ("fp16_overflow", "FP16_OVERFLOW"),
                      ("memory", "MEMORY"), ("devices", "DEVICES"), ("cann", "CANN")):
        value = getattr(args, flag)
        if value is not None:
            env[f"ASCENDIFY_EMULATE_{var}"] = str(value)
    if not getattr(args, "check_collectives", True):
        env["ASCENDIFY_CHECK_COLLECTIVES"] = "0"
    if getattr(args, "collective_timeout", None) is not None:
        env["ASCENDIFY_COLLECTIVE_TIMEOUT"] = str(args.collective_timeout)
    return env


def run(args: argparse.Namespace) -> int:
    from ascendify.commands import program_to_run

    prog = program_to_run("ascendify emulate", args, {"--json": args.json})
    if isinstance(prog, int):
        return prog
    settings = _settings_env(args)
    try:  # a bad --memory/--devices (or ASCENDIFY_EMULATE_*) is a usage error, not a traceback
        from ascendify.emulator.settings import Settings

        Settings.from_env({**os.environ, **settings})
        if "ASCENDIFY_COLLECTIVE_TIMEOUT" in settings:
            float(settings["ASCENDIFY_COLLECTIVE_TIMEOUT"])
    except ValueError as e:
        print(f"ascendify emulate: {e}", file=sys.stderr)
        return 2
    os.environ.update(settings)
    os.environ["ASCENDIFY_EMULATE"] = "npu"
    from ascendify.emulator import runner

    if prog.launches_workers:
        return runner.run_workers(prog, json_path=args.json, quiet=args.quiet)
    from ascendify.commands import observe_if_asked

    return runner.run_emulated(prog, json_path=args.json, quiet=args.quiet, before_run=observe_if_asked)
