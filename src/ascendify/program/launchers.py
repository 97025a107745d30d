"""Launchers, recognised by what they are: a program line that starts with a launcher starts worker processes.

``torchrun`` and ``accelerate`` are console scripts: small Python files that pip writes into ``bin/``, whose body
is ``from torch.distributed.run import main`` / ``from accelerate.commands.accelerate_cli import main`` and
``sys.exit(main())``. A program line names one by a bare name (``accelerate``: found on ``PATH`` or, when the
environment's ``bin/`` is not on ``PATH``, among the installed distributions' ``console_scripts`` entry points),
by a path (``/venv/bin/torchrun``, ``$(which accelerate)``), or after an interpreter (``python
/venv/bin/torchrun``). :func:`entry_module` reads which module the script runs; :data:`LAUNCHERS` says which of
those start workers. Any other console script is an ordinary Python script.

Running a launcher job under a verb means running the launcher itself here, with every worker started as
``python -m ascendify VERB ... -- SCRIPT ARGS`` instead of ``python SCRIPT ARGS`` (:func:`relaunch_accelerate`;
torchrun's is :func:`ascendify.program.scriptrun.relaunch_torchrun`), so that each worker runs under the verb
and writes its own report. This module imports nothing heavy; accelerate only to parse or run its line.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

# the module a console script runs -> the launcher it is (None: a launcher command that runs no program)
LAUNCHERS = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",  # the accelerate-launch console script
    "accelerate.commands.accelerate_cli": "accelerate",  # accelerate SUBCOMMAND: only "launch" runs a program
}
ACCELERATE_CLI = "accelerate.commands.accelerate_cli"

# pip's console-script template (also setuptools' and uv's): "from MODULE import FUNC" ... "sys.exit(FUNC())"
_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)\s*$", re.MULTILINE)


def entry_module(word: str) -> str | None:
    """The module that the console script ``word`` runs (``torch.distributed.run`` for ``torchrun``), or None:
    not a console script. ``word``: a path, or a bare name looked up on ``PATH`` and then among the installed
    console scripts."""
    path = word if os.path.isfile(word) else None
    if path is None and os.sep not in word:
        found = shutil.which(word)
        path = found if found and os.path.isfile(found) else None
        if path is None:
            return _installed_entry_point(word)
    return _script_module(path) if path else None


def _script_module(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if not head.startswith(b"#!") or b"python" not in head.split(b"\n", 1)[0]:
        return None
    text = head.decode("utf-8", "replace")
    for m in _IMPORT.finditer(text):
        if re.search(rf"sys\.exit\(\s*{re.escape(m.group(2))}\(\)\s*\)", text):
            return m.group(1)
    return None


def _installed_entry_point(name: str) -> str | None:
    """``console_scripts`` entry point ``name`` of an installed distribution: its module (None: none)."""
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group="console_scripts", name=name):
            return ep.module
    except Exception:  # a broken distribution's metadata must not break the program line
        return None
    return None


def launcher(word: str) -> str | None:
    """``torchrun``, ``accelerate`` or None, for the first word of a program line."""
    module = entry_module(word)
    return LAUNCHERS.get(module) if module else None


def accelerate_line(tokens: list[str], module: str | None) -> list[str]:
    """The arguments of ``accelerate launch`` from the words after the console script (``launch ARGS`` for the
    ``accelerate`` command, ``ARGS`` for ``accelerate-launch`` / ``-m accelerate.commands.launch``); ValueError
    for an accelerate command that runs no program."""
    if module == ACCELERATE_CLI:
        if not tokens or tokens[0] != "launch":
            sub = tokens[0] if tokens else "(none)"
            raise ValueError(f"accelerate {sub} does not run a program: give accelerate launch [OPTS] SCRIPT ARGS")
        return tokens[1:]
    return tokens


def parse_accelerate(args: list[str]):
    """accelerate's own parse of ``accelerate launch ARGS`` (its namespace); ValueError with accelerate's message
    for a bad line, or when accelerate is not installed."""
    try:
        from accelerate.commands.launch import launch_command_parser
    except ImportError as e:
        raise ValueError(f"accelerate launch: accelerate is not importable here ({e})") from None
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return launch_command_parser().parse_args(args)
    except SystemExit:
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        msg = lines[-1].split("error:", 1)[-1].strip() if lines else "bad arguments"
        raise ValueError(f"accelerate launch {' '.join(args)}: {msg}") from None


def relaunch_accelerate(launch_args: list[str], ascendify_args: list[str], *, who: str) -> int:
    """Run ``accelerate launch LAUNCH_ARGS`` here, starting each worker as ``python -m ascendify ASCENDIFY_ARGS
    SCRIPT ARGS`` (accelerate hands its workers to torchrun, or starts one itself: both take the rewritten
    script). Returns the exit status (1 when a worker failed; the launcher has printed why)."""
    from ascendify.program.scriptrun import exit_code

    a = parse_accelerate(launch_args)
    if a.no_python:
        print(f"{who}: accelerate launch --no_python runs a program that is not Python: it cannot run under "
              "ascendify", file=sys.stderr)
        return 2
    from accelerate.commands.launch import launch_command

    inner = ["-m", a.training_script] if a.module else [a.training_script]
    a.training_script_args = [*ascendify_args, *inner, *a.training_script_args]
    a.training_script = "ascendify"
    a.module = True
    try:
        launch_command(a)
    except SystemExit as e:
        return exit_code(e)
    except Exception as e:  # torchrun's ChildFailedError, a CalledProcessError of the single-process launcher
        print(f"{who}: accelerate launch failed: {e.__class__.__name__}", file=sys.stderr)
        return 1
    return 0
