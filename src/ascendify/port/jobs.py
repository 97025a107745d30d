"""Child processes for the pipeline of ``ascendify port``: each verb runs as ``python -m ascendify VERB ...`` in
its own process, with its output in a log file, a time limit, and its wall and CPU time measured.

Separate processes because the verbs must not share one: the emulated NPU has to be enabled before any
``backward()`` in a process, ``ascendify run`` patches ``torch.cuda`` for the whole process, and a crash in one
stage must not take the pipeline (and its report) down. Independent jobs run side by side (``lanes``, by default
the number of CPU cores, at most 2), each child with ``cores / lanes`` threads.

>>> j = Job("hello", "doctor", ["-c", "print('hi')"], python=True)
>>> run_jobs([j], lanes=1, log_dir=None)
>>> j.returncode, j.output.strip()
(0, 'hi')
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ascendify.program import children


@dataclass
class Job:
    """One child process. ``argv`` follows ``python -m ascendify`` (or ``python`` with ``python=True``)."""

    name: str
    stage: str  # the pipeline stage it belongs to (doctor, migrate, train, compare, bench)
    argv: list[str]
    deps: tuple[str, ...] = ()
    python: bool = False
    env: dict[str, str] | None = None
    cwd: str | None = None
    timeout: float = 600.0
    shown: str = ""  # the command as a person would type it (for the report)
    ok_codes: tuple[int, ...] = (0, 1)  # exit statuses after which the jobs that wait on this one may run
    exclusive: bool = False  # runs alone (a timing: the bench), whatever the lanes
    stop_after: float | None = None  # asked to stop as a Ctrl-C would after this many seconds (--time-budget)
    # filled in by run_jobs
    returncode: int | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    log: str | None = None
    output: str = ""
    timed_out: bool = False
    skipped: str | None = None  # why it did not run
    stopped_at: float | None = None  # when it was asked to stop at its stop_after (then it is not a crash)
    started: float = field(default=0.0, repr=False)

    @property
    def ok(self) -> bool:
        return self.returncode is not None and not self.timed_out and self.skipped is None

    def command(self) -> list[str]:
        return [sys.executable, *self.argv] if self.python else [sys.executable, "-m", "ascendify", *self.argv]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "command": self.shown or shlex.join(["ascendify", *self.argv]),
            "returncode": self.returncode,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "timed_out": self.timed_out,
            "skipped": self.skipped,
            "log": self.log,
        }


def default_lanes() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def child_env(lanes: int, extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The pipeline's environment for a child: threads split between the lanes (unless the user set them), no
    emulation or redirection variables leaking in from the caller, and ``extra`` on top."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASCENDIFY_EMULATE", "ASCENDIFY_TARGET", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    for k in drop:
        env.pop(k, None)
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // lanes))
    env.setdefault("PYTHONWARNINGS", "ignore")
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "100"
    env.update(extra or {})
    return env


@children.terminate_raises()  # SIGTERM, SIGHUP: unwind as Ctrl-C does (run_jobs' finally stops the children)
def run_jobs(
    jobs: list[Job],
    *,
    lanes: int,
    log_dir: Path | None,
    on_done: Callable[[Job], None] | None = None,
    poll: float = 0.1,
    on_tick: Callable[[list[Job]], None] | None = None,
) -> None:
    """Run ``jobs`` (in list order as their ``deps`` allow), at most ``lanes`` at a time. A job whose dependency
    failed or was skipped is skipped too (``job.skipped`` says which). ``on_done(job)`` is called as each ends,
    ``on_tick(running jobs)`` at every poll (to show progress while waiting)."""
    by_name = {j.name: j for j in jobs}
    pending = [j for j in jobs if j.skipped is None]
    for j in jobs:
        if j.skipped is not None and on_done:
            on_done(j)
    running: dict[int, tuple[Job, subprocess.Popen, object]] = {}
    try:
        _loop(pending, running, by_name, lanes, log_dir, on_done, poll, on_tick)
    finally:  # interrupted (Ctrl-C: the children have their own sessions and do not see it): stop them all
        _stop_all(list(running.values()), _stop_signal())


def _stop_signal() -> int:
    """How to ask the children to stop, in run_jobs' ``finally``: SIGTERM when a SIGTERM (or SIGHUP) is what is
    unwinding, else as Ctrl-C would."""
    return signal.SIGTERM if isinstance(sys.exc_info()[1], children.Terminated) else signal.SIGINT


def _stop_all(entries, sig: int = signal.SIGINT, grace: float = 5.0) -> None:
    """Stop running children: Ctrl-C first (each gets ``grace`` seconds to write what it has, as a program
    interrupted by hand would), then SIGKILL for what is left. After SIGTERM (``sig``) they get a second at
    most, and a second Ctrl-C (or SIGTERM) while they stop cuts the wait short: nothing is left running."""
    with children.deferred_signals(redeliver=False) as again:
        for _j, proc, _fh in entries:
            children.kill_group(proc, sig)
        deadline = time.monotonic() + (grace if sig == signal.SIGINT else min(grace, 1.0))
        left = list(entries)
        while left and time.monotonic() < deadline and not again:
            left = [(j, p, fh) for j, p, fh in left if not _reap(j, p)]
            if left:
                time.sleep(0.05)
        for _j, proc, _fh in entries:  # what is left, and what a child that stopped left behind in its group
            _kill(proc)
        for j, proc, _fh in left:
            _reap(j, proc, block=True)
        for _j, _proc, fh in entries:
            fh.close()


STOP_GRACE = 10.0  # seconds a job asked to stop at its stop_after has to write what it found, then killed


def _loop(pending, running, by_name, lanes, log_dir, on_done, poll, on_tick=None) -> None:
    while pending or running:
        for j in list(pending):
            if len(running) >= lanes:
                break
            deps = [by_name[d] for d in j.deps if d in by_name]
            bad = [d for d in deps if d.skipped is not None or (d.returncode is not None and not _dep_ok(d))]
            if bad:
                pending.remove(j)
                j.skipped = f"needs {bad[0].name}, which " + (
                    "did not run" if bad[0].skipped else f"failed (exit {bad[0].returncode})")
                if on_done:
                    on_done(j)
                continue
            if any(d.returncode is None for d in deps):
                continue
            if any(r[0].exclusive for r in running.values()) or (j.exclusive and running):
                continue  # a timing job runs alone: nothing beside it, and it waits for the machine to be free
            pending.remove(j)
            with children.deferred_signals():  # a Ctrl-C while the child starts acts once it is in ``running``
                running_entry = _start(j, log_dir)
                running[running_entry[1].pid] = running_entry
        if not running:
            if pending:  # nothing runs and nothing could start: they wait on each other
                for j in pending:
                    j.skipped = "its dependencies form a cycle"
                    if on_done:
                        on_done(j)
                pending.clear()
            continue
        time.sleep(poll)
        if on_tick is not None:
            on_tick([e[0] for e in running.values()])
        for pid, (j, proc, fh) in list(running.items()):
            done = _reap(j, proc)
            age = time.monotonic() - j.started
            if not done and j.stop_after is not None and age > j.stop_after:
                if j.stopped_at is None:  # past its budget (stuck where its own timer cannot reach): as Ctrl-C
                    j.stopped_at = age
                    _signal(proc, "SIGINT")
                elif age > j.stopped_at + STOP_GRACE:
                    _kill(proc)
                    done = _reap(j, proc, block=True)
            if not done and age > j.timeout:
                j.timed_out = True
                _kill(proc)
                done = _reap(j, proc, block=True)
            if done:
                del running[pid]
                _finish(j, fh)
                if on_done:
                    on_done(j)


# a dependency "succeeded" when it ran to the end; exit 1 is a finding (a failed check, a divergence), not a crash
def _dep_ok(job: Job) -> bool:
    return not job.timed_out and (job.returncode in job.ok_codes or job.stopped_at is not None)


def _start(j: Job, log_dir: Path | None):
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / f"{j.name}.log"
        fh = open(path, "w+b")  # noqa: SIM115 (closed in _finish)
        j.log = str(path)
    else:
        import tempfile

        fh = tempfile.TemporaryFile()
    fh.write(f"$ {j.shown or shlex.join(['ascendify', *j.argv])}\n\n".encode())
    fh.flush()
    j.started = time.monotonic()
    try:
        proc = children.popen(j.command(), stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                              env=j.env, cwd=j.cwd)  # its own process group, and it dies with this process
    except OSError as e:  # the interpreter cannot be started: report it as the job's failure
        fh.write(f"cannot start: {e}\n".encode())
        proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(127)"], stdout=fh, stderr=fh)
    return j, proc, fh


def _reap(j: Job, proc: subprocess.Popen, block: bool = False) -> bool:
    """Collect the child's exit status and CPU time (``os.wait4``: its own rusage, not every child's)."""
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        proc.returncode = proc.returncode if proc.returncode is not None else -1
        j.returncode = proc.returncode
        j.seconds = time.monotonic() - j.started
        return True
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(status)
    j.returncode = proc.returncode
    j.seconds = time.monotonic() - j.started
    j.cpu_seconds = usage.ru_utime + usage.ru_stime
    return True


def _signal(proc: subprocess.Popen, name: str) -> None:
    import signal

    try:
        os.killpg(proc.pid, getattr(signal, name))
    except (ProcessLookupError, PermissionError):
        pass


def _kill(proc: subprocess.Popen) -> None:
    children.kill_group(proc, signal.SIGKILL)  # its own session: the job and anything it started


def _finish(j: Job, fh) -> None:
    fh.flush()
    fh.seek(0)
    j.output = fh.read().decode("utf-8", "replace").split("\n\n", 1)[-1]
    fh.close()


def tail(text: str, lines: int = 30) -> str:
    """The last ``lines`` lines of a job's output (for the report when it failed)."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
