"""migrate's worker processes (ascendify.migrate.workers): every answer back, an error or a dead worker stops
them all, and the stop never hangs."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from ascendify.migrate import workers

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="the tests' functions are closures here (a fork start)")


def _run(fn, units, jobs=2, on_result=None):
    got = []
    workers.run(fn, units, jobs, on_result or got.append)
    return got


def _no_worker_left() -> bool:
    return not multiprocessing.active_children()


def test_every_unit_comes_back_once():
    got = _run(lambda n: n * n, range(50), jobs=3)
    assert sorted(got) == [n * n for n in range(50)]
    pids = {pid for _, pid in _run(lambda n: (time.sleep(0.01), os.getpid()), range(20))}
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes did it
    assert _no_worker_left()


def test_fewer_units_than_jobs_starts_fewer_workers():
    assert _run(lambda n: os.getpid(), [1], jobs=4) != [os.getpid()]
    assert _run(lambda n: n, [], jobs=4) == []
    assert _no_worker_left()


def test_a_workers_exception_is_raised_here_and_every_worker_stops():
    def fn(n):
        if n == 3:
            raise OSError(28, "No space left on device", "/out/m3.py")
        time.sleep(0.05)
        return n

    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        _run(fn, range(200))
    assert e.value.filename == "/out/m3.py" and e.value.errno == 28
    assert time.monotonic() - t0 < 5  # not after the 200 units
    assert _no_worker_left()


def test_an_error_while_the_other_worker_sends_a_large_answer_never_hangs():
    """multiprocessing.Pool.terminate() could hang here: a worker killed while it held the shared result queue's
    lock left the pool's task-handler thread blocked, and terminate() joins that thread. Each worker has a pipe
    of its own now."""
    def fn(n):
        if n == 5:
            raise ValueError("stop")
        return b"x" * (1 << 20)

    for _ in range(10):
        with pytest.raises(ValueError):
            _run(fn, range(40))
        assert _no_worker_left()


def test_a_killed_worker_is_an_error_that_says_so():
    def fn(n):
        if n == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return n

    with pytest.raises(workers.WorkerDied, match=r"migrate worker process \(pid \d+\) .* killed by signal 9"):
        _run(fn, range(10))
    assert _no_worker_left()


def test_ctrl_c_here_stops_the_workers():
    def on_result(_):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(lambda n: time.sleep(0.01) or n, range(100), on_result=on_result)
    assert _no_worker_left()


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch):
    monkeypatch.setattr(workers, "GRACE", 0.3)

    def fn(n):
        if n == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)
        time.sleep(0.2)
        raise ValueError("the other one fails")

    t0 = time.monotonic()
    with pytest.raises(ValueError):
        _run(fn, range(4))
    assert time.monotonic() - t0 < 10
    assert _no_worker_left()


def test_an_answer_that_does_not_pickle_is_an_error_that_names_it():
    with pytest.raises(RuntimeError, match=r"in a migrate worker \(pid \d+\): .*(pickle|lambda)"):
        _run(lambda n: (lambda: n), range(3))
    assert _no_worker_left()
