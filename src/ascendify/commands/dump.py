"""``ascendify dump``: run a program with every module and torch API call recorded (no torch import here).

The work is in :mod:`ascendify.precision.dump_runner`; the dump itself in :mod:`ascendify.precision.dumper`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "run a program and record every module / torch API call (statistics, tensors) in msprobe's dump layout"
DESCRIPTION = """\
Run a PyTorch program with dumping enabled for every module it builds: forward and backward, inputs, outputs,
parameters and gradients, scalar arguments, dtypes, shapes, the source line, and statistics with a fingerprint
that changes under permutation and scale. Writes OUT/step<N>/rank<R>/{dump.json,stack.json,construct.json}
(msprobe's layout: `msprobe compare` reads it; `ascendify compare` reads it and msprobe's).

Steps end at every optimizer.step() (also through a GradScaler), or where the program calls
ascendify.precision.step(): --step-at optimizer / call; the default (auto) counts optimizer steps until the
program first calls ascendify.precision.step(). What runs after the last boundary is the last step.

examples:
  ascendify dump -o dump/ -- python train.py --epochs 1
  ascendify dump --level module --steps 0-1 -o dump/ train.py
  ascendify dump --mode tensors --scope layers.0 --max-bytes 2G -o dump/ \\
      -- python train.py
  # torch_npu code on the emulated npu
  ascendify dump --emulate -o dump_npu/ -- python train_npu.py
  # CUDA code on the CPU (ascendify run)
  ascendify dump --to cpu -o dump_cpu/ -- python train_cuda.py
  # msprobe's config.json works too
  ascendify dump --config config.json -- python train.py

  # the first new inf/NaN (forward or backward); or each, and GradScaler's skips
  ascendify dump --overflow -o out/ train.py
  ascendify dump --overflow --overflow-action record -o out/ train.py

