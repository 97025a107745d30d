"""Child processes that never outlive the verb that started them, and a Ctrl-C that is never lost.

Every process an ascendify verb starts goes through here (``port``'s and ``demo``'s jobs, ``train --nproc``'s
torchrun, the workers of a torchrun job under ``run``/``emulate``/``dump``). Torch-free; Linux gets the full
guarantee, elsewhere the process groups alone.

- :func:`popen` starts a child in a session of its own (so a process group of its own: the terminal's Ctrl-C
  reaches only the verb, which decides how its children stop, and a signal to the group reaches whatever the
  child started) that dies with its parent: ``PR_SET_PDEATHSIG`` makes the kernel send it SIGTERM when the
  verb dies, however it dies (SIGKILL and a crash included). ``ASCENDIFY_PARENT`` in its environment names the
  parent, so that an ascendify child can take its own part (:func:`adopt`). SIGINT is never ignored in the child
  (a verb started in the background by a script inherits an ignored one): the verb's Ctrl-C to it is heard.
- :func:`adopt`, called by ``ascendify``'s entry point: in a process started by :func:`popen` (or a torchrun
  worker of :func:`mark_parent`'s process), SIGTERM stops the whole process group at once (the user's program,
  its DataLoader workers and subprocesses), and the parent's death is a SIGTERM (armed here where the kernel
  did not arm it before ``exec``: torchrun starts its workers itself).
- :func:`deferred_signals`: Ctrl-C, SIGTERM and SIGHUP wait while a child is started and recorded, then are
  delivered: a signal that arrives while ``fork``/``exec`` runs can no longer leave a child nobody knows of.
- :func:`terminate_raises`: while a verb's children run, SIGTERM and SIGHUP unwind the verb as Ctrl-C does
  (:class:`Terminated`, a ``SystemExit`` with status 128 + the signal), so its ``finally`` stops them.
- :func:`call` runs a child to its end, passing Ctrl-C and SIGTERM on; :func:`stop` stops one and its group;
  :func:`kill_group`: a signal to a child's process group.
- :func:`worker_init`: a DataLoader ``worker_init_fn`` for workers that die with the process (``bench``'s).

>>> import sys
>>> code = "import os; print(os.getpgrp() == os.getpid(), os.environ['ASCENDIFY_PARENT'] == str(os.getppid()))"
>>> popen([sys.executable, "-c", code], stdout=-1, text=True).communicate()[0].split()
['True', 'True']
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence

__all__ = ["Terminated", "popen", "call", "stop", "adopt", "mark_parent", "worker_init", "die_with_parent",
           "deferred_signals",
           "terminate_raises", "kill_group", "PARENT_VAR"]

PARENT_VAR = "ASCENDIFY_PARENT"  # the pid of the ascendify process that started this one
_PR_SET_PDEATHSIG = 1
_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SIGTERM = int(signal.SIGTERM)


class Terminated(SystemExit):
    """SIGTERM or SIGHUP while a verb's children run: unwinds like Ctrl-C (``finally`` blocks stop the children)
    and exits with 128 + the signal's number, as the signal's default action would have."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


_prctl_fn: list = []  # libc's prctl once looked up (None where there is none)


def _prctl():
    """libc's ``prctl`` (Linux), looked up once, in the parent: the child calls it between fork and exec, where
    nothing may be imported or looked up."""
    if not _prctl_fn:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                fn = ctypes.CDLL(None, use_errno=True).prctl
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
            except (OSError, AttributeError):
                fn = None
        _prctl_fn.append(fn)
    return _prctl_fn[0]


def die_with_parent(parent: int) -> bool:
    """Make this process (a worker a verb forked: a ``multiprocessing`` pool's) get SIGTERM when ``parent`` dies,
    however it dies; False when ``parent`` is gone already (then the caller should end)."""
    return _arm(_prctl(), parent)


def _arm(prctl, parent: int) -> bool:
    """SIGTERM when the parent dies; False when it is gone already (it died before this could be armed)."""
    if prctl is None:
        return True
    prctl(_PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0)
    return os.getppid() == parent


def popen(argv: Sequence[str], *, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, ...)`` for a child that dies with this process (see the module docstring).

    Start it from the main thread (the kernel's parent-death signal follows the thread that started the child:
    from another thread the child gets only its process group). ``start_new_session`` and ``preexec_fn`` are
    this function's own."""
    parent = os.getpid()
    env = dict(os.environ if env is None else env)
    env[PARENT_VAR] = str(parent)
    prctl = _prctl() if threading.current_thread() is threading.main_thread() else None

    def in_child() -> None:  # between fork and exec: nothing imported, only calls into what is loaded
        # Ctrl-C reaches the child only from its parent, on purpose: it must not inherit an ignored SIGINT (a
        # verb started in the background by a script ignores it, and would have its children ignore the request)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if not _arm(prctl, parent):
            os._exit(143)  # the parent died while this child was being started

    return subprocess.Popen(list(argv), env=env, start_new_session=True, preexec_fn=in_child, **kwargs)


