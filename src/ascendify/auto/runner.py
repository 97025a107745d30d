"""Running the user's program under redirection: scripts, ``-m`` modules, and torchrun jobs.

The program runs *in this process* (``runpy``), as Python would run it: ``sys.argv`` is the script and its
arguments, ``__name__ == "__main__"``, ``sys.path[0]`` is the script's folder (the current folder for ``-m``),
and its exit status is ours. The report is printed (rank 0 only) and logged when it ends, however it ends.

torchrun: ``ascendify run --to npu torchrun --nproc-per-node 2 train.py`` (or ``-m torch.distributed.run``)
starts each worker as ``python -m ascendify run --to npu train.py``, so every rank is redirected; the launcher
itself is not. ``torchrun ... -m ascendify run --to npu train.py`` is the same, spelled by hand.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascendify.program import Program


def enable_for_process(target: str, *, strict: bool, log: str | None, entry: str | None, quiet: bool,
                       at_exit: bool = True, implicit: bool = False, rewrite_checks: bool = False):
    """Enable redirection, look at the entry script, and (``at_exit``) report when the process ends."""
    from ascendify.auto import runtime
    from ascendify.auto.scan import scan_file

    s = runtime.enable(target, strict=strict)
    s.implicit = implicit
    rewrite = rewrite_checks and s.target.device_type != "cuda"
    if rewrite:
        from ascendify.auto.rewrite import RewriteFinder

        finder = RewriteFinder(s.target.device_type, s.target.dist_backend, s.rec)
        finder.install()
        s.patches.on_restore(finder.remove)
        s.rewrite_checks = True
    saved = os.environ.get("ASCENDIFY_REWRITE_CHECKS")
    os.environ["ASCENDIFY_REWRITE_CHECKS"] = "1" if rewrite else "0"  # for spawned children
    s.patches.on_restore(lambda: os.environ.pop("ASCENDIFY_REWRITE_CHECKS", None) if saved is None
                         else os.environ.__setitem__("ASCENDIFY_REWRITE_CHECKS", saved))
    if entry and not (rewrite and _not_started(entry)):  # a script compiled with the rewrite reports itself
        s.rec.findings.extend(scan_file(entry))
    if at_exit:
        atexit.register(finish, log=log, quiet=quiet)
    return s


_FINISHED = False


def finish(*, log: str | None, quiet: bool) -> dict[str, Any] | None:
    """Print the summary (rank 0, unless quiet) and write the JSON log. Runs once."""
    global _FINISHED
    from ascendify.auto import render, runtime

    s = runtime.current()
    if s is None or _FINISHED:
        return None
    _FINISHED = True
    rep = runtime.report_of(s)
    if log:
        try:
            path = render.write_log(rep, log)
            if not quiet and render.is_rank_zero():
                print(f"ascendify: run report written to {path}", file=sys.stderr)
        except OSError as e:
            print(f"ascendify: cannot write {log}: {e}", file=sys.stderr)
    if not quiet and render.is_rank_zero():
        try:
            sys.stdout.flush()
            render.render(rep)
        except Exception as e:  # the report must never turn a good run into a failure
            print(f"ascendify: could not print the run report: {e}", file=sys.stderr)
    return rep


def run_program(prog: Program) -> int:
    """Run a script or module (:class:`ascendify.program.Program`) as ``__main__``; return its exit status."""
    return prog.run_in_process(run_script=_run_rewritten if _rewriting() else None, hide_frames_of=(__file__,))


def _not_started(entry: str) -> bool:
    """True when ``entry`` is not yet running (``ascendify run``: it will be compiled with the rewrite);
    False when it is the already-running ``__main__`` (``import ascendify.auto``: it can only be scanned)."""
    main = sys.modules.get("__main__")
    return os.path.abspath(getattr(main, "__file__", "") or "") != os.path.abspath(entry)


def _rewriting() -> bool:
    from ascendify.auto import runtime

    s = runtime.current()
    return s is not None and getattr(s, "rewrite_checks", False)


def _run_rewritten(path: str) -> None:
    """Like ``runpy.run_path(path, run_name="__main__")``, compiling the script with its device checks
    rewritten (:mod:`ascendify.auto.rewrite`)."""
    import builtins
    import types

    from ascendify.auto import runtime
    from ascendify.auto.rewrite import compile_user_source

    s = runtime.current()
    with open(path, "rb") as f:
        code = compile_user_source(f.read(), path, s.target.device_type, s.target.dist_backend, s.rec)
    mod = types.ModuleType("__main__")
    mod.__dict__.update(__file__=path, __builtins__=builtins, __spec__=None, __loader__=None, __package__=None,
                        __cached__=None)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = mod
    try:
        exec(code, mod.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_torchrun(prog: Program, child_flags: list[str]) -> int:
    """Start each worker of ``prog`` (torchrun, accelerate launch) as ``python -m ascendify run FLAGS SCRIPT
    ARGS``."""
    return prog.relaunch(["run", *child_flags], who="ascendify run")


def scan_module(module: str) -> None:
    """Report the CUDA checks of module ``module``'s file (when the check rewrite, which reports them, is off),
    and count its package as the user's code even when it is installed in site-packages."""
    import importlib.util

    from ascendify.auto import runtime
    from ascendify.auto.scan import scan_file

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return
    s = runtime.current()
    if spec is not None and spec.origin and spec.origin.endswith(".py") and s is not None:
        s.rec.findings.extend(scan_file(spec.origin))
        # the entry package is the user's code even when it is installed in site-packages
        from ascendify.program.frames import add_user_root

        top = importlib.util.find_spec(module.split(".")[0])
        if top is not None and top.submodule_search_locations:
            for loc in top.submodule_search_locations:
                add_user_root(loc)
        else:
            add_user_root(spec.origin)  # a single-file module: that file only
