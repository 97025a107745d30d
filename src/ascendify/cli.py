"""The ``ascendify`` command: one verb per capability.

Each verb's front-end lives in ``ascendify/commands/<verb>.py`` and exposes ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``. Command modules must import nothing heavy at module
level (no torch): ``ascendify migrate`` runs where torch is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap

from ascendify import __version__

# verb -> module; order is the order shown in --help
VERBS: dict[str, str] = {
    "port": "ascendify.commands.port",
    "advise": "ascendify.commands.advise",
    "demo": "ascendify.commands.demo",
    "doctor": "ascendify.commands.doctor",
    "migrate": "ascendify.commands.migrate",
    "run": "ascendify.commands.run",
    "emulate": "ascendify.commands.emulate",
    "dump": "ascendify.commands.dump",
    "compare": "ascendify.commands.compare",
    "bench": "ascendify.commands.bench",
    "train": "ascendify.commands.train",
}

# verbs whose positional ``command`` is a whole program line after ``--`` (argparse would read its options)
TAKES_COMMAND = ("port",)


def _load(module: str):
    """A verb's front-end. One that cannot be imported is a broken install, never a verb to hide: the error
    propagates (``ascendify --help`` listing fewer verbs, with no word why, hid a bug)."""
    return importlib.import_module(module)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """A verb's description: prose paragraphs wrap to the terminal (``ascendify doctor --help`` at 80 columns);
    paragraphs with indented lines (examples, numbered steps) stay as written, so commands stay copy-pasteable."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if lines and not any(line[:1].isspace() for line in lines):
                out.append(textwrap.fill(" ".join(line.strip() for line in lines), width, initial_indent=indent,
                                         subsequent_indent=indent, break_on_hyphens=False, break_long_words=False))
            else:
                out.append("\n".join(indent + line for line in lines))
        return "\n\n".join(out)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascendify",
        description="Take PyTorch code written for NVIDIA GPUs to Huawei Ascend NPUs, and prove it right and fast.",
        epilog="Start with `ascendify demo` (every step on the bundled CUDA example, one HTML report) or "
               "`ascendify doctor`. `ascendify COMMAND --help` lists a command's options and examples; no NPU is "
               "needed: an emulated npu device on the CPU stands in.",
    )
    parser.add_argument("--version", action="version", version=f"ascendify {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for verb, module in VERBS.items():
        if only is not None and verb != only:
            continue  # load just the verb asked for: each verb's imports stay its own (migrate never imports torch)
        mod = _load(module)
        p = sub.add_parser(
            verb,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=_HelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command itself (not a call from Python): started by a verb, it dies with it
        from ascendify.program import children

        children.adopt()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in VERBS else None)
    tail = None
    if argv and argv[0] in TAKES_COMMAND and "--" not in argv:
        words = [w for w in argv[2:] if not w.startswith("-")]
        if any(w in ("python", "python3", "torchrun") or w.endswith(".py") for w in words):
            print(f"ascendify {argv[0]}: put -- before the project's own command, e.g.\n"
                  f"  ascendify {argv[0]} PROJECT [options] -- python train.py --lr 3e-4", file=sys.stderr)
            return 2
    if argv and argv[0] in TAKES_COMMAND and "--" in argv:  # everything after -- is the user's command, verbatim
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if tail is not None:
        args.command = [*getattr(args, "command", []), *tail]
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("ascendify: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`ascendify ... | head`): stop quietly, and keep the exit-time flush from raising too
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
