"""Collectives out of step across ranks: an error that names the ranks, the calls and the lines, not a hang.

A rank that skips a collective, calls it with another shape or dtype, or calls collectives in another order
makes a real HCCL job wait until ``HCCL_EXEC_TIMEOUT`` (30 minutes by default) and then fail with an opaque
error. Under the emulator every rank records the sequence of collectives it issues on each process group
(operation, shapes and dtypes, reduce op and root, the user-code line that led to it) and the ranks compare
their sequences through the process group's own c10d store, as PyTorch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
compares collective fingerprints and NCCL's flight recorder keeps the last calls per rank:

- the k-th collective of rank r goes to the store under ``ascendify_desync/r/k`` (published by a watchdog
  thread, every :data:`POLL` seconds, so the collective itself only appends to a list);
- the watchdog reads the peers' entries and compares position by position; the first position where two
  ranks called different collectives (operation, reduce op, root, shapes or dtypes that must agree) stops
  every rank with one message: what each rank called there and where, and the calls before it;
- a rank that has waited in a collective for longer than the timeout (``ASCENDIFY_COLLECTIVE_TIMEOUT``,
  seconds, default :data:`DEFAULT_TIMEOUT`; 0 turns this part off) while a peer has not reached that position
  and that peer waits in another collective or does not answer (each watchdog publishes its process's state)
  stops every rank the same way, naming the peer's last collective and its line; a peer that runs its own code
  (rank 0 evaluating or saving a checkpoint while the others wait) may still come, and gets
  :data:`BUSY_FACTOR` times the timeout.

One rank (the first to find the problem, elected through the store) prints the full message on stderr; every
rank exits with status 1 (the others print one line saying who reported). On by default for the emulated
``hccl`` group (:func:`attach`, called when the group is made; ``ASCENDIFY_CHECK_COLLECTIVES=0`` turns it off);
with any other backend, a real NPU's included, :func:`install_function_wrappers` checks the collectives called
through ``torch.distributed``'s functions (``ascendify run --check-collectives``), which sees what the user calls
but not what a C++ component (DDP's reducer) issues.

Point-to-point calls (``send``/``recv``) differ between ranks by design and are not compared.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

import torch

from ascendify.program import frames

ENV = "ASCENDIFY_CHECK_COLLECTIVES"
TIMEOUT_ENV = "ASCENDIFY_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT = 10.0
BUSY_FACTOR = 6  # a lagging peer that runs its own code (not waiting anywhere) gets 6x the timeout
POLL = 0.5  # seconds between two rounds of the watchdog
NS = "ascendify_desync"
EXIT_STATUS = 1
CONTEXT = 3  # calls shown before the first difference

# the emulated group's method -> (the name users know, which arguments hold tensors that must agree across
# ranks: "all", "first" (the rank's own tensor of gather: its inputs; of scatter: its outputs), "dtype" (only
# the dtype must agree: all_to_all's splits differ), "outputs" / "inputs" (the list of every rank's parts: HCCL
# gathers and scatters uneven parts, so each rank's own part may differ), "none")
METHODS = {
    "allreduce": ("all_reduce", "all"),
    "allreduce_coalesced": ("all_reduce_coalesced", "all"),
    "broadcast": ("broadcast", "all"),
    "reduce": ("reduce", "all"),
    "allgather": ("all_gather", "outputs"),
    "allgather_coalesced": ("all_gather_coalesced", "all"),
    "all_gather_single": ("all_gather_into_tensor", "all"),
    "_allgather_base": ("all_gather_into_tensor", "all"),
    "all_gather_single_coalesced": ("all_gather_into_tensor_coalesced", "all"),
    "allgather_into_tensor_coalesced": ("all_gather_into_tensor_coalesced", "all"),
    "reduce_scatter": ("reduce_scatter", "inputs"),
    "reduce_scatter_single": ("reduce_scatter_tensor", "all"),
    "_reduce_scatter_base": ("reduce_scatter_tensor", "all"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor_coalesced", "all"),
    "gather": ("gather", "gather"),
    "scatter": ("scatter", "scatter"),
    "all_to_all_single": ("all_to_all_single", "dtype"),
    "alltoall_base": ("all_to_all_single", "dtype"),
    "alltoall": ("all_to_all", "dtype"),
    "barrier": ("barrier", "none"),
}


def enabled(env=None) -> bool:
    """Whether the check is on for emulated groups (``ASCENDIFY_CHECK_COLLECTIVES``, default on)."""
    env = os.environ if env is None else env
    return env.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def timeout_seconds(env=None) -> float:
    """How long a rank may wait in a collective that a peer has not reached (0: no limit)."""
    env = os.environ if env is None else env
    raw = env.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        return max(float(raw), 0.0)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds (0: no limit)") from None


# ---------------------------------------------------------------------------------------------------------
# one call


def _tensors(x, out: list) -> None:
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _tensors(y, out)


def _spec(ts) -> str:
    return ", ".join(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for t in ts)


def _options(args) -> str:
    parts = []
    for a in args:
        op = getattr(a, "reduceOp", None)
        if op is not None:
            op = getattr(op, "op", op)  # a c10d ReduceOp holds its RedOpType in .op
            parts.append(f"op={getattr(op, 'name', None) or str(op).rsplit('.', 1)[-1]}")
        root = getattr(a, "rootRank", None)
        if root is not None:
            parts.append(f"root={root}")
    return ", ".join(parts)


def fingerprint(op: str, agree: str, args) -> tuple[str, str]:
    """``(match, shown)``: what must be equal on every rank, and how the call is shown to the user."""
    tensors: list = []
    _tensors([a for a in args if not hasattr(a, "reduceOp") and not hasattr(a, "rootRank")], tensors)
    opts = _options(args)
    if agree == "gather":
        must: list = []
        _tensors(args[1] if len(args) > 1 else (), must)
    elif agree == "scatter":
        must = []
        _tensors(args[0] if args else (), must)
    elif agree in ("outputs", "inputs"):  # all_gather(outputs, inputs), reduce_scatter(outputs, inputs)
        must = []
        _tensors(args[0 if agree == "outputs" else 1] if len(args) > 1 else (), must)
    elif agree == "all":
        must = tensors
    else:
        must = []
    if agree == "dtype":
        key = ",".join(sorted({str(t.dtype) for t in tensors}))
    else:
        key = _spec(must)
    shown = f"{op}({', '.join(p for p in (_spec(tensors), opts) if p)})"
    return f"{op}|{opts}|{key}", shown


def _caller() -> str:
    """``file:line (function)`` of the innermost frame outside torch and ascendify: the user's call."""
    f = frames.user_frame(2)
    return "?" if f is None else f"{os.path.relpath(f.f_code.co_filename)}:{f.f_lineno} ({f.f_code.co_name})"


