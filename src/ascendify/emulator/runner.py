"""Run a program in this process under emulation, then print and save the summary (``ascendify emulate``)."""

from __future__ import annotations

import json
import os
import sys

from ascendify.fileio import write_atomic
from ascendify.scriptrun import relaunch_torchrun, run_as_main


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
    code = run_as_main(None if kind == "module" else target, target if kind == "module" else None, args)
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
    flags = (["--json", json_path] if json_path else []) + (["-q"] if quiet else [])
    return relaunch_torchrun(args, ["emulate", *flags, "--"], who="ascendify emulate")
