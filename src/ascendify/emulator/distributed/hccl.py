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
torchrun; so do functional collectives, DeviceMesh, DTensor, FSDP1/FSDP2, tensor parallel and
``torch.distributed.checkpoint`` (c10d finds the group by the name kept on its registered backend, and calls
this class's methods from C++). A group made with
``init_process_group("cpu:gloo,npu:hccl")`` takes CPU tensors too (on the same gloo), as torch_npu's does.

Fidelity: the gloo backend keeps refusing ``npu`` tensors, as on hardware (PyTorch's ``c10d`` kernels for
PrivateUse1 ask the group for an ``npu`` backend, which a gloo group does not have). ``ReduceOp.AVG`` is
computed as a sum divided by the group size (gloo has no AVG). HCCL's rules (dtypes, ``ReduceOp``, splits,
ranks per server) are checked by :mod:`.hccl_rules`, the rank table by :mod:`.ranktable`; a group's ranks
check that they agree on its size and all arrive within ``HCCL_CONNECT_TIMEOUT``. Not emulated:
HCCL-specific options (``pg_options`` is accepted and ignored) and HCCL's own numerics (reduction order).

>>> # each process:  import ascendify.emulator; ascendify.emulator.enable()
>>> # dist.init_process_group("hccl"); t = torch.ones(2, device="npu"); dist.all_reduce(t)
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from ascendify.emulator.distributed import hccl_rules

BACKEND = "hccl"
DEVICE = "npu"

__all__ = ["BACKEND", "EmulatedHcclProcessGroup", "HcclOptions", "group_by_comm_name", "install",
           "is_hccl_available", "is_installed"]


def is_hccl_available() -> bool:
    """``torch.distributed.is_hccl_available()`` under emulation: the emulated backend is always there."""
    return True


def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    from ascendify.emulator.device.tensors import cpu_alias

    return cpu_alias(t)


def _check(op: str, tensors) -> None:
    from ascendify.emulator import runtime

    own = None if runtime.settings.single_device else runtime.current_device[0]
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
        if own is not None and t.device.index != own:
            raise RuntimeError(
                f"hccl {op}: a tensor on {t.device}, but this rank's device is npu:{own}. HCCL runs one "
                "device per process (torch_npu: 'ProcessGroupHCCL support one device per process only'): "
                "call torch.npu.set_device(local_rank) before init_process_group and keep every tensor "
                "of the collective on that device."
            )


def _cpu_alias_all(tensors):
    return [_cpu_alias(t) for t in tensors]


def _on_npu(tensors) -> bool:
    """True when the call is an ``npu`` one (HCCL's rules), not a CPU call on a ``cpu:gloo,npu:hccl`` group."""
    return any(isinstance(t, torch.Tensor) and t.device.type == DEVICE for t in tensors)


