"""migrate's worker processes: pieces of work out, results back, and a stop that cannot hang.

Each worker has a pipe of its own and the parent has no threads: it sends each worker pieces of work, waits
(:func:`multiprocessing.connection.wait`) for whichever answers first, and sends that one the next piece. This
replaces ``multiprocessing.Pool``, whose ``terminate()`` could hang for ever: a worker killed while it held the
shared result queue's lock left the pool's task-handler thread blocked on that lock, and ``terminate()`` joins
that thread (seen once in eight full test runs, a full disk with ``--jobs 2``). Here no lock is shared, so a
worker stopped at any point stops only itself.

- Each worker has a second unit waiting in its pipe while it works on one, so it never waits for the parent. Units
  should be small (``migrate`` sends the indices of its files, which the workers already hold): the parent writes a
  unit into a pipe that holds at most one other, which never blocks while the worker writes its answer.
- A worker's exception comes back to the parent and is raised there, after every worker is stopped.
- A worker that dies (killed, out of memory) is an error that names it, not a run that waits for ever.
- :func:`run` stops the workers however it ends: SIGTERM first (a worker unwinds through its clean-ups, so no
  temporary file is left), SIGKILL for one still there after :data:`GRACE` seconds.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable

__all__ = ["WorkerDied", "run", "GRACE"]

GRACE = 5.0  # seconds a stopped worker has to finish its clean-ups before it is killed
AHEAD = 2  # units sent to a worker before its answers: one it works on, one waiting in its pipe


class WorkerDied(RuntimeError):
    """A worker ended without an answer (a signal, the out-of-memory killer, ``os._exit`` in the user's code)."""


def _context():
    import multiprocessing  # here: `ascendify migrate` of a few files starts no worker and needs none of it

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


def run(fn: Callable, units: Iterable, jobs: int, on_result: Callable, *, initializer: Callable | None = None,
        initargs: tuple = ()) -> None:
    """Call ``fn(unit)`` for every unit in ``jobs`` worker processes and ``on_result(fn(unit))`` here, in the
    order the answers come. An exception (a worker's, ``on_result``'s, Ctrl-C) stops every worker before it
    propagates."""
    from multiprocessing.connection import wait

    pending = iter(units)
    ctx = _context()
    procs: dict = {}  # the parent's end of each worker's pipe -> its process
    queued: dict = {}  # the same -> the units sent to it and not answered yet
    done: set = set()  # the pipes of the workers told that there is no more work

    def feed(conn) -> bool:
        unit = next(pending, None)
        if unit is None:
            return False
        _send(conn, procs[conn], unit)
        queued[conn] += 1
        return True

    try:
        for _ in range(jobs):
            unit = next(pending, None)
            if unit is None:  # fewer units than jobs
                break
            mine, theirs = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_serve, args=(theirs, fn, initializer, initargs), daemon=True)
            proc.start()
            theirs.close()
            procs[mine], queued[mine] = proc, 1
            _send(mine, proc, unit)
        for _ in range(AHEAD - 1):  # a unit waiting in each pipe: a worker never waits for the next one
            for conn in procs:
                feed(conn)
        busy = {conn for conn, n in queued.items() if n}
        while busy:
            for conn in wait(list(busy)):
                try:
                    ok, value = conn.recv()
                except (EOFError, OSError):
                    raise _died(procs[conn]) from None
                if not ok:
                    raise value
                queued[conn] -= 1
                if not feed(conn) and not queued[conn]:
                    busy.discard(conn)
                    done.add(conn)
                    _send(conn, procs[conn], None)  # the worker returns
                on_result(value)
    finally:
        _stop(procs, done)


def _send(conn, proc, unit) -> None:
    try:
        conn.send(unit)
    except (BrokenPipeError, ConnectionResetError):
        if unit is not None:
            raise _died(proc) from None


def _died(proc) -> WorkerDied:
    proc.join(1)
    code = proc.exitcode
    if code is None:
        how = "is still running without answering"
    else:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    return WorkerDied(f"a migrate worker process (pid {proc.pid}) ended without its results: it {how}")


def _stop(procs: dict, done: set) -> None:
    """Every worker ends: those told that they are done return; the others get SIGTERM now, then SIGKILL."""
    for conn, proc in procs.items():
        if conn not in done and proc.exitcode is None:
            proc.terminate()
    for proc in procs.values():
        proc.join(GRACE)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
    for conn in procs:
        conn.close()


def _serve(conn, fn: Callable, initializer: Callable | None, initargs: tuple) -> None:
    """A worker: take a unit, send back ``(True, fn(unit))`` or ``(False, exception)``, until told it is done."""
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            unit = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if unit is None:
            return
        try:
            answer = (True, fn(unit))
        except Exception as e:  # noqa: BLE001 - raised in the parent
            answer = (False, e)
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - an exception or result that does not pickle
            data = pickle.dumps((False, RuntimeError(f"in a migrate worker (pid {os.getpid()}): "
                                                     f"{type(e).__name__}: {e}")))
        try:
            conn.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError):
            return
