"""Backend ``hccl`` for the emulated ``npu``: gloo underneath, on zero-copy CPU aliases.

On Ascend, ``init_process_group("hccl")`` gives a process group whose collectives take ``npu`` tensors.
Under emulation :func:`install` registers a backend of that name for the ``npu`` device. Each collective
checks that every tensor is on ``npu`` (HCCL rejects CPU tensors), runs gloo on CPU aliases of the same
memory, so results land in place in the ``npu`` tensors, and returns a work object whose ``wait()`` and
``get_future()`` behave as usual (the future's value holds the ``npu`` tensors, which DDP's reducer relies
on). DDP with ``device_ids``, ``all_reduce``, ``all_gather`` (and ``all_gather_into_tensor``), ``broadcast``,
``reduce``, ``reduce_scatter`` (and ``reduce_scatter_tensor``), ``gather``, ``scatter``, ``all_to_all_single``,
``barrier``, ``send``/``recv`` (``isend``/``irecv`` do not block), object collectives
(``all_gather_object``...) and subgroups (``new_group(backend="hccl")``) all work across processes started by
torchrun. A group made with
``init_process_group("cpu:gloo,npu:hccl")`` takes CPU tensors too (on the same gloo), as torch_npu's does.

Fidelity: the gloo backend keeps refusing ``npu`` tensors, as on hardware (PyTorch's ``c10d`` kernels for
PrivateUse1 ask the group for an ``npu`` backend, which a gloo group does not have). ``ReduceOp.AVG`` is
computed as a sum divided by the group size (gloo has no AVG). Not emulated: functional collectives and
DTensor (they reach process groups from C++ through paths a Python process group does not serve),
HCCL-specific options (``pg_options`` is accepted and ignored), and HCCL's own numerics (reduction order).

>>> # each process:  import ascendify.emulator; ascendify.emulator.enable()
>>> # dist.init_process_group("hccl"); t = torch.ones(2, device="npu"); dist.all_reduce(t)
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

BACKEND = "hccl"
DEVICE = "npu"

__all__ = ["BACKEND", "EmulatedHcclProcessGroup", "install", "is_hccl_available", "is_installed"]


def is_hccl_available() -> bool:
    """``torch.distributed.is_hccl_available()`` under emulation: the emulated backend is always there."""
    return True


def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    from ascendify.emulator.device.tensors import cpu_alias

    return cpu_alias(t)


def _check(op: str, tensors) -> None:
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"hccl {op}: expected tensors, got {type(t).__name__}")
        if t.device.type != DEVICE:
            raise RuntimeError(
                f"hccl {op}: tensors must be on the npu device, got one on {t.device}. HCCL only "
                "communicates npu tensors: move it with .npu(), or use a gloo group for CPU tensors."
            )
        if t.layout is not torch.strided:
            raise RuntimeError(f"hccl {op}: tensors must be dense (got layout {t.layout})")


def _cpu_alias_all(tensors):
    return [_cpu_alias(t) for t in tensors]


def _work(inner, result, after=None):
    """A c10d work that completes when gloo's ``inner`` work does, with ``result`` (npu tensors) as value.

    ``after`` runs once the data has landed (used to finish ``ReduceOp.AVG``).
    """

    def finish(fut):
        fut.value()  # re-raises gloo's error, if any
        if after is not None:
            after()
        return result

    try:
        fut = inner.get_future()
    except RuntimeError:  # gloo's send/recv works have no future
        return _PendingWork(inner, result)
    return _create_work_from_future(fut.then(finish))


class _PendingWork(dist._Work):
    """Wraps a gloo work without a future (send/recv): nothing blocks until ``wait()``, as ``isend`` expects."""

    def __init__(self, inner, result):
        super().__init__()
        self._inner, self._result = inner, result

    def wait(self, timeout=None) -> bool:
        if timeout is None or not timeout:  # c10d's "no timeout" arrives as a zero timedelta
            return self._inner.wait()
        return self._inner.wait(timeout)

    def is_completed(self) -> bool:
        return self._inner.is_completed()

    def is_success(self) -> bool:
        return self._inner.is_success()

    def get_future(self):
        self.wait()
        done = torch.futures.Future()
        done.set_result(self._result)
        return done


def _reduce_opts_avg(opts):
    """If ``opts.reduceOp`` is AVG, switch it to SUM and return True (the caller divides afterwards)."""
    if opts.reduceOp == dist.ReduceOp.AVG:
        opts.reduceOp = dist.ReduceOp.SUM
        return True
    return False


def _divider(tensors, size):
    def after():
        with torch.no_grad():
            for t in tensors:
                if t.is_floating_point() or t.is_complex():
                    t.div_(size)
                else:
                    t.floor_divide_(size)

    return after


class EmulatedHcclProcessGroup(dist.ProcessGroup):
    """A process group named ``hccl`` whose collectives run gloo on CPU aliases of ``npu`` tensors."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._gloo = _make_gloo(store, rank, size, timeout)
        self._cpu_ok: bool | None = None

    # -- which tensors this group takes -------------------------------------------------------------------
    def _serves_cpu(self) -> bool:
        """True when the group was made for CPU tensors too (``init_process_group("cpu:gloo,npu:hccl")``)."""
        if self._cpu_ok is None:
            try:
                config = dist.get_backend_config(self)
            except (ValueError, RuntimeError, KeyError):
                return False  # not registered yet (still inside init_process_group)
            self._cpu_ok = any(part.split(":")[0].strip() == "cpu" for part in config.split(",") if ":" in part)
        return self._cpu_ok

    def _gloo_args(self, op: str, *parts):
        """The tensors gloo runs on, part by part (a part: a list of tensors or a list of such lists).

        ``npu`` tensors become CPU aliases of the same memory. CPU tensors pass only where the group takes
        them, and only when the whole call is on the CPU (one collective runs on one device's backend).
        """
        flat = [t for p in parts for x in p for t in (x if isinstance(x, (list, tuple)) else (x,))]
        if flat and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in flat):
            if self._serves_cpu():
                return parts if len(parts) > 1 else parts[0]
        _check(op, flat)
        out = [[_cpu_alias_all(x) if isinstance(x, (list, tuple)) else _cpu_alias(x) for x in p] for p in parts]
        return out if len(out) > 1 else out[0]

    @property
    def _device_types(self) -> list[torch.device]:
        """The devices the group serves (c10d reads it to place object collectives: ``all_gather_object``)."""
        return [torch.device("cpu"), torch.device(DEVICE)] if self._serves_cpu() else [torch.device(DEVICE)]

    # -- identity --------------------------------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return BACKEND

    def getRank(self) -> int:  # noqa: N802
        return self._rank

    def getSize(self) -> int:  # noqa: N802
        return self._size

    def __repr__(self) -> str:
        return f"EmulatedHcclProcessGroup(rank={self._rank}, size={self._size})"

    # -- collectives -----------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        avg = _reduce_opts_avg(opts)
        work = self._gloo.allreduce(self._gloo_args("all_reduce", tensors), opts)
        return _work(work, tensors, _divider(tensors, self._size) if avg else None)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        avg = _reduce_opts_avg(opts)
        work = self._gloo.allreduce_coalesced(self._gloo_args("all_reduce_coalesced", tensors), opts)
        return _work(work, tensors, _divider(tensors, self._size) if avg else None)

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        return _work(self._gloo.broadcast(self._gloo_args("broadcast", tensors), opts), tensors)

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        avg = _reduce_opts_avg(opts)
        after = _divider(tensors, self._size) if avg and self._rank == opts.rootRank else None
        return _work(self._gloo.reduce(self._gloo_args("reduce", tensors), opts), tensors, after)

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = self._gloo_args("all_gather", output_lists, inputs)
        return _work(self._gloo.allgather(outs, ins, opts), output_lists)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = self._gloo_args("all_gather_coalesced", output_lists, inputs)
        return _work(self._gloo.allgather_coalesced(outs, ins, opts), output_lists)

    def all_gather_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        (out,), (inp,) = self._gloo_args("all_gather_into_tensor", [output], [input])
        return _work(self._gloo._allgather_base(out, inp, opts), [output])

    _allgather_base = all_gather_single  # the pre-2.10 name

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = self._gloo_args("all_gather_into_tensor", outputs, inputs)
        return _work(self._gloo.allgather_into_tensor_coalesced(outs, ins, opts), outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        avg = _reduce_opts_avg(opts)
        outs, ins = self._gloo_args("reduce_scatter", outputs, input_lists)
        work = self._gloo.reduce_scatter(outs, ins, opts)
        return _work(work, outputs, _divider(outputs, self._size) if avg else None)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        avg = _reduce_opts_avg(opts)
        (out,), (inp,) = self._gloo_args("reduce_scatter_tensor", [output], [input])
        work = self._gloo._reduce_scatter_base(out, inp, opts)
        return _work(work, [output], _divider([output], self._size) if avg else None)

    _reduce_scatter_base = reduce_scatter_single  # the pre-2.10 name

    def gather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        outs, ins = self._gloo_args("gather", output_lists, inputs)
        return _work(self._gloo.gather(outs, ins, opts), output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        outs, ins = self._gloo_args("scatter", outputs, input_lists)
        return _work(self._gloo.scatter(outs, ins, opts), outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        (out,), (inp,) = self._gloo_args("all_to_all_single", [output], [input])
        work = self._gloo.alltoall_base(out, inp, output_split_sizes, input_split_sizes, opts)
        return _work(work, [output])

    alltoall_base = all_to_all_single

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        opts.device_ids = []  # gloo's barrier is device-free
        return _work(self._gloo.barrier(opts), [])

    def send(self, tensors, dst: int, tag: int = 0):
        return _work(self._gloo.send(self._gloo_args("send", tensors), dst, tag), tensors)

    def recv(self, tensors, src: int, tag: int = 0):
        return _work(self._gloo.recv(self._gloo_args("recv", tensors), src, tag), tensors)

    def recv_anysource(self, tensors, tag: int = 0):
        return _work(self._gloo.recv_anysource(self._gloo_args("recv", tensors), tag), tensors)

    def shutdown(self) -> None:
        self._gloo = None


def _make_gloo(store, rank: int, size: int, timeout: datetime.timedelta):
    """gloo over loopback unless the user names an interface (``GLOO_SOCKET_IFNAME``), as torchrun tests do."""
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        device = dist.ProcessGroupGloo.create_device(interface=os.environ["GLOO_SOCKET_IFNAME"])
    else:
        try:
            device = dist.ProcessGroupGloo.create_default_device()
        except RuntimeError:
            device = dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")
    opts._devices = [device]
    return dist.ProcessGroupGloo(store, rank, size, opts)


def _create(backend_opts, pg_options=None):
    timeout = backend_opts.timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=1800)
    from ascendify.emulator.distributed import desync  # ranks out of step: an error naming them, not a hang

    return desync.attach(EmulatedHcclProcessGroup(backend_opts.store, backend_opts.group_rank,
                                                  backend_opts.group_size, timeout), backend_opts.store)


_installed = False


def install() -> None:
    """Register backend ``hccl`` for device ``npu`` and ``torch.distributed.is_hccl_available``. Idempotent."""
    global _installed
    if _installed:
        return
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build: no hccl emulation")
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=[DEVICE])
    from ascendify.emulator import runtime

    runtime.patches.set(dist, "is_hccl_available", is_hccl_available)
    _installed = True


def is_installed() -> bool:
    return _installed