def _sizes_match(fn: str, tensors, like: torch.Tensor) -> None:
    """c10d's ``assertTypeAndSizesMatch``, which ProcessGroupHCCL's gather and scatter call, with its messages."""
    for i, t in enumerate(tensors):
        if t.dtype != like.dtype:
            raise ValueError(f"ProcessGroupHCCL::{fn}: invalid tensor type at index {i} (expected {like.dtype}, got "
                             f"{t.dtype})")
        if t.shape != like.shape:
            raise ValueError(f"ProcessGroupHCCL::{fn}: invalid tensor size at index {i} (expected "
                             f"{tuple(like.shape)}, got {tuple(t.shape)})")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``t``'s memory in memory order: what HCCL hands its kernels (a pointer and a count).

    gloo's ``*_base`` collectives chunk along dim 0 and compare shapes; HCCL compares element counts only, so
    the emulated group gives gloo flat views of the same memory. A tensor that is not dense (HCCL refuses it:
    ``hccl_rules.check_arguments``) is passed on as it is."""
    if t.is_contiguous():
        return t.reshape(-1)
    if hccl_rules.non_overlapping_and_dense(t):  # channels_last and other permuted layouts: one block of memory
        return t.as_strided((t.numel(),), (1,))
    return t


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
    except RuntimeError:  # gloo's send/recv and _reduce_scatter_base works have no future
        return _PendingWork(inner, result, after)
    return _create_work_from_future(fut.then(finish))


def _work_all(inners, result, after=None):
    """One c10d work for several gloo works (coalesced collectives that gloo runs one by one)."""
    if len(inners) == 1:
        return _work(inners[0], result, after)

    def finish(fut):
        for f in fut.value():
            f.value()  # re-raises gloo's error, if any
        if after is not None:
            after()
        return result

    futs = torch.futures.collect_all([w.get_future() for w in inners])
    return _create_work_from_future(futs.then(finish))


class _PendingWork(dist._Work):
    """Wraps a gloo work without a future (send/recv, ``_reduce_scatter_base``): nothing blocks until
    ``wait()``, as ``isend`` expects; ``after`` runs in the first ``wait()``."""

    def __init__(self, inner, result, after=None):
        super().__init__()
        self._inner, self._result, self._after = inner, result, after
        self._done: bool | None = None

    def wait(self, timeout=None) -> bool:
        # gloo's inner wait() is called once: a second wait() of a _reduce_scatter_base work copies its sum
        # into the output again (undoing AVG's division when, say, a recorder waited on it first)
        if self._done is not None:
            return self._done
        if timeout is None or not timeout:  # c10d's "no timeout" arrives as a zero timedelta
            done = self._inner.wait()
        else:
            done = self._inner.wait(timeout)
        self._done = done
        if self._after is not None:  # ReduceOp.AVG's division, once the sum has landed
            after, self._after = self._after, None
            after()
        return done

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


class HcclOptions:
    """``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options``: what ``new_group(pg_options=...)`` takes for
    HCCL. MindSpeed and Megatron build one per group (``hccl_config`` with ``group_name``, buffer sizes...); the
    emulated group accepts it and ignores its HCCL tuning, as it ignores ``pg_options`` generally."""

    def __init__(self, is_high_priority_stream: bool = False):
        self.is_high_priority_stream = is_high_priority_stream
        self.global_ranks_in_group: list[int] = []
        self.group_id = ""
        self._timeout = datetime.timedelta(seconds=1800)
        self._hccl_config: dict = {}

    @property
    def hccl_config(self) -> dict:
        return dict(self._hccl_config)  # a copy, as torch_npu's binding returns (no in-place update)

    @hccl_config.setter
    def hccl_config(self, value: dict) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"hccl_config must be a dict, not {type(value).__name__}")
        self._hccl_config = dict(value)

    def __repr__(self) -> str:
        return f"ProcessGroupHCCL.Options(hccl_config={self._hccl_config!r})"


class EmulatedHcclProcessGroup(dist.ProcessGroup):
    """A process group named ``hccl`` whose collectives run gloo on CPU aliases of ``npu`` tensors."""

    Options = HcclOptions  # torch_npu: ProcessGroupHCCL.Options

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._gloo = _make_gloo(store, rank, size, timeout)
        self._gloo._ascendify_group = self
        self._cpu_ok: bool | None = None
        # c10d keeps a group's name on its backends ("ProcessGroup name not set" without one): DeviceMesh,
        # DTensor and functional collectives find groups by name. The gloo underneath holds it; the
        # collectives still reach this class's methods (c10d calls the Python overrides, not the backend).
        self._register_backend(torch.device(DEVICE), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)

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

    def _gloo_args(self, op: str, *parts, opts=None, splits: bool | None = None):
        """The tensors gloo runs on, part by part (a part: a list of tensors or a list of such lists).

        ``npu`` tensors become CPU aliases of the same memory. CPU tensors pass only where the group takes
        them, and only when the whole call is on the CPU (one collective runs on one device's backend).
        HCCL's rules (``hccl_rules.py``: dtypes, ``ReduceOp``, contiguity, all_to_all splits) are checked
        on ``npu`` calls, with the reduce op of ``opts`` and whether all_to_all got split sizes (``splits``).
        """
        flat = [t for p in parts for x in p for t in (x if isinstance(x, (list, tuple)) else (x,))]
        if flat and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in flat):
            if self._serves_cpu():
                return parts if len(parts) > 1 else parts[0]
        _check(op, flat)
        reduce_op = getattr(getattr(opts, "reduceOp", None), "op", None)
        hccl_rules.check_collective(op, flat, reduce_op=getattr(reduce_op, "name", None), split_sizes=splits,
                                    group_size=self._size)
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

    def get_hccl_comm_name(self, rank: int = 0) -> str:
        """torch_npu's name of the group's HCCL communicator (``group._get_backend(npu).get_hccl_comm_name(r)``),
        which communication-fused operators (``npu_all_gather_base_mm``...) take as ``hcom``;
        :func:`group_by_comm_name` finds the group again."""
        name = f"ascendify_hccl_{id(self):x}"
        _COMM_NAMES[name] = self
        return name

    # -- collectives -----------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        args = self._gloo_args("all_reduce", tensors, opts=opts)
        avg = _reduce_opts_avg(opts)
        work = self._gloo.allreduce(args, opts)
        return _work(work, tensors, _divider(tensors, self._size) if avg else None)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        args = self._gloo_args("all_reduce_coalesced", tensors, opts=opts)
        avg = _reduce_opts_avg(opts)
        work = self._gloo.allreduce_coalesced(args, opts)
        return _work(work, tensors, _divider(tensors, self._size) if avg else None)

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        return _work(self._gloo.broadcast(self._gloo_args("broadcast", tensors), opts), tensors)

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        args = self._gloo_args("reduce", tensors, opts=opts)
        avg = _reduce_opts_avg(opts)
        after = _divider(tensors, self._size) if avg and self._rank == opts.rootRank else None
        return _work(self._gloo.reduce(args, opts), tensors, after)

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = self._gloo_args("all_gather", output_lists, inputs)
        if not _on_npu(inputs):
            return _work(self._gloo.allgather(outs, ins, opts), output_lists)
        hccl_rules.check_arguments("all_gather", outputs=output_lists[-1], input=inputs[0], size=self._size)
        if all(o.numel() == inputs[0].numel() for o in output_lists[-1]):  # HcclAllGather: counts, not shapes
            return _work(self._gloo.allgather([[_flat(o) for o in outs[-1]]], [_flat(ins[0])], opts), output_lists)
        return self._allgather_v(output_lists[-1], outs[-1], ins[0], opts)  # HcclAllGatherV: uneven parts

    def _allgather_v(self, outputs, outs, inp, opts):
        """Uneven parts (torch_npu's ``HcclAllGatherV``: rank j sends ``outputs[j].numel()`` elements): gloo
        gathers each rank's part padded to the largest, and the parts are copied out once they have landed."""
        most = max(o.numel() for o in outs)
        send = torch.zeros(most, dtype=inp.dtype)
        send[: inp.numel()] = inp.reshape(-1)
        recv = [torch.empty(most, dtype=inp.dtype) for _ in outs]

        def after():
            for o, r in zip(outs, recv, strict=True):
                o.copy_(r[: o.numel()].view(o.shape))

        return _work(self._gloo.allgather([recv], [send], opts), [outputs], after)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = self._gloo_args("all_gather_coalesced", output_lists, inputs)
        return _work(self._gloo.allgather_coalesced(outs, ins, opts), output_lists)

    def all_gather_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        (out,), (inp,) = self._gloo_args("all_gather_into_tensor", [output], [input])
        if _on_npu([input]):  # HCCL checks the element counts only (accelerate passes a flat output)
            hccl_rules.check_arguments("all_gather_into_tensor", output=output, input=input, size=self._size)
            out, inp = _flat(out), _flat(inp)
        return _work(self._gloo._allgather_base(out, inp, opts), [output])

    _allgather_base = all_gather_single  # the pre-2.10 name

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        # gloo has no coalesced all-gather into tensors (DTensor and funcol's *_coalesced use it): one each
        opts = opts if opts is not None else dist.AllgatherOptions()
        outs, ins = self._gloo_args("all_gather_into_tensor", outputs, inputs)
        if _on_npu(inputs):
            for o, i in zip(outputs, inputs, strict=True):
                hccl_rules.check_arguments("all_gather_into_tensor", output=o, input=i, size=self._size)
            outs, ins = [_flat(o) for o in outs], [_flat(i) for i in ins]
        return _work_all([self._gloo._allgather_base(o, i, opts) for o, i in zip(outs, ins, strict=True)], outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        outs, ins = self._gloo_args("reduce_scatter_tensor", outputs, inputs, opts=opts)
        if _on_npu(inputs):
            for o, i in zip(outputs, inputs, strict=True):
                hccl_rules.check_arguments("reduce_scatter_tensor", output=o, input=i, size=self._size)
            outs, ins = [_flat(o) for o in outs], [_flat(i) for i in ins]
        avg = _reduce_opts_avg(opts)
        works = [self._gloo._reduce_scatter_base(o, i, opts) for o, i in zip(outs, ins, strict=True)]
        return _work_all(works, outputs, _divider(outputs, self._size) if avg else None)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        outs, ins = self._gloo_args("reduce_scatter", outputs, input_lists, opts=opts)
        avg = _reduce_opts_avg(opts)
        divide = _divider(outputs, self._size) if avg else None
        if not _on_npu(outputs):
            return _work(self._gloo.reduce_scatter(outs, ins, opts), outputs, divide)
        hccl_rules.check_arguments("reduce_scatter", output=outputs[0], inputs=input_lists[-1], size=self._size)
        if all(i.numel() == outputs[0].numel() for i in input_lists[-1]):  # HcclReduceScatter: counts only
            work = self._gloo.reduce_scatter([_flat(outs[0])], [[_flat(i) for i in ins[-1]]], opts)
            return _work(work, outputs, divide)
        # uneven parts (torch_npu's HcclReduceScatterV: rank j gets inputs[j].numel() elements): padded to the
        # largest part, reduced and scattered by gloo, this rank's part copied out
        most = max(i.numel() for i in ins[-1])
        send = torch.zeros(len(ins[-1]) * most, dtype=outs[0].dtype)
        for j, i in enumerate(ins[-1]):
            send[j * most: j * most + i.numel()] = i.reshape(-1)
        recv = torch.empty(most, dtype=outs[0].dtype)
        out = outs[0]

        def after():
            out.copy_(recv[: out.numel()].view(out.shape))
            if divide is not None:
                divide()

        return _work(self._gloo._reduce_scatter_base(recv, send, opts), outputs, after)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        (out,), (inp,) = self._gloo_args("reduce_scatter_tensor", [output], [input], opts=opts)
        if _on_npu([input]):  # HCCL checks the element counts only (accelerate passes flat buffers)
            hccl_rules.check_arguments("reduce_scatter_tensor", output=output, input=input, size=self._size)
            out, inp = _flat(out), _flat(inp)
        avg = _reduce_opts_avg(opts)
        work = self._gloo._reduce_scatter_base(out, inp, opts)
        return _work(work, [output], _divider([output], self._size) if avg else None)

    _reduce_scatter_base = reduce_scatter_single  # the pre-2.10 name

    def gather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        outs, ins = self._gloo_args("gather", output_lists, inputs)
        if _on_npu(inputs) and output_lists:
            _sizes_match("gather", output_lists[0], inputs[0])
        if self._rank == opts.rootRank and not all(t.device.type == "cpu" for t in inputs):
            hccl_rules.check_gather()  # torch_npu runs dist.gather as an all_gather, with a warning
        return _work(self._gloo.gather(outs, ins, opts), output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        outs, ins = self._gloo_args("scatter", outputs, input_lists)
        if _on_npu(outputs) and input_lists:
            _sizes_match("scatter", input_lists[0], outputs[0])
        return _work(self._gloo.scatter(outs, ins, opts), outputs)

    def alltoall(self, outputs, inputs, opts=None):
        """``dist.all_to_all`` (lists): HCCL takes parts of any size (HcclAlltoAllV); gloo has no list all-to-all,
        so the parts travel as one flat all-to-all with split sizes, and are copied out once they have landed."""
        opts = opts if opts is not None else dist.AllToAllOptions()
        if len(outputs) != self._size:
            raise RuntimeError("the size of output_tensors and worldsize must equal\nERR02001 DIST invalid parameter")
        if len(outputs) != len(inputs):
            raise RuntimeError("the size of input_tensors and output_tensors must equal\nERR02001 DIST invalid "
                               "parameter")
        outs, ins = self._gloo_args("all_to_all", outputs, inputs, splits=True)
        send = torch.cat([i.reshape(-1) for i in ins]) if ins else torch.empty(0)
        recv = torch.empty(sum(o.numel() for o in outs), dtype=send.dtype)
        out_splits, in_splits = [o.numel() for o in outs], [i.numel() for i in ins]

        def after():
            for o, part in zip(outs, torch.split(recv, out_splits), strict=True):
                o.copy_(part.view(o.shape))

        return _work(self._gloo.alltoall_base(recv, send, out_splits, in_splits, opts), outputs, after)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        splits = bool(output_split_sizes) or bool(input_split_sizes)
        (out,), (inp,) = self._gloo_args("all_to_all_single", [output], [input], splits=splits)
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
        return _work(self._gloo.recv_anysource(self._gloo_args("recv_anysource", tensors), tag), tensors)

    def shutdown(self) -> None:
        self._gloo = None


_COMM_NAMES: dict = {}  # get_hccl_comm_name() -> the backend it names


def group_by_comm_name(name: str):
    """The emulated hccl process group whose communicator ``get_hccl_comm_name`` named ``name``, or None."""
    return _COMM_NAMES.get(name)


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
    return _Gloo(store, rank, size, opts)


class _Gloo(dist.ProcessGroupGloo):
    """The gloo under an emulated hccl group, which ``group._get_backend(torch.device("npu"))`` returns: it
    answers torch_npu's ``get_hccl_comm_name(rank)`` for its group (MindSpeed asks it for ``hcom``)."""

    def get_hccl_comm_name(self, rank: int = 0) -> str:
        return self._ascendify_group.get_hccl_comm_name(rank)


def _create(backend_opts, pg_options=None):
    if os.environ.get("LOCAL_WORLD_SIZE", "").isdigit():  # set by torchrun: the ranks on this server
        hccl_rules.check_ranks_per_node(int(os.environ["LOCAL_WORLD_SIZE"]))
    timeout = backend_opts.timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=1800)
    _check_rendezvous(backend_opts.store, backend_opts.group_rank, backend_opts.group_size,
                      getattr(backend_opts, "global_ranks_in_group", None) or [])
    if not backend_opts.global_ranks_in_group:  # the default group: the rank table, if the job has one
        from ascendify.emulator.distributed import ranktable

        ranktable.check_group(backend_opts.group_rank, backend_opts.group_size)
    from ascendify.emulator.distributed import desync  # ranks out of step: an error naming them, not a hang

    return desync.attach(EmulatedHcclProcessGroup(backend_opts.store, backend_opts.group_rank,
                                                  backend_opts.group_size, timeout), backend_opts.store)


CONNECT_TIMEOUT_S = 120  # HCCL_CONNECT_TIMEOUT's default (seconds): how long HCCL waits to link the ranks


def connect_timeout() -> float:
    """``HCCL_CONNECT_TIMEOUT`` (seconds), as HCCL reads it; the default 120."""
    try:
        return float(os.environ.get("HCCL_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S))
    except ValueError:
        return CONNECT_TIMEOUT_S


def _check_rendezvous(store, rank: int, size: int, global_ranks: list[int]) -> None:
    """Every rank of the group states its group size in the store and reads the others' before gloo links up.

    A rank that never comes is reported after ``HCCL_CONNECT_TIMEOUT`` (HCCL's link-setup timeout) naming
    the missing ranks, instead of gloo waiting for the whole process-group timeout (30 minutes); ranks that
    disagree on the world size are reported at once (gloo could otherwise pair them and compute wrong sums).
    """
    import time

    def glob(r: int) -> int:
        return global_ranks[r] if r < len(global_ranks) else r

    key = "ascendify_hccl_size/{}"
    store.set(key.format(rank), str(size))
    deadline = time.monotonic() + connect_timeout()
    missing: list[int] = []
    for r in range(size):
        k = key.format(r)
        while True:
            try:
                store.wait([k], datetime.timedelta(seconds=max(0.05, min(1.0, deadline - time.monotonic()))))
                break
            except (RuntimeError, dist.DistStoreError):
                if time.monotonic() >= deadline:
                    missing.append(r)
                    break
        if missing:
            continue
        theirs = int(store.get(k).decode())
        if theirs != size:
            raise RuntimeError(
                f"hccl: mismatched world_size: rank {glob(r)} joined with world_size={theirs}, this rank "
                f"({glob(rank)}) with world_size={size}. Every rank must pass the same world_size "
                "(WORLD_SIZE / RANK_SIZE) to init_process_group."
            )
    if missing:
        names = ", ".join(str(glob(r)) for r in missing[:16]) + (" ..." if len(missing) > 16 else "")
        raise RuntimeError(
            f"hccl: the rendezvous did not complete: rank(s) {names} of {size} did not join within "
            f"HCCL_CONNECT_TIMEOUT={connect_timeout():g}s (this is rank {glob(rank)}). Check that every rank "
            "was started, with the same MASTER_ADDR/MASTER_PORT and world size; a real HCCL job fails the "
            "same way after HCCL_CONNECT_TIMEOUT (default 120 s)."
        )


def _bounded_store(original):
    """torch's ``_create_c10d_store`` (env:// and tcp:// rendezvous) with the wait for the other ranks bounded by
    ``HCCL_CONNECT_TIMEOUT`` instead of the whole process-group timeout (30 minutes by default), and a message
    that says what went wrong when the port is taken or the ranks never all arrive. Later store operations
    keep the caller's timeout."""

    def _create_c10d_store(hostname, port, rank, world_size, timeout, use_libuv=True):
        limit = datetime.timedelta(seconds=connect_timeout())
        short = min(timeout, limit) if isinstance(timeout, datetime.timedelta) else limit
        try:
            store = original(hostname, port, rank, world_size, short, use_libuv)
        except RuntimeError as exc:
            text = str(exc)
            if "EADDRINUSE" in text or "already in use" in text:
                msg = (f"hccl: MASTER_PORT {port} on {hostname} is already in use by another process: pick a "
                       f"free port (MASTER_PORT, torchrun --master-port). [{text.strip().splitlines()[0]}]")
            elif "imed out" in text or "timeout" in text:
                msg = (f"hccl: the rendezvous at {hostname}:{port} did not complete: not all {world_size} ranks "
                       f"arrived within HCCL_CONNECT_TIMEOUT={limit.total_seconds():g}s (this is rank {rank}). "
                       "Check that every rank was started with the same MASTER_ADDR/MASTER_PORT and "
                       f"world size. [{text.strip().splitlines()[0]}]")
            else:
                raise
            try:
                err = type(exc)(msg)
            except TypeError:
                err = RuntimeError(msg)
            raise err from exc
        if isinstance(timeout, datetime.timedelta) and short != timeout:
            store.set_timeout(timeout)
        return store

    _create_c10d_store.__wrapped__ = original
    return _create_c10d_store


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
    import importlib

    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the attribute is the function rendezvous()
    runtime.patches.set(rdzv, "_create_c10d_store", _bounded_store(rdzv._create_c10d_store))
    _installed = True


def is_installed() -> bool:
    return _installed
