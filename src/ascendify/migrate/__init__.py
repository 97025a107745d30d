"""``ascendify migrate``: the tool migration. Torch-free: it reads and writes code, it never runs it.

Pieces: ``source`` (bytes, encodings, positions), ``imports`` (names through aliases), ``dataflow`` (device and
backend positions), ``rules/`` (the rule registry), ``engine`` (one file), ``files`` (trees, bad input,
parallelism), ``native`` (.cu/.cpp op scan), ``runner`` (one run: locks, markers, interruptions, the report),
``render`` (report files, terminal summary); the command line is ``ascendify/commands/migrate.py``.

>>> from ascendify.migrate import migrate_source, Options
>>> migrate_source("import torch\\nx = x.cuda()\\n", Options(target="npu"))[0]
'import torch\\nimport torch_npu\\nx = x.npu()\\n'
"""

from .engine import Options, migrate_source

__all__ = ["Options", "migrate_source"]
