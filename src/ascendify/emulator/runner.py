"""Run a program in this process under emulation, then print and save the summary (``ascendify emulate``)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ascendify.core.fileio import write_atomic
from ascendify.program import is_rank_zero, rank_result_path

if TYPE_CHECKING:
    from ascendify.program import Program


def run_emulated(prog: Program, *, json_path: str | None, quiet: bool,
                 before_run: Callable[[], None] | None = None) -> int:
    """Enable the emulator, run ``prog`` (a script or module) as ``__main__``, report; returns its exit status.
    ``before_run`` is called once the emulator is on, just before the program starts."""
    import ascendify.emulator as emu

    try:
        emu.enable()
    except (emu.EmulatorError, ValueError) as e:
        print(f"ascendify emulate: {e}", file=sys.stderr)
        return 3
    if before_run is not None:
        before_run()
    code = prog.run_in_process(explain=emu.explain_exception)
    try:
        rep = emu.report()
        rep["exit_code"] = code
        rep["program"] = prog.argv
        if os.environ.get("RANK", "").isdigit():  # a launcher's worker: its rank, for the gathered report
            rep["rank"] = int(os.environ["RANK"])
        if json_path:
            write_atomic(rank_result_path(json_path), json.dumps(rep, indent=2, default=str) + "\n")
        if not quiet and is_rank_zero():
            from ascendify.emulator import render

            sys.stdout.flush()
            render.render(rep)
    except Exception as e:  # the report must never turn a good run into a failure
        print(f"ascendify emulate: could not write the summary: {e}", file=sys.stderr)
    return code


def run_workers(prog: Program, *, json_path: str | None, quiet: bool) -> int:
    """Run a launcher job (torchrun, accelerate launch) with every worker started as ``python -m ascendify
    emulate --json TMP -q -- SCRIPT ARGS``; then gather the workers' reports into one summary (every rank's
    counts, each rank's line) and, with ``json_path``, one JSON file. Returns the launcher's exit status."""
    import glob
    import tempfile

    from ascendify.emulator import render

    if prog.kind == "accelerate":  # accelerate's launcher picks multi-NPU (and the process count) by what it sees
        import ascendify.emulator as emu

        try:
            emu.enable()
        except (emu.EmulatorError, ValueError) as e:
            print(f"ascendify emulate: {e}", file=sys.stderr)
            return 3
    with tempfile.TemporaryDirectory(prefix="ascendify-emulate-") as tmp:
        code = prog.relaunch(["emulate", "--json", os.path.join(tmp, "worker.json"), "-q", "--"],
                             who="ascendify emulate")
        reports = []
        for path in sorted(glob.glob(os.path.join(tmp, "worker*.json"))):
            try:
                with open(path) as f:
                    reports.append(json.load(f))
            except (OSError, ValueError):
                continue  # a worker killed while writing: its peers' reports still count
    if not reports:
        print("ascendify emulate: no worker wrote a report (did the launcher start any?)", file=sys.stderr)
        return code
    try:
        rep = render.merge(reports)
        rep["exit_code"] = code
        rep["program"] = prog.display()
        if json_path:
            write_atomic(json_path, json.dumps(rep, indent=2, default=str) + "\n")
        if not quiet:
            sys.stdout.flush()
            render.render(rep)
    except Exception as e:  # the report must never turn a good run into a failure
        print(f"ascendify emulate: could not write the summary: {e}", file=sys.stderr)
    return code

