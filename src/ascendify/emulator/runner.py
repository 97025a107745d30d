"""Run a program in this process under emulation, then print and save the summary (``ascendify emulate``)."""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

from ascendify.fileio import write_atomic


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _run_main(kind: str, target: str, args: list[str]) -> int:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if kind == "module":
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as e:
        return _exit_code(e)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:
        etype, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
            tb = tb.tb_next
        traceback.print_exception(etype, value, tb)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def run_emulated(kind: str, target: str, args: list[str], *, json_path: str | None, quiet: bool) -> int:
    """Enable the emulator, run ``target`` as ``__main__``, report; returns the program's exit status."""
    import ascendify.emulator as emu

    try:
        emu.enable()
    except (emu.EmulatorError, ValueError) as e:
        print(f"ascendify emulate: {e}", file=sys.stderr)
        return 3
    code = _run_main(kind, target, args)
    try:
        rep = emu.report()
        rep["exit_code"] = code
        rep["program"] = [target, *args]
        rank = _rank()
        if json_path:
            path = json_path if rank == 0 else f"{json_path}.rank{rank}.json"
            write_atomic(path, json.dumps(rep, indent=2, default=str) + "\n")
        if not quiet and rank == 0:
            from ascendify.emulator import summary

            sys.stdout.flush()
            summary.render(rep)
    except Exception as e:  # the report must never turn a good run into a failure
        print(f"ascendify emulate: could not write the summary: {e}", file=sys.stderr)
    return code


def run_torchrun(args: list[str], *, json_path: str | None, quiet: bool) -> int:
    """Start every torchrun worker as ``python -m ascendify emulate [flags] -- SCRIPT ARGS``."""
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    a = get_args_parser().parse_args(args)
    if a.no_python:
        print("ascendify emulate: torchrun --no-python runs a program that is not Python", file=sys.stderr)
        return 2
    inner = ["-m", a.training_script] if a.module else [a.training_script]
    flags = (["--json", json_path] if json_path else []) + (["-q"] if quiet else [])
    a.training_script_args = ["emulate", *flags, "--", *inner, *a.training_script_args]
    a.training_script = "ascendify"
    a.module = True
    try:
        torchrun(a)
    except SystemExit as e:
        return _exit_code(e)
    except Exception as e:  # ChildFailedError: torchrun already printed the workers' errors
        print(f"ascendify emulate: torchrun failed: {e.__class__.__name__}", file=sys.stderr)
        return 1
    return 0
