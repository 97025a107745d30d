"""Ranks out of step under the emulated ``hccl``: a skipped collective, another shape, a rank waiting for a peer
that never comes are one error naming the ranks, their calls and lines, within seconds; all ranks stop. A job
whose ranks agree (DDP included) runs to the end with every collective recorded.

Three 2-process jobs run at once (module fixture); the worker is ``desync_worker.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascendify.emulator.distributed import desync

WORKER = Path(__file__).resolve().parent / "desync_worker.py"
LINES = {line.strip(): i + 1 for i, line in enumerate(WORKER.read_text().splitlines())}
HANG_TIMEOUT = 1.0  # rank 1 runs its own code meanwhile: reported after BUSY_FACTOR (6) times that


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.fixture(scope="module")
def jobs():
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    base.pop(desync.ENV, None)
    running = {}
    for case in ("skip", "hang", "ok"):
        # the agreeing job gets a long timeout: on a loaded machine one rank may start seconds after the other
        env = {**base, desync.TIMEOUT_ENV: str(HANG_TIMEOUT if case == "hang" else 120)}
        port = _port()
        running[case] = [subprocess.Popen([sys.executable, str(WORKER), case, str(r), port], env=env, cwd=WORKER.parent,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                         for r in (0, 1)]
    out = {}
    for case, procs in running.items():
        ranks = []
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
            ranks.append((p.returncode, stdout, stderr, time.time()))
        out[case] = ranks
    return out


def _ready(stdout: str) -> float:
    return float(next(line for line in stdout.splitlines() if line.startswith("READY")).split()[2])


def _where(code: str) -> str:
    """How the message names the worker's line holding ``code`` (a path relative to the worker's directory)."""
    return f"{os.path.relpath(WORKER, WORKER.parent)}:{LINES[code]} (<module>)"


def test_a_skipped_collective_names_both_ranks_calls_and_lines(jobs):
    (rc0, out0, err0, end0), (rc1, out1, err1, end1) = jobs["skip"]
    assert (rc0, rc1) == (1, 1), (err0, err1)  # every rank stopped
    assert max(end0, end1) - min(_ready(out0), _ready(out1)) < 10  # from both ranks ready to both stopped
    full, other = (err1, err0) if "stopped: collectives out of step" in err0 else (err0, err1)
    assert "collective #1 differs" in full
    # rank 0's all_reduce of 4 floats (the one rank 1 skipped) met rank 1's next all_reduce, of 2 floats
    assert f"rank 0: #1 all_reduce(float32[4], op=SUM) at {_where('dist.all_reduce(x)  # rank 1 skips this one')}" in full
    assert f"rank 1: #1 all_reduce(float32[2], op=SUM) at {_where('dist.all_reduce(y)')}" in full
    assert "HCCL_EXEC_TIMEOUT" in full and desync.TIMEOUT_ENV in full
    stop = [line for line in other.splitlines() if line.startswith("ascendify:")]
    assert len(stop) == 1 and "stopped: collectives out of step" in stop[0]  # one line: the message is elsewhere
    assert "READY" in out0 and "READY" in out1


def test_a_rank_waiting_for_a_peer_that_went_on_is_stopped_within_seconds(jobs):
    (rc0, out0, err0, end0), (rc1, out1, err1, end1) = jobs["hang"]
    assert (rc0, rc1) == (1, 1), (err0, err1)
    assert "rank 0 has waited" in err0 and "which rank(s) 1 did not reach" in err0
    assert f"rank 0: #2 all_reduce(float32[4], op=SUM) at {_where('dist.all_reduce(x)  # rank 1 never gets here: it works on')}" in err0
    assert "rank 1: not there (its last: #1 all_reduce(float32[4], op=SUM) at" in err0
    assert "it runs its own code, outside collectives" in err0
    assert "stopped" in err1
    waited = end1 - _ready(out1)  # rank 1 sleeps 60 s unless stopped
    assert waited < 10, waited


def test_ranks_that_agree_run_to_the_end_with_every_collective_recorded(jobs):
    for rc, out, err, _ in jobs["ok"]:
        assert rc == 0, err
        assert "out of step" not in err
        calls = next(line for line in out.splitlines() if line.startswith("CALLS")).split()[1:]
        # the user's two calls, DDP's own (parameter check, state broadcast, a gradient all_reduce per step)
        assert calls[:2] == ["all_reduce", "broadcast"] and calls[-1] == "barrier"
        assert calls.count("all_reduce") >= 1 + 3


def test_a_checker_outlives_its_destroyed_group_to_publish_its_last_call_at_exit(monkeypatch):
    # `dist.all_reduce(x); dist.destroy_process_group()` at the end of a script: the group (and with a weak
    # reference, its checker) went away before the watchdog published that call, and the peer, at exit, saw a
    # rank with "no collective in this group yet" (a false "out of step" under torchrun)
    import gc

    monkeypatch.setattr(desync, "_checkers", [])
    monkeypatch.setattr(desync, "_thread", [object()])  # no watchdog thread in this process
    checker = desync.Checker(store=None, rank=0, size=2)
    desync._register(checker)
    del checker
    gc.collect()
    assert [ref() for ref in desync._checkers][0] is not None


def test_fingerprints_compare_what_must_agree():
    import torch
    import torch.distributed as dist

    opts = dist.AllreduceOptions()
    a = desync.fingerprint("all_reduce", "all", ([torch.ones(4)], opts))
    assert a[1] == "all_reduce(float32[4], op=SUM)"
    assert a[0] != desync.fingerprint("all_reduce", "all", ([torch.ones(3)], opts))[0]
    assert a[0] != desync.fingerprint("all_reduce", "all", ([torch.ones(4, dtype=torch.float16)], opts))[0]
    # all_to_all's splits may differ between ranks, its dtype may not
    u = desync.fingerprint("all_to_all_single", "dtype", (torch.ones(4), torch.ones(6), [1, 3], [3, 3]))
    v = desync.fingerprint("all_to_all_single", "dtype", (torch.ones(2), torch.ones(6), [1, 1], [3, 3]))
    assert u[0] == v[0]
    # gather: the root passes the output list, the others none; the input must agree
    g_opts = dist.GatherOptions()
    root = desync.fingerprint("gather", "gather", ([[torch.ones(2), torch.ones(2)]], [torch.ones(2)], g_opts))
    leaf = desync.fingerprint("gather", "gather", ([], [torch.ones(2)], g_opts))
    assert root[0] == leaf[0]
    assert desync.timeout_seconds({}) == desync.DEFAULT_TIMEOUT and desync.timeout_seconds({desync.TIMEOUT_ENV: "0"}) == 0
    assert not desync.enabled({desync.ENV: "0"}) and desync.enabled({})


def test_two_ranks_sequences_meet_in_the_store_and_the_first_difference_is_named():
    import torch
    import torch.distributed as dist

    store = dist.HashStore()
    r0, r1 = (desync.Checker(store, r, 2, timeout=1.0) for r in (0, 1))
    opts = dist.AllreduceOptions()
    for c in (r0, r1):
        c.record("all_reduce", "all", ([torch.ones(4)], opts))
        c.done(0)
    r0.record("all_reduce", "all", ([torch.ones(2)], opts))
    r1.record("barrier", "none", (dist.BarrierOptions(),))
    for c in (r0, r1):
        c.publish()
    for c in (r0, r1):
        c.fetch()
    assert r0.first_difference() == r1.first_difference() == 1
    here = f"{os.path.relpath(__file__)}:"
    msg = r0.mismatch_message(1)
    assert "collective #2 differs" in msg
    assert f"rank 0: #2 all_reduce(float32[2], op=SUM) at {here}" in msg and f"rank 1: #2 barrier() at {here}" in msg
    assert "#1: rank 0 all_reduce(float32[4], op=SUM)" in msg  # the calls before it
    # rank 0 waits in its #3 beyond the timeout; rank 1 never issued a #3
    r0.record("broadcast", "all", ([torch.ones(1)], dist.BroadcastOptions()))
    r0.inflight = {2: r0.inflight[2] - 5}
    r0.publish()
    assert r0.overdue(time.monotonic()) == (2, [1])
    assert "rank 1: not there (its last: #2 barrier() at" in r0.hang_message(2, [1], 5.0)
    # what rank 0 knows of rank 1's state: nothing published (silent), then waiting elsewhere
    assert desync._peer_state(r0, 1) == "silent"
    desync.heartbeat(r1, waiting=True)
    assert desync._peer_state(r0, 1) == "waiting"


def test_function_path_fingerprints_match_the_process_groups():
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    agree, args = desync._function_args("all_reduce", "all", (t,), {})
    assert desync.fingerprint("all_reduce", agree, args) == desync.fingerprint(
        "all_reduce", "all", ([t], dist.AllreduceOptions()))
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    agree, args = desync._function_args("all_reduce", "all", (t,), {"op": dist.ReduceOp.MAX})
    assert desync.fingerprint("all_reduce", agree, args)[0] == desync.fingerprint("all_reduce", "all", ([t], opts))[0]


def test_function_wrappers_install_and_undo():
    import torch.distributed as dist

    from ascendify.core.patching import Patches

    original = dist.all_reduce
    patches = desync.install_function_wrappers(Patches())
    try:
        assert dist.all_reduce is not original and dist.all_reduce.__wrapped__ is original
        assert getattr(dist.barrier, "__ascendify_desync__", False)
        # no process group: the call goes straight to PyTorch's function, which says so
        with pytest.raises((RuntimeError, ValueError), match="not been initialized|default process group"):
            dist.all_reduce(__import__("torch").ones(1))
    finally:
        patches.restore()
    assert dist.all_reduce is original
