"""Run a program with a global dump installed (``ascendify dump``), then summarise what was written."""

from __future__ import annotations

import sys

from ascendify.precision.dumper import DEFAULT_MAX_BYTES, Dumper, DumpTooLarge, set_active
from ascendify.precision.msprobe_io import DumpWriteError


def make_runner(prog, *, emulate: bool = False, to: str | None = None):
    """How to run ``prog``: on the emulated npu (``emulate``), with CUDA redirected to ``to``, or as it is. Returns
    a callable ``runner(hide_frames_of=...) -> exit status``, or 3 (printed) when the setting cannot be had."""
    if emulate:
        import ascendify.emulator as emu

        try:
            emu.enable()
        except (emu.EmulatorError, ValueError) as e:
            print(f"ascendify dump: {e}", file=sys.stderr)
            return 3
    runner = prog.run_in_process
    if to:
        from ascendify.auto import runner as auto_runner

        try:
            auto_runner.enable_for_process(to, strict=False, log=None, entry=prog.path, quiet=True,
                                           at_exit=False, rewrite_checks=True)  # fmt: skip
        except Exception as e:
            print(f"ascendify dump: --to {to}: {e}", file=sys.stderr)
            return 3

        def runner(hide_frames_of=()):
            return auto_runner.run_program(prog)

    return runner


def run_program(prog, conf: dict, *, emulate: bool = False, to: str | None = None, json_path: str | None = None,
                quiet: bool = False) -> int:
    """Run ``prog`` (``ascendify.program.Program``) as ``__main__`` with every module and API call dumped as
    ``conf`` says (level, mode, steps, ranks, scope, output, max_bytes, backward). ``emulate``: on the emulated
    npu; ``to``: CUDA calls redirected to that target as ``ascendify run --to`` does. Returns the exit status."""
    runner = make_runner(prog, emulate=emulate, to=to)
    if isinstance(runner, int):
        return runner
    dumper = Dumper(
        None,
        conf["output"],
        level=conf["level"],
        mode=conf["mode"],
        steps=conf["steps"],
        ranks=conf["ranks"],
        scope=conf["scope"],
        backward=conf["backward"],
        max_bytes=conf["max_bytes"] or DEFAULT_MAX_BYTES,
        step_on_optimizer=conf.get("step_at", "auto") != "call",
    )
    dumper.explicit_steps_win = conf.get("step_at", "auto") == "auto"
    set_active(dumper)
    dumper.start()
    code = 0
    error: BaseException | None = None
    try:
        code = runner(hide_frames_of=[__file__])
    finally:
        try:
            dumper.stop()
        except (DumpTooLarge, DumpWriteError, OSError) as e:
            error = e
        set_active(None)
    if error is None and dumper.error is not None:
        error = dumper.error
    if error is not None:
        print(f"ascendify dump: {error}", file=sys.stderr)
    summary = {
        "program": prog.display(),
        "exit_code": code,
        "output": str(dumper.root),
        "level": dumper.level,
        "mode": dumper.mode,
        "steps_seen": dumper.steps_seen,
        "written": [
            {"folder": str(w["folder"]), "step": w["step"], "rank": w["rank"], "nodes": w["nodes"]}
            for w in dumper.written_info
        ],
        "error": str(error) if error else None,
        "scope": list(dumper.scope),
    }
    if json_path:
        from ascendify import report
        from ascendify.program import rank_result_path

        report.write_json(rank_result_path(json_path), summary)
    if not quiet:
        _print_summary(summary)
    if error is not None:
        return 4
    return code


def _print_summary(summary: dict) -> None:
    from ascendify import report

    con = report.console(stderr=True)
    rows = summary["written"]
    what = f"{report.plural(len(rows), 'step')} written to {summary['output']}" if rows else "nothing written"
    con.print(
        f"ascendify dump: {what} "
        f"(level {summary['level']}, mode {summary['mode']}; the program saw "
        f"{report.plural(summary['steps_seen'], 'step')})"
    )
    if rows:
        cols = [
            report.Column("step", kind="number"),
            report.Column("rank", kind="number"),
            report.Column("nodes", kind="number"),
            report.Column("folder", kind="path"),
        ]
        report.print_table(cols, rows, console_=con)
    elif summary["exit_code"] == 0 and not summary["error"]:
        scope = summary.get("scope")
        if scope:  # the likelier reason: the scope named nothing the program ran
            con.print(f"nothing was recorded: --scope {','.join(scope)} matched no module path or API the "
                      "program called in the selected steps (module paths as in named_modules(): layers.0)")
        else:
            con.print("nothing was recorded: did the program run any torch module or API call in the selected "
                      "steps?")