# ---------------------------------------------------------------------------------------------------------
# one process group


class Checker:
    """The sequence of one rank on one process group, and what it knows of its peers'."""

    def __init__(self, store, rank: int, size: int, name: str = "", timeout: float | None = None):
        self.store, self.rank, self.size = store, rank, size
        self.name = name
        self.timeout = timeout_seconds() if timeout is None else timeout
        self.seq: list[tuple[str, str, str]] = []  # (match, shown, where)
        self.inflight: dict[int, float] = {}  # position -> monotonic time issued
        self.published = 0
        self.peers: dict[int, list] = {p: [] for p in range(size) if p != rank}
        self.verified = 0
        self.failed = False
        self.lock = threading.Lock()  # the sequence (the collective's thread appends)
        self.io = threading.RLock()  # the store exchange (the watchdog, and the exit check in the main thread)

    # -- the collective's side (hot path) -------------------------------------------------------------------
    def record(self, op: str, agree: str, args) -> int:
        match, shown = fingerprint(op, agree, args)
        where = _caller()
        with self.lock:
            k = len(self.seq)
            self.seq.append((match, shown, where))
            self.inflight[k] = time.monotonic()
        for seq in self.peers.values():  # a peer already there with another call: stop before running it
            if k < len(seq) and seq[k][0] != match:
                _fail(self, self.mismatch_message(k))
        return k

    def done(self, k: int) -> None:
        self.inflight.pop(k, None)

    def track(self, k: int, work) -> None:
        """Mark position ``k`` done when ``work`` completes (no future: when the call returns)."""
        try:
            fut = work.get_future()
        except Exception:
            self.done(k)
            return
        fut.add_done_callback(lambda _f: self.done(k))

    # -- the watchdog's side --------------------------------------------------------------------------------
    def _key(self, rank: int, k: int) -> str:
        return f"{NS}/{rank}/{k}"

    def publish(self) -> None:
        """Put this rank's new entries and its count in the store (one round trip)."""
        with self.io:
            self._publish()

    def _publish(self) -> None:
        with self.lock:
            new = self.seq[self.published:]
            start = self.published
        if not new:
            return
        keys = [self._key(self.rank, start + i) for i in range(len(new))] + [f"{NS}/n/{self.rank}"]
        values = [json.dumps(e) for e in new] + [str(start + len(new))]
        self.store.multi_set(keys, values)
        self.published = start + len(new)

    def fetch(self) -> None:
        """Read the peers' new entries (two or three round trips, whatever their number)."""
        with self.io:
            self._fetch()

    def _fetch(self) -> None:
        peers = list(self.peers)
        counters = [f"{NS}/n/{p}" for p in peers]
        if not self.store.check(counters):  # some peer has published nothing yet
            present = [(p, k) for p, k in zip(peers, counters, strict=True) if self.store.check([k])]
            if not present:
                return
            peers, counters = [p for p, _ in present], [k for _, k in present]
        counts = [int(v) for v in self.store.multi_get(counters)]
        want = [(p, k) for p, n in zip(peers, counts, strict=True) for k in range(len(self.peers[p]), n)]
        if not want:
            return
        values = self.store.multi_get([self._key(p, k) for p, k in want])
        for (p, _), v in zip(want, values, strict=True):
            self.peers[p].append(tuple(json.loads(v)))

    def first_difference(self) -> int | None:
        """The first position where a peer's call differs from this rank's (None: none so far)."""
        n = self.published  # what the peers can see of this rank
        k = self.verified
        while k < n:
            mine = self.seq[k][0]
            for seq in self.peers.values():
                if k < len(seq) and seq[k][0] != mine:
                    return k
            if any(k >= len(seq) for seq in self.peers.values()):
                break
            k += 1
        self.verified = k
        return None

    def overdue(self, now: float) -> tuple[int, list[int]] | None:
        """``(position, lagging peers)`` when this rank has waited beyond the timeout in a collective that a
        peer has not reached."""
        if not self.timeout or not self.inflight:
            return None
        k = min(self.inflight)
        if now - self.inflight[k] < self.timeout or k >= self.published:
            return None
        lagging = [p for p, seq in self.peers.items() if len(seq) <= k]
        return (k, lagging) if lagging else None

    # -- the message ----------------------------------------------------------------------------------------
    def _seq_of(self, r: int) -> list:
        return self.seq if r == self.rank else self.peers[r]

    def _call(self, r: int, k: int) -> str:
        seq = self._seq_of(r)
        if k < len(seq):
            return f"#{k + 1} {seq[k][1]} at {seq[k][2]}"
        if not seq:
            return "no collective in this group yet"
        return f"not there (its last: #{len(seq)} {seq[-1][1]} at {seq[-1][2]})"

    def _group(self) -> str:
        return f"process group {self.name!r} ({self.size} ranks)" if self.name else f"a process group of {self.size} ranks"

    def mismatch_message(self, k: int) -> str:
        lines = [f"collectives out of step on {self._group()}: the ranks' collective #{k + 1} differs"]
        lines += [f"  rank {r}: {self._call(r, k)}" for r in range(self.size)]
        if k:
            lines.append("  the calls before it:")
            for j in range(max(0, k - CONTEXT), k):
                lines.append(f"    #{j + 1}: " + "; ".join(f"rank {r} {self._seq_of(r)[j][1]} at "
                                                         f"{self._seq_of(r)[j][2]}" for r in range(self.size)))
            hint = self._first_other_site(k)
            if hint is not None:
                lines.append(f"  the call sites first differ at #{hint + 1}: a collective skipped on one rank "
                             "pairs its next one with the peer's skipped call")
        return "\n".join(lines)

    def _first_other_site(self, k: int) -> int | None:
        for j in range(k):
            sites = {self._seq_of(r)[j][2] for r in range(self.size)}
            if len(sites) > 1:
                return j
        return None

    def hang_message(self, k: int, lagging: list[int], waited: float, states: dict | None = None) -> str:
        mine = self.seq[k]
        lines = [f"rank {self.rank} has waited {waited:.1f} s in collective #{k + 1} of {self._group()}, "
                 f"{mine[1]} at {mine[2]}, which rank(s) {', '.join(map(str, lagging))} did not reach:"]
        said = {"running": "; it runs its own code, outside collectives",
                "waiting": "; it waits in another collective (another group?)",
                "silent": "; its process does not answer"}
        lines += [f"  rank {r}: {self._call(r, k)}{said.get((states or {}).get(r), '')}" for r in range(self.size)]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# the watchdog: one thread per process, for every checked group