exit status: the program's; 1 --overflow found one; 3 a package is missing, 4 the dump could not be written (too large for
--max-bytes, disk full), 2 a bad command line or config, or an output folder that another dump is writing or that
holds other files (an earlier dump of ascendify's is replaced whole).
"""

LEVELS = {"module": "module", "api": "api", "mix": "mix", "L0": "module", "L1": "api"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="JSON settings: ours (the long option names) or msprobe's "
                   "config.json (task, level, dump_path, step, rank, scope/list)")  # fmt: skip
    p.add_argument("--level", choices=sorted(LEVELS), help="module (msprobe L0), api (L1) or mix (default)")
    p.add_argument("--mode", choices=("stats", "tensors", "checksum"), help="default: stats")
    p.add_argument("--steps", metavar="LIST", help="steps to record, e.g. 0,2-4 (default: all)")
    p.add_argument("--ranks", metavar="LIST", help="ranks to record, e.g. 0 (default: all)")
    p.add_argument("--scope", metavar="LIST", help="comma-separated module paths (layers.0) or API names (gelu)")
    p.add_argument("-o", "--output", metavar="DIR", help="dump folder (default: dump)")
    p.add_argument("--max-bytes", metavar="SIZE", help="tensor mode: refuse a step needing more (default 1G)")
    p.add_argument("--step-at", choices=("auto", "optimizer", "call"), default="auto",
                   help="where steps end: optimizer.step(), ascendify.precision.step() calls, or auto (default)")
    p.add_argument("--no-backward", action="store_true", help="forward only (no gradient hooks)")
    p.add_argument("--emulate", action="store_true", help="run on the emulated npu device (ascendify emulate)")
    from ascendify.commands import add_device_argument

    add_device_argument(p, "redirect", flags=("--device", "--to"), dest="to", default=None,
                        help="run CUDA code with its CUDA calls redirected to DEVICE (ascendify run --device)")
    p.add_argument("--overflow", action="store_true",
                   help="no dump: find the first call whose output has inf/NaN its inputs had not (OUT/overflow.json)")
    p.add_argument("--overflow-action", choices=("stop", "record"), default=None,
                   help="with --overflow: stop at the first (default) or record each (and GradScaler skips)")
    p.add_argument("--json", metavar="FILE", help="write a summary of what was written as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary table at exit")
    p.add_argument("-m", dest="module_args", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as a script (like python -m); what follows are its arguments")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="PROGRAM",
                   help="SCRIPT ARGS | python [OPTS] SCRIPT ARGS | python -m MODULE ARGS")


def parse_list(text: str | list | None, what: str) -> list[int] | None:
    """``"0,2-4"`` -> [0, 2, 3, 4]; a JSON list of ints passes through; None/""/[] -> None (all)."""
    if text is None or text == "" or text == []:
        return None
    if isinstance(text, list):
        try:
            got = sorted({int(x) for x in text})
        except (TypeError, ValueError):
            raise ValueError(f"{what}: expected a list of integers, got {text!r}") from None
        if got and got[0] < 0:
            raise ValueError(f"{what}: {got[0]}: steps and ranks count from 0")
        return got
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not a number or a range like 2-4") from None
        if min(out, default=0) < 0:  # steps and ranks count from 0: -1 selected nothing, silently
            raise ValueError(f"{what}: {part!r}: steps and ranks count from 0")
    return sorted(out)


def parse_size(text: str | int | None) -> int | None:
    """``"2G"``, ``"500M"``, ``"1048576"`` -> bytes."""
    if text is None:
        return None
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        n = int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)
    except (ValueError, OverflowError):
        raise ValueError(f"--max-bytes: {text!r} is not a size like 2G, 500M or 1048576") from None
    if n < 1:  # 0 read as "the default", a negative one as a limit no step meets
        raise ValueError(f"--max-bytes: {text!r} must be a size of at least 1 byte")
    return n


def read_config(path: str) -> dict:
    """Settings from ``path``: ours (keys as the long options) or msprobe's config.json, mapped to ours."""
    from ascendify.core.fileio import read_json

    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object of settings")
    if "task" in doc:  # msprobe's config.json
        task = doc.get("task")
        if task in ("overflow_check", "nan_check"):  # msprobe's overflow modes: overflow_nums 1 stops at the first
            sub = doc.get(task) or {}
            action = "stop" if sub.get("overflow_nums", 1) == 1 else "record"
            out = {"overflow": True, "overflow_action": action, "output": doc.get("dump_path")}
            return {k: v for k, v in out.items() if v is not None}
        if task not in ("statistics", "tensor"):
            raise ValueError(f"{path}: msprobe task {task!r} has no equivalent here (statistics or tensor)")
        sub = doc.get(task) or {}
        mode = "tensors" if task == "tensor" else ("checksum" if sub.get("summary_mode") == "md5" else "stats")
        level = doc.get("level", "L1")
        if level not in LEVELS:
            raise ValueError(f"{path}: level {level!r} is not one of L0, L1, mix")
        scope = list(sub.get("scope") or []) + list(sub.get("list") or [])
        out = {"mode": mode, "level": LEVELS[level], "output": doc.get("dump_path"), "steps": doc.get("step"),
               "ranks": doc.get("rank"), "scope": scope}  # fmt: skip
        return {k: v for k, v in out.items() if v not in (None, [], "")}
    known = {"level", "mode", "steps", "ranks", "scope", "output", "max_bytes", "backward", "overflow",
             "overflow_action"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(f"{path}: unknown settings {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    if "level" in doc and doc["level"] not in LEVELS:
        raise ValueError(f"{path}: level {doc['level']!r} is not one of module, api, mix")
    if "mode" in doc and doc["mode"] not in ("stats", "tensors", "checksum"):
        raise ValueError(f"{path}: mode {doc['mode']!r} is not one of stats, tensors, checksum")
    return doc


def settings(args: argparse.Namespace) -> dict:
    """Config file, then command-line options over it."""
    cfg = read_config(args.config) if args.config else {}
    scope = args.scope if args.scope is not None else cfg.get("scope")
    if isinstance(scope, str):
        scope = [s.strip() for s in scope.split(",") if s.strip()]
    level = args.level or cfg.get("level") or "mix"
    return {
        "level": LEVELS[level],
        "mode": args.mode or cfg.get("mode") or "stats",
        "steps": parse_list(args.steps if args.steps is not None else cfg.get("steps"), "--steps"),
        "ranks": parse_list(args.ranks if args.ranks is not None else cfg.get("ranks"), "--ranks"),
        "scope": scope or None,
        "output": args.output or cfg.get("output") or "dump",
        "max_bytes": parse_size(args.max_bytes if args.max_bytes is not None else cfg.get("max_bytes")),
        "backward": (not args.no_backward) and bool(cfg.get("backward", True)),
        "step_at": getattr(args, "step_at", "auto") or "auto",
        "overflow": bool(getattr(args, "overflow", False) or getattr(args, "overflow_action", None)
                         or cfg.get("overflow")),
        "overflow_action": getattr(args, "overflow_action", None) or cfg.get("overflow_action") or "stop",
    }


def run(args: argparse.Namespace) -> int:
    from ascendify.commands import program_to_run

    prog = program_to_run("ascendify dump", args, {"--json": args.json})
    if isinstance(prog, int):
        return prog
    try:
        conf = settings(args)
    except ValueError as e:
        print(f"ascendify dump: {e}", file=sys.stderr)
        return 2
    out = Path(conf["output"])
    if out.exists() and not out.is_dir():
        print(f"ascendify dump: the dump folder {out} exists and is a file; give a folder (-o DIR)", file=sys.stderr)
        return 2
    from ascendify.core.fileio import folder_problem

    # checked before the program runs: a folder that cannot be made would otherwise fail inside it, at its first step
    problem = folder_problem(out)
    if problem:
        print(f"ascendify dump: -o {out}: {problem}", file=sys.stderr)
        return 2
    from ascendify.precision import msprobe_io

    # one dump at a time into a folder, never over a user's files; an earlier dump of ours is replaced whole
    try:
        with msprobe_io.dump_folder(out, program=prog.display()) as held:
            held.exit_code = _run(args, prog, conf)
            return held.exit_code
    except msprobe_io.DumpFolderError as e:
        print(f"ascendify dump: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, prog, conf: dict) -> int:
    if prog.launches_workers:
        flags = _flags(args)
        return prog.relaunch(["dump", *flags, "--"], who="ascendify dump")
    from ascendify.precision import dump_runner

    if conf["overflow"]:
        from ascendify.precision import overflow

        runner = dump_runner.make_runner(prog, emulate=args.emulate, to=args.to)
        if isinstance(runner, int):
            return runner
        return overflow.run_program(runner, prog, conf, action=conf["overflow_action"],
                                    json_path=args.json, quiet=args.quiet)
    return dump_runner.run_program(prog, conf, emulate=args.emulate, to=args.to, json_path=args.json,
                                quiet=args.quiet)


def _flags(args: argparse.Namespace) -> list[str]:
    """This command's options again, for each torchrun worker."""
    out: list[str] = []
    for opt, val in (("--config", args.config), ("--level", args.level), ("--mode", args.mode),
                     ("--steps", args.steps), ("--ranks", args.ranks), ("--scope", args.scope),
                     ("--output", args.output), ("--max-bytes", args.max_bytes), ("--json", args.json),
                     ("--step-at", args.step_at), ("--to", args.to),
                     ("--overflow-action", args.overflow_action)):  # fmt: skip
        if val is not None:
            out += [opt, str(val)]
    for opt, on in (("--no-backward", args.no_backward), ("--emulate", args.emulate), ("-q", args.quiet),
                    ("--overflow", args.overflow)):
        if on:
            out.append(opt)
    return out
