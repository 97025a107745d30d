"""The verbs' command-line front-ends, one module per verb (``ascendify <verb>``).

Each module exposes ``HELP`` (one line), optionally ``DESCRIPTION``, ``add_arguments(parser)`` and
``run(args) -> int``, and imports nothing heavy at module level: no torch, no numpy, no matplotlib, and not the
capability package itself (``ascendify --help`` and ``ascendify migrate`` run where torch is not installed).
``run`` imports the capability it drives. A verb that runs something on a device takes it with
:func:`add_device_argument`: the same ``--device`` words, with the same meaning, in every verb.
"""

from __future__ import annotations

EXIT_NEEDS_PACKAGE = 3


def requires(who: str, *modules: str) -> bool:
    """True when every one of ``modules`` can be imported; otherwise say on stderr which are missing and that
    ``who`` (``"ascendify run"``) needs them, and return False (the verb then returns ``EXIT_NEEDS_PACKAGE``).
    Nothing is imported: the check only looks for the modules."""
    import importlib.util
    import sys

    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        names = " and ".join(missing)
        hint = "PyTorch (pip install torch)" if missing == ["torch"] else names
        print(f"{who}: this command needs {hint}; {names} cannot be imported in {sys.executable}",
              file=sys.stderr)
    return not missing


def add_device_argument(parser, purpose: str, *, flags: tuple[str, ...] = ("--device",), dest: str = "device",
                        default: str | None = "auto", validate: bool = True, help: str | None = None):
    """The one ``--device`` option of every verb that runs something on a device: the same words with the same
    meaning everywhere (:func:`ascendify.device.placement.resolve`; ``purpose`` is the verb's: ``run``,
    ``train``, ``bench``, ``redirect``, ``port``, which only says what ``auto`` falls back to and what the verb
    cannot take). A word is checked as the command line is read (argparse's usage error, exit 2), unless
    ``validate`` is False: train, whose device may come from its ``--config`` file too, checks it when it
    resolves (the same message). ``help`` is said first, then the words and what ``auto`` means. Returns the
    argparse action (its ``purpose`` attribute names the purpose)."""
    import argparse

    from ascendify.device import placement  # torch-free

    def word(text: str) -> str:
        try:
            placement.check(text, purpose)
        except placement.DeviceSpecError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text.strip().lower()

    shown = " | ".join(placement.words(purpose))
    default_text = f"default {default}: " if default else "default auto: "
    text = f"{help + '; ' if help else ''}{shown} ({default_text}{placement.auto_means(purpose)})"
    action = parser.add_argument(*flags, dest=dest, default=default, metavar="DEVICE",
                                 type=word if validate else str, help=text)
    action.purpose = purpose
    return action


def program_to_run(who: str, args, outputs: dict[str, str | None] | None = None):
    """The program a verb that runs one was given (``-m MODULE ...`` or ``PROGRAM ...``), checked before anything
    runs: torch importable, the program line valid, each output file (``{"--log": path}``) writable. Returns a
    :class:`ascendify.program.Program`, or an exit status (2, or ``EXIT_NEEDS_PACKAGE``) after saying why."""
    import sys

    if not requires(who, "torch"):
        return EXIT_NEEDS_PACKAGE
    from ascendify.core.fileio import output_problem
    from ascendify.program import Program, ProgramError

    tokens = ["-m", *args.module_args] if args.module_args is not None else list(args.program or [])
    try:
        prog = Program.parse(tokens)
    except ProgramError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 2
    for flag, path in (outputs or {}).items():
        problem = path and output_problem(path)
        if problem:  # found now, not after the program has run
            print(f"{who}: {flag} {path}: {problem}", file=sys.stderr)
            return 2
    return prog


def observe_if_asked() -> None:
    """``ascendify port`` runs each side as ``ascendify run``/``emulate`` with ``ASCENDIFY_OBSERVE=DIR``: switch
    its run-time discovery on (:mod:`ascendify.port.observe`) before the program starts, and have the findings
    written when it ends; with ``ASCENDIFY_ADVISE=DIR`` (the migrated run) also ``ascendify advise``'s tracer
    (:func:`ascendify.advise.capture_from_env`). Nothing happens (and nothing is imported) without them."""
    import os

    if not os.environ.get("ASCENDIFY_OBSERVE"):
        return
    from ascendify.port import observe
    from ascendify.program import scriptrun

    obs = observe.install_from_env()
    if obs is not None:
        scriptrun.at_program_start(obs.program_started)
        scriptrun.at_program_exit(observe.finish_active, hide=observe.__file__)
    if os.environ.get("ASCENDIFY_ADVISE"):  # port's target run: advise's tracer too ("Make it fast on the NPU")
        from ascendify import advise

        advise.capture_from_env()


def parse_pipeline_options(who: str, args, steps: tuple[str, ...]) -> frozenset[str] | int:
    """``--skip`` (repeatable or comma-separated) and ``--jobs`` of the pipeline verbs (port, demo): the steps to
    skip, or exit status 2 after saying what is wrong."""
    import sys

    skip = {s.strip() for item in args.skip for s in item.split(",") if s.strip()}
    bad = sorted(skip - set(steps))
    if bad:
        print(f"{who}: --skip {', '.join(bad)}: unknown stage (stages: {', '.join(steps)})", file=sys.stderr)
        return 2
    if args.jobs is not None and args.jobs < 1:
        print(f"{who}: --jobs must be at least 1", file=sys.stderr)
        return 2
    return frozenset(skip)