_checkers: list = []  # _Held references to Checker (see _register)
_thread: list = []
_state_lock = threading.Lock()

ADVICE = (
    "A real HCCL job would wait here until HCCL_EXEC_TIMEOUT (1800 s by default) and then fail with an opaque "
    "error. Every rank is stopped. Make every rank call the same collectives in the same order, with the same "
    f"shapes and dtypes. {TIMEOUT_ENV}=SECONDS sets how long a rank may wait (0: no limit); {ENV}=0 turns the "
    "check off."
)


class _Held:
    """A strong reference with ``weakref.ref``'s call interface."""

    __slots__ = ("checker",)

    def __init__(self, checker: Checker):
        self.checker = checker

    def __call__(self) -> Checker:
        return self.checker


def _register(checker: Checker) -> None:
    with _state_lock:
        # held strongly (a Checker holds no reference to its group): a group destroyed right after its last
        # collective (``destroy_process_group()`` at the end of a script) must still publish that call at exit,
        # or its peers would see a rank that never got there
        _checkers.append(_Held(checker))
        if not _thread:
            t = threading.Thread(target=_watch, name="ascendify-collective-check", daemon=True)
            _thread.append(t)
            t.start()
            atexit.register(_at_exit)


FINAL_WAIT = 5.0  # seconds a rank waits at exit for its peers' last entries