def call(argv: Sequence[str], *, grace: float = 5.0, **kwargs) -> int:
    """``subprocess.call`` for a child started by :func:`popen`: its exit status. Ctrl-C here is passed on to it as
    Ctrl-C (its session is its own, so the terminal's reaches only this process), SIGTERM and SIGHUP as SIGTERM;
    what has not stopped ``grace`` seconds later is killed, then the interruption goes on (KeyboardInterrupt,
    :class:`Terminated`)."""
    proc = None
    with terminate_raises():
        try:
            with deferred_signals():
                proc = popen(argv, **kwargs)
            return proc.wait()
        except BaseException as e:
            if proc is not None:
                stop(proc, signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM, grace)
            raise


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT, grace: float = 5.0) -> int:
    """Stop a child started by :func:`popen` and everything it started: ``sig`` to its process group, then SIGKILL
    after ``grace`` seconds (at once on a second Ctrl-C or SIGTERM meanwhile). Returns its exit status."""
    with deferred_signals(redeliver=False) as again:
        kill_group(proc, sig)
        end = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < end and not again:
            time.sleep(0.02)
        kill_group(proc, signal.SIGKILL)  # what is left: the child, or what it started and left behind
        return proc.wait()


def worker_init():
    """A DataLoader ``worker_init_fn`` whose workers die with the process that iterates the loader (SIGTERM when it
    dies, however it dies; DataLoader's own check of its parent runs every five seconds only)."""
    _prctl()  # looked up now, before the workers are forked
    return functools.partial(_arm_worker, os.getpid())


def _arm_worker(parent: int, worker_id: int) -> None:
    if not _arm(_prctl(), parent):
        os._exit(143)  # the parent died while this worker started


def mark_parent(env: dict[str, str] | os._Environ = os.environ) -> None:
    """Name this process as the parent in ``env`` (for children it does not start through :func:`popen`, such as
    torchrun's workers, which :func:`adopt` then arms)."""
    env[PARENT_VAR] = str(os.getpid())


def adopt() -> bool:
    """Take the child's part in a process an ascendify verb started (``ASCENDIFY_PARENT`` names it; the variable is
    removed, so the program's own children do not inherit it): die with the parent, and let SIGTERM stop the whole
    process group. Returns whether this process is such a child. Call it first thing in the main thread."""
    named = os.environ.pop(PARENT_VAR, None)
    if not named or not named.isdigit():
        return False
    parent = int(named)
    if os.getppid() != parent:
        if _alive(parent):
            return False  # started by something in between (a shell, the program's own launcher): not ours to arm
        os._exit(143)  # the parent is gone already
    if not _arm(_prctl(), parent):
        os._exit(143)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_own_group)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_own_group(signum, frame) -> None:
    """SIGTERM in an adopted child: everything in its process group (itself too) is killed at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.getpgrp() == os.getpid():  # a group of its own (popen's session, torchrun's worker)
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGTERM)


def kill_group(proc: subprocess.Popen | int, sig: int) -> None:
    """Send ``sig`` to the process group a child started by :func:`popen` leads; nothing when it is gone."""
    pid = proc if isinstance(proc, int) else proc.pid
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def deferred_signals(signals: Sequence[int] = _STOPPING, *, redeliver: bool = True) -> Iterator[list[int]]:
    """Hold Ctrl-C, SIGTERM and SIGHUP for the duration of the block; yields the list of those that arrived. On
    leaving, the handlers are restored and (``redeliver``) each held signal is raised again, so it acts as it
    would have, only later. In another thread than the main one (where no handler runs) this does nothing."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return

    def hold(signum, frame) -> None:
        pending.append(signum)

    saved = {}
    for s in signals:
        old = signal.getsignal(s)
        if old is None:  # installed outside Python: it cannot be put back, so leave it alone
            continue
        saved[s] = old
        signal.signal(s, hold)
    try:
        yield pending
    finally:
        for s, old in saved.items():
            signal.signal(s, old)
        if redeliver:
            for s in dict.fromkeys(pending):
                if saved.get(s) not in (None, signal.SIG_IGN):
                    signal.raise_signal(s)


@contextlib.contextmanager
def terminate_raises(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread for the duration of the block (where their
    handler is the default one), so ``finally`` blocks run and stop the children; restored on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame) -> None:
        raise Terminated(signum)

    saved = {}
    for s in signals:
        if signal.getsignal(s) == signal.SIG_DFL:
            saved[s] = signal.signal(s, raise_terminated)
    try:
        yield
    finally:
        for s, old in saved.items():
            signal.signal(s, old)
