"""Port's job runner under Ctrl-C, whenever it comes: while a child is being started, while children run, while
they are being stopped. No child is ever left running, and the runner never waits longer than it said."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from ascendify.port import jobs as jb


def _py(name: str, code: str, **kw) -> jb.Job:
    return jb.Job(name, "doctor", ["-c", code], python=True, **kw)


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process is dead (reaped, or a zombie nobody waits for) within ``within`` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def started(monkeypatch):
    """The pids of the children started; ``interrupt_at_start`` makes Ctrl-C arrive inside the start of the first
    one (after fork, before the runner has the process object: what a person's Ctrl-C does on a slow machine)."""
    pids: list[int] = []
    real = subprocess.Popen
    state = {"interrupt_at_start": False}

    def popen(*a, **kw):
        proc = real(*a, **kw)
        pids.append(proc.pid)
        if state["interrupt_at_start"] and len(pids) == 1:
            signal.raise_signal(signal.SIGINT)  # the handler runs here, before Popen returns
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    yield pids, state
    for pid in pids:  # nothing may be left whatever the test did
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def test_ctrl_c_while_a_child_starts_stops_that_child(started):
    pids, state = started
    state["interrupt_at_start"] = True
    slow = _py("slow", "import time; time.sleep(120)")
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        jb.run_jobs([slow], lanes=1, log_dir=None)
    assert len(pids) == 1 and _gone(pids[0], within=1.0), "the child started during the Ctrl-C is still running"
    assert slow.returncode is not None and time.monotonic() - t0 < 30


def _up(marks, name: str) -> str:
    """Code that says the job is ready (a marker file) and sleeps."""
    return f"open({str(marks / name)!r}, 'w').close()\ntime.sleep(120)"


def _after(marks, *names: str) -> jb.Job:
    """A job that ends once the jobs ``names`` are ready: the moment to press Ctrl-C (from its on_done)."""
    wait = " and ".join(f"os.path.exists({str(marks / n)!r})" for n in names)
    return _py("go", f"import os, time\nend = time.monotonic() + 60\n"  # never waits for ever: a failure, not a hang
               f"while not ({wait}) and time.monotonic() < end: time.sleep(0.01)")


def _interrupt(job):
    if job.name == "go":
        raise KeyboardInterrupt


def test_ctrl_c_while_children_run_asks_them_as_ctrl_c_would(started, tmp_path):
    pids, _ = started
    deaf_pid = tmp_path / "deaf.pid"  # the job's own child, deaf to Ctrl-C: left behind when the job stops
    deaf = ("import os, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            f"open({str(deaf_pid)!r} + '.tmp', 'w').write(str(os.getpid()))\nos.rename({str(deaf_pid)!r} + '.tmp', "
            f"{str(deaf_pid)!r})\ntime.sleep(120)")
    polite = _py("polite", f"import os, subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {deaf!r}])\n"
                 f"end = time.monotonic() + 60\nwhile not os.path.exists({str(deaf_pid)!r}) and time.monotonic() < end:\n"
                 "    time.sleep(0.01)\n"
                 "try:\n    " + _up(tmp_path, "polite").replace("\n", "\n    ")
                 + "\nexcept KeyboardInterrupt:\n    print('wrote what it had')\n    raise SystemExit(130)")
    with pytest.raises(KeyboardInterrupt):
        jb.run_jobs([polite, _after(tmp_path, "polite")], lanes=2, log_dir=tmp_path / "logs", on_done=_interrupt)
    assert polite.returncode == 130 and polite.seconds < 30  # asked as Ctrl-C asks, and heard
    assert "wrote what it had" in (tmp_path / "logs" / "polite.log").read_text()
    assert all(_gone(p, within=1.0) for p in pids)
    assert _gone(int(deaf_pid.read_text()), within=1.0), "what the job started outlived the run"


def test_a_second_ctrl_c_while_children_stop_kills_them_at_once(started, monkeypatch, tmp_path):
    pids, _ = started
    deaf = _py("deaf", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + _up(tmp_path, "deaf"))
    real_reap, calls = jb._reap, []

    def reap(j, proc, block=False):
        calls.append(block)
        if len(calls) == 1:  # the first look while they are being stopped: the user presses Ctrl-C again
            signal.raise_signal(signal.SIGINT)
        return real_reap(j, proc, block)

    pressed = []

    def interrupt(job):
        if job.name == "go":
            monkeypatch.setattr(jb, "_reap", reap)
            pressed.append(time.monotonic())
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        jb.run_jobs([deaf, _after(tmp_path, "deaf")], lanes=2, log_dir=None, on_done=interrupt)
    assert calls, "the children were not being stopped"
    assert time.monotonic() - pressed[0] < 4.0  # not the 5 s of grace: the second Ctrl-C cut it short
    assert deaf.returncode == -signal.SIGKILL and all(_gone(p, within=1.0) for p in pids)