def _at_exit() -> None:
    """The last comparison, at the end of the program (a mismatch that gloo ran without hanging: another
    shape, another op): wait briefly for the peers' entries, then compare as the watchdog does."""
    if any(c is not None and c.failed for c in (ref() for ref in _checkers)):
        time.sleep(10)  # the watchdog is stopping the process (os._exit): the program must not end with 0
        os._exit(EXIT_STATUS)
    deadline = time.monotonic() + FINAL_WAIT  # for every group together
    for ref in list(_checkers):
        c = ref()
        if c is None:
            continue
        try:
            c.publish()
            while True:
                c.fetch()
                if all(len(seq) >= len(c.seq) for seq in c.peers.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            k = c.first_difference()
            if k is not None:
                _fail(c, c.mismatch_message(k))
            short = [p for p, seq in c.peers.items() if len(seq) < len(c.seq)]
            if short:
                k = min(len(c.peers[p]) for p in short)
                _fail(c, c.hang_message(k, short, time.monotonic() - c.inflight.get(k, time.monotonic()))
                      if k in c.inflight else c.mismatch_message(k))
        except Exception:  # the store is gone: the peers have exited; nothing more to compare
            continue
    _release()


_stopping = threading.Event()


def _release() -> None:
    """After the last comparison: stop the watchdog and let go of the stores while the interpreter is whole
    (a C++ store freed by interpreter teardown under a running thread aborts the process)."""
    _stopping.set()
    for t in _thread:
        if isinstance(t, threading.Thread) and t.is_alive() and t is not threading.current_thread():
            t.join(timeout=2 * POLL)
    _checkers.clear()


def _watch() -> None:
    while not _stopping.is_set():
        time.sleep(POLL)
        live = [c for c in (ref() for ref in list(_checkers)) if c is not None]
        _checkers[:] = [_Held(c) for c in live]
        now = time.monotonic()
        waiting = any(now - t > POLL for c in live for t in list(c.inflight.values()))
        for c in live:
            try:
                _round(c, waiting)
            except Exception as e:  # the store is gone (a peer hosting it exited, the group was destroyed)
                _store_lost(c, e)


def _round(c: Checker, waiting: bool = False) -> None:
    heartbeat(c, waiting)
    if c.store.check([f"{NS}/abort"]):
        _stop_reported(c)
    if c.verified == c.published == len(c.seq) and not c.inflight:
        return  # nothing issued since everything was compared: nothing to publish or compare
    c.publish()
    c.fetch()
    k = c.first_difference()
    if k is not None:
        _fail(c, c.mismatch_message(k))
    now = time.monotonic()
    due = c.overdue(now)
    if due is not None:
        c.fetch()  # the peer may have published since
        due = c.overdue(now)
        if due is not None:
            k, lagging = due
            waited = now - c.inflight.get(k, now)
            states = {p: _peer_state(c, p) for p in lagging}
            # a peer that runs its own code may still come (rank 0 saving a checkpoint while the others wait):
            # it gets BUSY_FACTOR times the timeout; a peer that waits elsewhere, or does not answer, does not
            if waited >= c.timeout * BUSY_FACTOR or any(st != "running" for st in states.values()):
                _fail(c, c.hang_message(k, lagging, waited, states))


def heartbeat(c: Checker, waiting: bool) -> None:
    """Publish this process's state for the peers: waiting in a collective (of any group), or running its code."""
    c.store.set(f"{NS}/hb/{c.rank}", f"{time.time():.3f} {int(waiting)}")


def _peer_state(c: Checker, p: int) -> str:
    """``running`` (outside collectives), ``waiting`` (in a collective of some group) or ``silent``."""
    key = f"{NS}/hb/{p}"
    if not c.store.check([key]):
        return "silent"
    stamp, flag = c.store.get(key).decode().split()
    if time.time() - float(stamp) > max(4 * POLL, 2.0):
        return "silent"
    return "waiting" if flag == "1" else "running"


def _store_lost(c: Checker, err: Exception) -> None:
    """A store error: harmless unless this rank is stuck in a collective (then say what is known here)."""
    if not c.timeout or not c.inflight:
        return
    k = min(c.inflight)
    waited = time.monotonic() - c.inflight.get(k, time.monotonic())
    if waited < c.timeout:
        return
    mine = c.seq[k]
    _exit(f"ascendify: rank {c.rank} has waited {waited:.1f} s in collective #{k + 1} of {c._group()}, "
          f"{mine[1]} at {mine[2]}, and the process group's store is gone ({type(err).__name__}: {err}): "
          f"the rank hosting it has probably exited without this collective.\n{ADVICE}")


def _fail(c: Checker, message: str) -> None:
    """Stop every rank: this one prints ``message`` (or, when another rank reported first, one line)."""
    c.failed = True
    try:
        first = c.store.add(f"{NS}/reporters", 1) == 1
    except Exception:
        first = True
    if not first:
        _stop_reported(c)
    sys.stderr.write(f"ascendify: {message}\n{ADVICE}\n")  # first: the store may vanish any moment
    sys.stderr.flush()
    try:
        c.store.set(f"{NS}/abort", f"rank {c.rank}: {message.splitlines()[0]}")
        _await(c, f"{NS}/stopped", c.size - 1)  # the peers have read why
        c.store.set(f"{NS}/done", "1")
        if c.rank == 0:  # the rank that usually hosts the store leaves last
            time.sleep(0.3)
    except Exception:
        pass
    _exit("")


def _stop_reported(c: Checker) -> None:
    """Another rank reported: say so in one line, acknowledge, wait for the reporter to finish, exit."""
    why = "another rank found the collectives out of step"
    try:
        _await(c, f"{NS}/abort", None)
        why = c.store.get(f"{NS}/abort").decode(errors="replace")
        c.store.add(f"{NS}/stopped", 1)
        _await(c, f"{NS}/done", None)
        if c.rank == 0:
            time.sleep(0.3)
    except Exception:
        pass
    _exit(f"ascendify: rank {c.rank} stopped: collectives out of step ({why}; the full message is on that "
          "rank's stderr)")


def _await(c: Checker, key: str, count: int | None, limit: float = 3.0) -> None:
    """Wait (at most ``limit`` s) until ``key`` exists, or its counter reaches ``count``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if count is None and c.store.check([key]):
            return
        if count is not None and c.store.add(key, 0) >= count:
            return
        time.sleep(0.05)


def _exit(text: str) -> None:
    try:
        if text:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
    finally:
        os._exit(EXIT_STATUS)


# ---------------------------------------------------------------------------------------------------------
# hooking it up


def attach(pg, store):
    """Check the collectives of ``pg`` (the emulated hccl group just made on ``store``); returns ``pg``.

    Wraps the group's collective methods on the instance (c10d and DDP's reducer both call them by name).
    """
    if not enabled() or pg.size() < 2:
        return pg
    checker = Checker(store, pg.rank(), pg.size())
    pg._ascendify_desync = checker
    for method, (op, agree) in METHODS.items():
        fn = getattr(pg, method, None)
        if fn is None or not callable(fn):
            continue
        setattr(pg, method, _wrapped(checker, fn, op, agree))
    _register(checker)
    return pg


def _wrapped(checker: Checker, fn, op: str, agree: str):
    def collective(*args, **kwargs):
        if checker.name == "":
            checker.name = _group_name(fn.__self__)
        k = checker.record(op, agree, args)
        try:
            work = fn(*args, **kwargs)
        except BaseException:
            checker.done(k)
            raise
        checker.track(k, work)
        return work

    collective.__name__ = getattr(fn, "__name__", op)
    collective.__wrapped__ = fn
    return collective


def _group_name(pg) -> str:
    try:
        name = pg.group_name
    except Exception:
        return ""
    return "default" if name in ("0", "") else name


# -- any backend: torch.distributed's functions (ascendify run --check-collectives) ------------------------

FUNCTIONS = {
    "all_reduce": "all", "broadcast": "all", "reduce": "all", "all_gather": "outputs",
    "all_gather_into_tensor": "all", "reduce_scatter": "inputs", "reduce_scatter_tensor": "all",
    "all_to_all_single": "dtype", "all_to_all": "dtype", "gather": "gather_fn", "scatter": "scatter_fn",
    "barrier": "none",
}

_fn_checkers: dict = {}
function_patches = None  # the Patches of install_function_wrappers, when the command line asked for it


def install_function_wrappers(patches=None):
    """Check the collectives called through ``torch.distributed``'s functions, on any backend (a real NPU's
    ``hccl`` included), through ``patches`` (an :class:`ascendify.core.patching.Patches`; a new one by default,
    returned: ``restore()`` undoes it)."""
    global function_patches
    import torch.distributed as dist

    if patches is None:
        from ascendify.core.patching import Patches

        patches = function_patches = function_patches or Patches()

    for name, agree in FUNCTIONS.items():
        fn = getattr(dist, name, None)
        if fn is not None and not hasattr(fn, "__ascendify_desync__"):
            patches.set(dist, name, _function_wrapper(dist, fn, name, agree))
    return patches


def _function_wrapper(dist, fn, name: str, agree: str):
    def collective(*args, **kwargs):
        group = kwargs.get("group")
        c = _function_checker(dist, group)
        if c is None:
            return fn(*args, **kwargs)
        parts = _function_args(name, agree, args, kwargs)
        k = c.record(name, *parts)
        try:
            res = fn(*args, **kwargs)
        finally:
            if not kwargs.get("async_op"):
                c.done(k)
        if kwargs.get("async_op") and res is not None:
            c.track(k, res)
        return res

    collective.__name__ = name
    collective.__wrapped__ = fn
    collective.__ascendify_desync__ = True
    return collective


class _Opts:
    def __init__(self, op=None, root=None):
        if op is not None:
            self.reduceOp = op
        if root is not None:
            self.rootRank = root


def _function_args(name: str, agree: str, args, kwargs):
    """(agree, args in the emulated group's layout) for a ``torch.distributed`` function call."""
    op = kwargs.get("op")
    root = kwargs.get("src", kwargs.get("dst"))
    if name in ("broadcast", "reduce") and len(args) > 1:
        root = args[1]
    if name in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor") and op is None:
        op = "SUM"
    if name == "gather":
        return "all", (list(args[:1]), _Opts(root=root))
    if name == "scatter":
        return "all", (list(args[:1]), _Opts(root=root))
    tensors = [a for a in args if isinstance(a, (torch.Tensor, list, tuple))]
    return agree, (tensors, _Opts(op=op, root=root))


def _function_checker(dist, group) -> Checker | None:
    if not dist.is_initialized():
        return None
    pg = group if group is not None else dist.group.WORLD
    if getattr(pg, "_ascendify_desync", None) is not None or pg.size() < 2:
        return None  # the emulated group checks itself (DDP's calls included)
    c = _fn_checkers.get(pg)
    if c is None:
        try:
            store = dist.distributed_c10d._world.pg_map[pg][1]
        except (AttributeError, KeyError, IndexError):
            return None
        c = _fn_checkers[pg] = Checker(store, pg.rank(), pg.size(), _group_name(pg))
        _register(c)
    return c
