"""The verbs' command-line front-ends, one module per verb (``ascendify <verb>``).

Each module exposes ``HELP`` (one line), optionally ``DESCRIPTION``, ``add_arguments(parser)`` and
``run(args) -> int``, and imports nothing heavy at module level: no torch, no numpy, no matplotlib, and not the
capability package itself (``ascendify --help`` and ``ascendify migrate`` run where torch is not installed).
``run`` imports the capability it drives.
"""
