"""Run a user's program in this process as Python would: a script or a ``-m`` module as ``__main__``.

Verbs reach it through :meth:`ascendify.program.Program.run_in_process` / ``relaunch_torchrun`` (which parse the
program line first); this module is the mechanism. ``sys.argv`` is the program and its arguments,
``sys.path[0]`` the script's folder (the current folder for ``-m``), and its exit status is returned: 0, the
``SystemExit`` code, 130 on Ctrl-C, 1 on an uncaught exception (printed as ``python script.py`` would print it:
ascendify's frames folded into one line, see :func:`print_user_traceback`).
``sys.argv`` and ``sys.path`` are restored afterwards.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
from collections.abc import Callable, Iterable


def exit_code(e: SystemExit) -> int:
    """The process exit status a ``SystemExit`` stands for (a message is printed and means 1)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run_as_main(
    path: str | None,
    module: str | None,
    args: list[str],
    *,
    run_script: Callable[[str], object] | None = None,
    hide_frames_of: Iterable[str] = (),
    explain: Callable[[BaseException], str | None] | None = None,
) -> int:
    """Run script ``path`` (or ``module``) as ``__main__`` with ``args``; return its exit status.

    ``run_script(path)`` replaces ``runpy.run_path`` (``ascendify run`` compiles the script its own way);
    frames of the files in ``hide_frames_of`` are left out of a printed traceback, as are this module's and
    runpy's. ``explain(exc)`` may return advice, printed after the traceback of an uncaught exception.
    """
    if (path is None) == (module is None):
        raise ValueError("give exactly one of path and module")
    hidden = {__file__, runpy.__file__, *hide_frames_of}
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    hidden.update(_HIDDEN)
    code, error = 1, None
    try:
        for hook in list(_START_HOOKS):
            hook()
        if module is not None:
            sys.argv = [module, *args]  # runpy sets argv[0] to the module's file
            if not sys.path or sys.path[0] != os.getcwd():
                sys.path.insert(0, os.getcwd())
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            assert path is not None
            sys.argv = [path, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            if run_script is not None:
                run_script(path)
            else:
                runpy.run_path(path, run_name="__main__")
        code = 0
        return 0
    except SystemExit as e:
        code = exit_code(e)
        return code
    except KeyboardInterrupt as e:
        etype, value, tb = sys.exc_info()
        print_user_traceback(etype, value, tb, hidden, script=path)  # as python shows Ctrl-C: no launcher frames
        code, error = 130, e
        return 130
    except BaseException:
        etype, value, tb = sys.exc_info()
        error = value
        print_user_traceback(etype, value, tb, hidden, script=path)
        advice = _explain(explain, value)
        if advice:
            print(advice, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        for hook in list(_EXIT_HOOKS):
            hook(code, error)


_EXIT_HOOKS: list[Callable[[int, BaseException | None], None]] = []
_START_HOOKS: list[Callable[[], None]] = []
_HIDDEN: set[str] = set()


def at_program_start(hook: Callable[[], None]) -> None:
    """Call ``hook()`` just before a program run by :func:`run_as_main` starts (after the tool's own set-up): a
    time budget counts the program's time, not the imports and patches before it."""
    _START_HOOKS.append(hook)


def at_program_exit(hook: Callable[[int, BaseException | None], None], *, hide: str | None = None) -> None:
    """Call ``hook(exit_status, error)`` when a program run by :func:`run_as_main` ends, however it ends (``error``:
    the exception that ended it, or None); ``hide``: a file whose frames are left out of the program's traceback
    (the hook's own, when it wraps the program's calls). How ``ascendify port`` watches a run without this
    module knowing of it."""
    _EXIT_HOOKS.append(hook)
    if hide:
        _HIDDEN.add(hide)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the ascendify package's folder
TOOL, USER, LIBRARY = "tool", "user", "library"


def _library_roots() -> tuple[str, ...]:
    from ascendify.program import frames

    return frames.library_roots()


def frame_kind(filename: str, hidden: Iterable[str] = (), script: str | None = None) -> str:
    """TOOL (ascendify, runpy, the files in ``hidden``), USER (the program's own files) or LIBRARY (the
    standard library, site-packages)."""
    if filename in hidden or filename.startswith("<frozen runpy") or filename == runpy.__file__:
        return TOOL
    if filename.startswith("<"):
        return LIBRARY
    path = os.path.abspath(filename)
    if script is not None and path == os.path.abspath(script):
        return USER
    if path.startswith(_PACKAGE + os.sep):
        return TOOL
    return LIBRARY if any(path.startswith(r + os.sep) for r in _library_roots()) else USER


class _FoldedStack(traceback.StackSummary):
    """A stack whose entries are frames or, for a run of tool frames, one line that stands for them."""

    def format(self) -> list[str]:
        out = []
        for item in self:
            out.append(item if isinstance(item, str) else self.format_frame_summary(item))
        return out


def _fold(stack: traceback.StackSummary, hidden: Iterable[str], script: str | None) -> traceback.StackSummary:
    """The user's view of ``stack``: the frames before the program's first (runpy, ascendify's launcher) left
    out, and each run of ascendify frames (with the library frames they called) folded into one line. A stack
    without a frame of the program's is kept whole."""
    kinds = [frame_kind(f.filename, hidden, script) for f in stack]
    # the program's first frame: its own code, else (a -m module installed in site-packages) a module body
    start = next((i for i, (f, k) in enumerate(zip(stack, kinds, strict=True))
                  if k == USER or k == LIBRARY and f.name == "<module>"), None)
    if start is None:
        return stack  # nothing of the program's: the error is ascendify's, shown whole
    frames, kinds = list(stack)[start:], kinds[start:]
    out: list = []
    run: list[traceback.FrameSummary] = []
    for frame, kind in zip(frames, kinds, strict=True):
        if kind == TOOL or run and kind == LIBRARY:
            run.append(frame)
            continue
        if run:
            out.append(_fold_line(run))
            run = []
        out.append(frame)
    if run:
        out.append(_fold_line(run))
    return _FoldedStack(out)


def _fold_line(run: list[traceback.FrameSummary]) -> str:
    """``  [ascendify.emulator: 3 frames folded]``: the sub-package of the first ascendify frame of the run."""
    where = "ascendify"
    for f in run:
        path = os.path.abspath(f.filename)
        if path.startswith(_PACKAGE + os.sep):
            parts = os.path.relpath(path, _PACKAGE).split(os.sep)
            where = "ascendify" + (f".{parts[0]}" if len(parts) > 1 else "")
            break
    n = len(run)
    return f"  [{where}: {n} frame{'s' if n != 1 else ''} folded]\n"


def print_user_traceback(etype, value, tb, hidden: Iterable[str] = (), *, script: str | None = None,
                         file=None) -> None:
    """Print an uncaught exception of the user's program as ``python script.py`` would show it: without the
    launcher's frames (runpy, ascendify), each run of ascendify's frames inside the program (the emulator's
    kernels, a redirected call) folded into one line, and a ``SyntaxError`` in the program's own file as the
    error alone. An exception with no frame of the program's is ascendify's own: it is printed whole."""
    hidden = frozenset(hidden)
    te = traceback.TracebackException(etype, value, tb, compact=True)
    for link in _chain(te):
        if (link.exc_type is not None and issubclass(link.exc_type, SyntaxError) and link.filename
                and frame_kind(link.filename, hidden, script) == USER
                and all(frame_kind(f.filename, hidden, script) != USER for f in link.stack)):
            link.stack = traceback.StackSummary.from_list([])  # the program's own syntax error: no frames
        else:
            link.stack = _fold(link.stack, hidden, script)
    print("".join(te.format()), end="", file=file if file is not None else sys.stderr)


def _chain(te: traceback.TracebackException):
    """``te`` and the exceptions it was raised from or during (``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        yield t
        todo.extend(x for x in (t.__cause__, t.__context__) if x is not None)


def _explain(explain: Callable[[BaseException], str | None] | None, exc: BaseException | None) -> str | None:
    if explain is None or exc is None:
        return None
    try:
        return explain(exc)
    except Exception:  # advice must never hide the user's own error
        return None


def relaunch_torchrun(torchrun_args: list[str], ascendify_args: list[str], *, who: str) -> int:
    """Run torchrun with ``torchrun_args``, starting each worker as ``python -m ascendify ASCENDIFY_ARGS SCRIPT ARGS``
    (so every rank runs under ``ascendify run`` / ``ascendify emulate``; the launcher itself does not).

    ``who`` names the verb in messages. Returns torchrun's exit status (1 when a worker failed; torchrun has
    already printed the workers' errors).
    """
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    a = get_args_parser().parse_args(torchrun_args)
    if a.no_python:
        print(f"{who}: torchrun --no-python runs a program that is not Python: it cannot run under ascendify",
              file=sys.stderr)
        return 2
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from ascendify.program import children

    inner = ["-m", a.training_script] if a.module else [a.training_script]
    a.training_script_args = [*ascendify_args, *inner, *a.training_script_args]
    a.training_script = "ascendify"
    a.module = True
    saved = os.environ.get(children.PARENT_VAR)
    children.mark_parent()  # each worker (python -m ascendify ...) dies with this launcher, however it ends
    try:
        torchrun(a)
    except SystemExit as e:
        return exit_code(e)
    except SignalException as e:  # Ctrl-C, SIGTERM: torchrun stopped its workers; exit as the signal would
        if e.sigval == signal.SIGINT:
            print(f"{who}: interrupted", file=sys.stderr)
        return 128 + int(e.sigval)
    except Exception as e:  # ChildFailedError
        print(f"{who}: torchrun failed: {e.__class__.__name__}", file=sys.stderr)
        return 1
    finally:
        if saved is None:
            os.environ.pop(children.PARENT_VAR, None)
        else:
            os.environ[children.PARENT_VAR] = saved
    return 0
