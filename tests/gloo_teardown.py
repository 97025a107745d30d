"""A worker of a 2-process gloo run sometimes aborts at exit, after its work is done: "terminate called without an
active exception" (a joinable thread destroyed during teardown, with or without ``destroy_process_group``). Plain
torch 2.13 shows it without ascendify: 1 of 8 ``torch.distributed.run`` runs of an accelerate script on the 2-core
VM. A run that ended so is run again, twice at most; any other failure, or three such in a row, stays a failure."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

ABORT_AT_EXIT = "terminate called without an active exception"


def run_again_on_teardown_abort(run: Callable[[], subprocess.CompletedProcess], tries: int = 3
                                ) -> subprocess.CompletedProcess:
    """``run()`` (a fresh port each time is the caller's), again while it fails with gloo's teardown abort."""
    for _ in range(tries):
        proc = run()
        said = (proc.stdout or "") + (proc.stderr or "")
        if proc.returncode == 0 or ABORT_AT_EXIT not in (said if isinstance(said, str) else ""):
            return proc
    return proc
