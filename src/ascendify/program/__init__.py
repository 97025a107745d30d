"""A program to run, as the user spelled it on the command line: one parser for every verb that runs one.

``ascendify run``, ``ascendify emulate`` (and ``dump``, ``bench``, ``train``) take the program after their own
options, in any of these forms (a leading ``--`` is dropped)::

    script.py ARGS                          a script
    -m package.module ARGS                  a module, like python -m
    python [OPTS] script.py ARGS            "python", "python3", "python3.11", a path to one, sys.executable
    python [OPTS] -m package.module ARGS
    torchrun [OPTS] script.py ARGS          also: python -m torch.distributed.run / torch.distributed.launch
    accelerate launch [OPTS] script.py ARGS also: accelerate-launch, python -m accelerate.commands.launch

Launchers are recognised by what they are, not by their name: a console script (``torchrun``, ``accelerate``, a
path to one, ``$(which accelerate)``, ``python /venv/bin/torchrun``) whose entry point is torch.distributed.run's
or accelerate's (:mod:`ascendify.program.launchers`); a bare name is looked up on ``PATH`` and among the installed
console scripts, so ``accelerate launch ...`` works where the environment's ``bin/`` is not on ``PATH``.

API (this module imports nothing heavy; torch only to read torchrun's options, and only when it is there)::

    from ascendify.program import Program, ProgramError, rank_result_path

    prog = Program.parse(argv)          # ProgramError (a ValueError) with a clear message for a bad line
    prog.kind                           # "script" | "module" | "torchrun" | "accelerate"
    prog.launches_workers               # torchrun or accelerate launch: workers started by a launcher
    prog.path, prog.module              # the script (kind script; torchrun when it runs a script) / the module
    prog.args                           # the program's own arguments (torchrun: the worker script's)
    prog.python_opts                    # interpreter options given before the script, e.g. ["-u", "-W", "ignore"]
    prog.torchrun_args                  # torchrun: everything after "torchrun" (its options, script, args)
    prog.launcher_args                  # accelerate: everything after "accelerate launch"
    prog.display()                      # one shell-quoted line, for reports
    prog.argv                           # sys.argv as the program will see it
    prog.run_in_process()               # run it here as __main__ (ascendify.program.scriptrun); returns its exit status
    prog.relaunch(["emulate", "-q", "--"], who="ascendify emulate")
                                        # the launcher starting each worker as python -m ascendify emulate -q -- SCRIPT
                                        # ARGS (relaunch_torchrun: the same, for torchrun jobs only)
    rank_result_path("out.json")        # out.json on rank 0 (or no distributed run), out.rank3.json on rank 3

Interpreter options act on the running interpreter where they can: ``-u`` (unbuffered stdout/stderr), ``-W
FILTER`` (a warnings filter), ``-B`` (no .pyc); ``-O``, ``-X``, ``-E``, ``-s``, ``-I``, ``-P``, ``-b``, ``-d``,
``-v``, ``-q`` are accepted and have no effect (the interpreter is already running; a note says so). ``-c``,
``-i`` and a program on stdin (``-``) are refused: they are not a program ascendify can run.

Errors name the program and what is wrong: no such script, a directory, not a Python file that exists, no such
module (looked up without importing anything: the check never runs the user's code), ``-m`` without a module,
torchrun ``--no-python``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ascendify.program import launchers

__all__ = ["Program", "ProgramError", "rank_result_path", "current_rank", "is_rank_zero"]

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_TORCHRUN_NAMES = ("torchrun", "torchrun.py")
USAGE = ("SCRIPT ARGS, -m MODULE ARGS, python [OPTS] SCRIPT ARGS, torchrun [OPTS] SCRIPT ARGS or accelerate launch "
         "[OPTS] SCRIPT ARGS")

# interpreter options: flags (may be combined: -uB) and options taking a value (-W ignore, -Wignore)
_PY_FLAGS = set("bBdEIOPqsSuvx")
_PY_VALUED = set("WX")
_PY_REFUSED = {"c": "python -c runs a string, not a program", "i": "python -i is interactive",
               "h": "python -h prints help", "V": "python -V prints the version", "-": "a program on stdin"}


class ProgramError(ValueError):
    """A program line that cannot be run; the message says why (no ``ascendify ...:`` prefix)."""


@dataclass(frozen=True)
class Program:
    kind: str  # "script" | "module" | "torchrun" | "accelerate"
    path: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)
    python_opts: list[str] = field(default_factory=list)
    torchrun_args: list[str] = field(default_factory=list)
    launcher_args: list[str] = field(default_factory=list)

    # -- parsing -------------------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, argv: Sequence[str], *, check: bool = True) -> Program:
        """Parse a program line (see the module docstring). ``check``: the script or module must exist."""
        rest = list(argv)
        if rest and rest[0] == "--":
            rest = rest[1:]
        if not rest:
            raise ProgramError(f"give a program to run: {USAGE}")
        opts: list[str] = []
        if is_python(rest[0]):
            rest, opts = _split_python_options(rest[1:])
            if not rest:
                raise ProgramError(f"{shlex.join(argv)}: no script after the interpreter: give {USAGE}")
        head = rest[0]
        if head == "-m" or (head.startswith("-m") and len(head) > 2):
            module, args = (rest[1] if len(rest) > 1 else None, rest[2:]) if head == "-m" else (head[2:], rest[1:])
            if not module:
                raise ProgramError("-m needs a module name: -m package.module ARGS")
            if module in TORCHRUN_MODULES:
                return cls._torchrun(args, opts, check)
            if launchers.LAUNCHERS.get(module) == "accelerate":
                return cls._accelerate(args, module, opts, check)
            if check:
                _check_module(module)
            return cls("module", module=module, args=list(args), python_opts=opts)
        entry = None
        if not head.startswith("-"):
            entry = launchers.entry_module(head)  # a console script: torchrun, accelerate, or another one
            kind = launchers.LAUNCHERS.get(entry) if entry else None
            if kind == "torchrun":
                return cls._torchrun(rest[1:], opts, check)
            if kind == "accelerate":
                return cls._accelerate(rest[1:], entry, opts, check)
        if os.path.basename(head) in _TORCHRUN_NAMES and not os.path.isfile(head):
            return cls._torchrun(rest[1:], opts, check)
        if entry and not os.path.exists(head) and os.sep not in head:  # another console script, by its name
            found = shutil.which(head)
            if found:
                head = found
        if head.startswith("-") and not os.path.exists(head):
            raise ProgramError(f"{head}: not a script and not an option ascendify knows here: give {USAGE}")
        if check:
            _check_script(head)
        return cls("script", path=head, args=rest[1:], python_opts=opts)

    @classmethod
    def _torchrun(cls, targs: list[str], opts: list[str], check: bool) -> Program:
        path = module = None
        args: list[str] = []
        parsed = _parse_torchrun(targs)
        if parsed is not None:
            if parsed.no_python:
                raise ProgramError("torchrun --no-python runs a program that is not Python: it cannot run under "
                                   "ascendify")
            if parsed.module:
                module = parsed.training_script
            else:
                path = parsed.training_script
            args = list(parsed.training_script_args)
            if check and path is not None:
                _check_script(path)
            if check and module is not None:
                _check_module(module)
        return cls("torchrun", path=path, module=module, args=args, python_opts=opts, torchrun_args=list(targs))

    @classmethod
    def _accelerate(cls, tokens: list[str], module: str | None, opts: list[str], check: bool) -> Program:
        try:
            largs = launchers.accelerate_line(list(tokens), module)
            parsed = launchers.parse_accelerate(largs)
        except ValueError as e:
            raise ProgramError(str(e)) from None
        if parsed.no_python:
            raise ProgramError("accelerate launch --no_python runs a program that is not Python: it cannot run "
                               "under ascendify")
        path = module_name = None
        if parsed.module:
            module_name = parsed.training_script
        else:
            path = parsed.training_script
        if check and path is not None:
            _check_script(path)
        if check and module_name is not None:
            _check_module(module_name)
        return cls("accelerate", path=path, module=module_name, args=list(parsed.training_script_args),
                   python_opts=opts, launcher_args=largs)

    # -- describing ----------------------------------------------------------------------------------------------

    @property
    def launches_workers(self) -> bool:
        """True for a launcher job (torchrun, accelerate launch): it starts the program in worker processes."""
        return self.kind in ("torchrun", "accelerate")

    @property
    def argv(self) -> list[str]:
        """``sys.argv`` as the program sees it (``-m``: the module's name; runpy replaces it with its file)."""
        return [self.path if self.path is not None else str(self.module), *self.args]

    def display(self) -> str:
        """One shell-quoted line: ``python -u train.py --lr 1``, ``python -m pkg.train``, ``torchrun ...``."""
        if self.kind == "torchrun":
            return shlex.join(["torchrun", *self.torchrun_args])
        if self.kind == "accelerate":
            return shlex.join(["accelerate", "launch", *self.launcher_args])
        target = [self.path] if self.kind == "script" else ["-m", str(self.module)]
        return shlex.join(["python", *self.python_opts, *target, *self.args])

    # -- running -------------------------------------------------------------------------------------------------

    def run_in_process(self, *, run_script: Callable[[str], object] | None = None,
                       hide_frames_of: Iterable[str] = (),
                       explain: Callable[[BaseException], str | None] | None = None) -> int:
        """Run the script or module in this process as ``__main__`` and return its exit status
        (:func:`ascendify.program.scriptrun.run_as_main`; ``run_script``, ``hide_frames_of`` and ``explain`` are passed on).
        Interpreter options are applied for the run and undone afterwards."""
        from ascendify.program.scriptrun import run_as_main

        if self.launches_workers:
            raise ProgramError(f"a {self.kind} job starts worker processes: use relaunch() (relaunch_torchrun())")
        undo = _apply_python_options(self.python_opts)
        try:
            return run_as_main(self.path, self.module, list(self.args), run_script=run_script,
                               hide_frames_of=hide_frames_of, explain=explain)
        finally:
            undo()

    def relaunch_torchrun(self, ascendify_args: list[str], *, who: str) -> int:
        """Run torchrun with this job's options, starting each worker as ``python -m ascendify ASCENDIFY_ARGS
        SCRIPT ARGS`` (``ascendify_args`` is the bootstrap, e.g. ``["run", "--to", "npu"]``); returns torchrun's
        exit status. ``who`` names the verb in messages."""
        from ascendify.program.scriptrun import relaunch_torchrun

        if self.kind != "torchrun":
            raise ProgramError(f"{self.display()} is not a torchrun job")
        return relaunch_torchrun(list(self.torchrun_args), list(ascendify_args), who=who)

    def relaunch(self, ascendify_args: list[str], *, who: str) -> int:
        """Run this launcher job (torchrun or accelerate launch) here, starting each worker as ``python -m
        ascendify ASCENDIFY_ARGS SCRIPT ARGS``; returns the launcher's exit status."""
        if self.kind == "accelerate":
            return launchers.relaunch_accelerate(list(self.launcher_args), list(ascendify_args), who=who)
        return self.relaunch_torchrun(ascendify_args, who=who)


# -- per-rank result files -----------------------------------------------------------------------------------------


def current_rank() -> int:
    """This process's global rank from ``RANK`` (0 when unset or not a number)."""
    try:
        return int(os.environ.get("RANK", "") or 0)
    except ValueError:
        return 0


def is_rank_zero() -> bool:
    return current_rank() == 0


def rank_result_path(base: str | os.PathLike[str], rank: int | None = None) -> str:
    """Where ``rank`` (default: this process's) writes a result asked for as ``base``: ``base`` itself on rank 0,
    ``NAME.rankN.EXT`` on rank N > 0 (``run.json`` -> ``run.rank3.json``; no extension -> ``.json``).

    >>> rank_result_path("out/run.json", 0), rank_result_path("out/run.json", 3), rank_result_path("log", 1)
    ('out/run.json', 'out/run.rank3.json', 'log.rank1.json')
    """
    base = os.fspath(base)
    rank = current_rank() if rank is None else rank
    if rank == 0:
        return base
    root, ext = os.path.splitext(base)
    return f"{root}.rank{rank}{ext or '.json'}"


# -- helpers -------------------------------------------------------------------------------------------------------


def is_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11``, a path to one, or this interpreter's path."""
    if word == sys.executable:
        return True
    base = os.path.basename(word)
    if base.endswith(".exe"):
        base = base[:-4]
    if base in ("python", "python3"):
        return True
    ver = base[len("python3."):] if base.startswith("python3.") else ""
    return ver.isdigit()


def _split_python_options(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Split ``[OPTS] SCRIPT|-m MOD ...`` after an interpreter name into (rest, opts)."""
    opts: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            return tokens[i + 1:], opts
        if tok == "-" or not tok.startswith("-") or tok.startswith("-m"):
            if tok == "-":
                raise ProgramError(f"python -: {_PY_REFUSED['-']}; give {USAGE}")
            return tokens[i:], opts
        if tok.startswith("--"):
            if tok in ("--help", "--version"):
                raise ProgramError(f"python {tok} does not run a program; give {USAGE}")
            opts.append(tok)  # --check-hash-based-pycs MODE and the like: no effect here
            if tok == "--check-hash-based-pycs" and i + 1 < len(tokens):
                opts.append(tokens[i + 1])
                i += 1
            i += 1
            continue
        j = 1
        while j < len(tok):
            ch = tok[j]
            if ch in _PY_REFUSED:
                raise ProgramError(f"python -{ch}: {_PY_REFUSED[ch]}; give {USAGE}")
            if ch == "m":  # -um pkg.mod / -umpkg.mod: the flags before m are already in opts
                name = tok[j + 1:]
                return ["-m", *([name] if name else []), *tokens[i + 1:]], opts
            if ch in _PY_VALUED:
                value = tok[j + 1:]
                if not value:
                    if i + 1 >= len(tokens):
                        raise ProgramError(f"python -{ch} needs a value")
                    i += 1
                    value = tokens[i]
                opts += [f"-{ch}", value]
                break
            if ch not in _PY_FLAGS:
                raise ProgramError(f"python -{ch}: unknown interpreter option")
            opts.append(f"-{ch}")
            j += 1
        i += 1
    return [], opts


def _apply_python_options(opts: list[str]) -> Callable[[], None]:
    """Make the options that can act on a running interpreter do so; return an undo function."""
    import warnings

    undo: list[Callable[[], None]] = []
    ignored: list[str] = []
    i = 0
    while i < len(opts):
        o = opts[i]
        if o == "-u":
            for stream in (sys.stdout, sys.stderr):
                if hasattr(stream, "reconfigure") and hasattr(stream, "write_through"):
                    old = stream.write_through
                    stream.reconfigure(write_through=True)
                    undo.append(lambda s=stream, w=old: s.reconfigure(write_through=w))
        elif o == "-B":
            old_b = sys.dont_write_bytecode
            sys.dont_write_bytecode = True
            undo.append(lambda b=old_b: setattr(sys, "dont_write_bytecode", b))
        elif o == "-W":
            i += 1
            saved = warnings.filters[:]
            warnings._processoptions([opts[i]])  # what the interpreter does with -W
            undo.append(lambda f=saved: warnings.filters.__setitem__(slice(None), f))
        elif o in ("-X", "--check-hash-based-pycs"):
            i += 1
            ignored.append(f"{o} {opts[i]}")
        else:
            ignored.append(o)
        i += 1
    if ignored:
        print(f"ascendify: interpreter option(s) {' '.join(ignored)} have no effect: the interpreter is already "
              "running", file=sys.stderr)

    def restore() -> None:
        for fn in reversed(undo):
            fn()

    return restore


def _check_script(path: str) -> None:
    if os.path.isdir(path):
        hint = (f"give its script ({os.path.join(path, '__main__.py')}) or run it as a module (-m NAME)"
                if os.path.isfile(os.path.join(path, "__main__.py")) else "give a Python script")
        raise ProgramError(f"{path} is a directory: {hint}")
    if not os.path.exists(path):
        raise ProgramError(f"no such script: {path}")
    if not os.path.isfile(path):
        raise ProgramError(f"{path} is not a regular file: give a Python script")


def _check_module(module: str) -> None:
    """Find ``module`` the way ``python -m`` would, without importing (running) any of the user's code."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ProgramError(f"-m {module}: not a module name")
    search: list[str] | None = [os.getcwd(), *sys.path]
    for k, part in enumerate(parts):
        name = ".".join(parts[: k + 1])
        if k == 0 and (name in sys.modules or name in sys.builtin_module_names):
            locs = getattr(sys.modules.get(name), "__path__", None)
            if locs is None:
                return  # a builtin or an already imported plain module: Python decides when it runs
            search = list(locs)
            continue
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, search)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            if k == 0:
                try:  # a meta-path finder other than the path (a zip, an editable install's finder)
                    spec = importlib.util.find_spec(name)
                except (ImportError, ValueError):
                    spec = None
            if spec is None:
                where = "" if k == 0 else f" (package {'.'.join(parts[:k])} has no {part})"
                raise ProgramError(f"no such module: {module}{where}")
        search = list(spec.submodule_search_locations or []) or None
        if search is None and k < len(parts) - 1:
            raise ProgramError(f"no such module: {module} ({name} is not a package)")


def _parse_torchrun(targs: list[str]):
    """torchrun's own parse of its arguments (None when torch is not installed)."""
    try:
        from torch.distributed.run import get_args_parser
    except ImportError:
        return None
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return get_args_parser().parse_args(targs)
    except SystemExit:
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        msg = lines[-1].split("error:", 1)[-1].strip() if lines else "bad arguments"
        raise ProgramError(f"torchrun {shlex.join(targs)}: {msg}") from None
