"""The Ascend PyTorch Profiler's output folder, written from a torch profiler run on the emulated npu.

On an NPU, ``torch_npu.profiler`` with ``tensorboard_trace_handler(DIR)`` writes
``DIR/{worker}_{pid}_{time}_ascend_pt/`` holding ``profiler_info.json``, ``profiler_metadata.json`` and
``ASCEND_PROFILER_OUTPUT/`` (``trace_view.json``, ``kernel_details.csv``, ``operator_details.csv``,
``step_trace_time.csv``, ``op_statistic.csv`` and, with ``profile_memory=True``, ``operator_memory.csv`` and
``memory_record.csv``). The names and CSV header rows are data (``data/ascend_profiler_layout.json``, with their
sources); tools that read these files (msprof-analyze, MindStudio Insight, a user's own pandas) read ours.

Where the numbers come from: torch's profiler records the CPU ops with their input tensors' devices
(:func:`build`). An op whose inputs are on ``npu`` is a framework (torch) operator of the NPU; the innermost
such op that computes something (not a view, not an allocation) is a device task, as the kernel an NPU would
launch for it; its start and duration are the host's, for the emulated device computes on the host, in the
op's own thread. Collectives (gloo's ``gloo:all_reduce`` under the emulated ``hccl``) are HCCL tasks.
Allocations made inside NPU operators are device memory. ``profiler_metadata.json`` says all this under
``ascendify``; nothing in the files claims to be a measurement of NPU hardware.

Not written: CANN's raw data (``PROF_*/``, ``FRAMEWORK/``), ``communication.json`` and the files that need
hardware counters (``l2_cache.csv``, AI Core metrics, ``npu_module_mem.csv``).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ascendify.core import knowledge
from ascendify.core.fileio import write_atomic, write_csv

DEVICE_PID = 1 << 20  # pids of the device-side processes in trace_view.json: clear of any host pid's tid space
# ops that move no data on a device: views and allocations (an NPU runs no task for them)
_NO_TASK = frozenset("""as_strided view _unsafe_view reshape _reshape_alias transpose t permute expand expand_as
detach detach_ squeeze unsqueeze slice select alias empty empty_strided empty_like resolve_conj resolve_neg
lift_fresh unfold narrow split split_with_sizes chunk unbind view_as diagonal _to_copy to contiguous
set_ resize_ result_type is_nonzero item _local_scalar_dense size stride numel""".split())
_COMM = {"all_reduce": "allReduce", "allreduce": "allReduce", "broadcast": "broadcast", "reduce": "reduce",
         "all_gather": "allGather", "allgather": "allGather", "reduce_scatter": "reduceScatter",
         "all_to_all": "alltoall", "alltoall": "alltoall", "gather": "gather", "scatter": "scatter",
         "send": "send", "recv": "receive", "barrier": "barrier"}


def _write_rows(path: str, header: list[str], rows) -> None:
    """One of the profiler's CSV files: ``rows`` are lists in ``header``'s order."""
    write_csv(path, (dict(zip(header, r, strict=False)) for r in rows), header)


def layout() -> dict:
    return knowledge.load("ascend_profiler_layout")


@dataclass
class Op:
    name: str
    start: int  # ns, host clock
    end: int
    tid: int
    npu: bool
    shapes: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    stack: str = ""
    children: list = field(default_factory=list)
    parent: Op | None = None
    tasks: list = field(default_factory=list)  # device tasks it launched itself


@dataclass
class Task:
    name: str
    type: str
    start: int
    end: int
    op: Op
    comm: bool = False
    step: int | None = None


@dataclass
class Run:
    ops: list  # top-level Ops (their children nested)
    tasks: list
    steps: list  # (step number, start ns, end ns)
    memory: list  # (time ns, bytes +/-, ptr, op name or "")
    device: int


def _inputs(ef, record: bool):
    shapes, dtypes, npu = [], [], False
    for x in getattr(ef, "inputs", None) or []:
        items = x if isinstance(x, list) else [x]
        for t in items:
            dev = getattr(t, "device", None)
            if dev is not None and dev.type == "npu":
                npu = True
        if record:
            first = items[0] if items else None
            shapes.append(list(getattr(first, "sizes", None) or []) if hasattr(first, "sizes") else [])
            dtypes.append(str(getattr(first, "dtype", "")).replace("torch.", "") if hasattr(first, "dtype") else "")
    return npu, shapes, dtypes


def build(prof, record_shapes: bool, with_stack: bool) -> Run:
    """The NPU view of a finished torch profiler run (its event tree, recorded with shapes)."""
    import torch

    # the device id an NPU job reports: the rank's own device (under torchrun the emulator serves every rank from
    # one device 0, single-device mode, while the job runs on npu:LOCAL_RANK)
    local = os.environ.get("LOCAL_RANK", "")
    device = int(local) if local.isdigit() else (torch.npu.current_device() if hasattr(torch, "npu") else 0)
    roots: list[Op] = []
    tasks: list[Task] = []
    steps: list = []
    memory: list = []
    npu_allocs: set = set()

    def visit(e, parent: Op | None, stack: list[str]):
        kind = type(e.extra_fields).__name__
        if kind.endswith("Allocation"):
            ef = e.extra_fields
            owner = parent
            while owner is not None and not owner.npu:
                owner = owner.parent
            key = ef.ptr
            if ef.alloc_size > 0 and owner is not None:
                npu_allocs.add(key)
                memory.append((e.start_time_ns, ef.alloc_size, key, owner.name))
            elif ef.alloc_size < 0 and key in npu_allocs:
                npu_allocs.discard(key)
                memory.append((e.start_time_ns, ef.alloc_size, key, ""))
            return
        if kind.endswith("PyCall") or kind.endswith("PyCCall"):
            for c in e.children:
                visit(c, parent, [*stack, e.name] if with_stack else stack)
            return
        if not (kind.endswith("TorchOp") or kind.endswith("Backend")):
            for c in e.children:
                visit(c, parent, stack)
            return
        name = e.name
        if name.startswith("ProfilerStep#"):
            try:
                steps.append((int(name.split("#", 1)[1]), e.start_time_ns, e.end_time_ns))
            except ValueError:
                pass
        npu, shapes, dtypes = _inputs(e.extra_fields, record_shapes)
        inside_npu = parent is not None and _under_npu(parent)
        if inside_npu and not npu and not name.startswith("gloo:"):
            # the emulated kernel's own CPU ops: the device task's time, not framework operators
            for c in e.children:
                visit(c, parent, stack)
            return
        op = Op(name, e.start_time_ns, e.end_time_ns, e.start_tid, npu, shapes, dtypes,
                ";\r\n".join(reversed(stack)) if with_stack else "", parent=parent)
        (parent.children if parent is not None else roots).append(op)
        for c in e.children:
            visit(c, op, stack)

    for r in prof.profiler.kineto_results.experimental_event_tree():
        visit(r, None, [])

    def collect(op: Op):
        comm = _comm_name(op.name)
        if comm is not None:
            t = Task(comm, comm, op.start, op.end, op, comm=True)
            op.tasks.append(t)
            tasks.append(t)
            return
        for c in op.children:
            collect(c)
        short = op.name.split("::", 1)[-1]
        if op.npu and short not in _NO_TASK and not any(_has_npu(c) for c in op.children):
            t = Task(short, _type_name(short), op.start, op.end, op)
            op.tasks.append(t)
            tasks.append(t)

    for r in roots:
        collect(r)
    tasks.sort(key=lambda t: t.start)
    steps.sort()
    for t in tasks:
        for n, s, e in steps:
            if s <= t.start < e:
                t.step = n
                break
    memory.sort(key=lambda m: m[0])
    return Run(roots, tasks, steps, memory, device)


def _under_npu(op: Op) -> bool:
    while op is not None:
        if op.npu:
            return True
        op = op.parent
    return False


def _has_npu(op: Op) -> bool:
    return op.npu or any(_has_npu(c) for c in op.children)


def _comm_name(name: str) -> str | None:
    """``gloo:all_reduce`` (the emulated hccl's transport) -> HCCL's task name ``hcom_allReduce_``."""
    if not name.startswith("gloo:"):
        return None
    op = name[len("gloo:"):]
    return f"hcom_{_COMM.get(op, op)}_"


def _type_name(short: str) -> str:
    """``addmm`` -> ``Addmm``, ``threshold_backward`` -> ``ThresholdBackward`` (CANN's op types are CamelCase)."""
    return "".join(p[:1].upper() + p[1:] for p in short.strip("_").split("_") if p)


# -- the files --------------------------------------------------------------------------------------------------


def _us(ns: int) -> float:
    """A duration in us."""
    return round(ns / 1000.0, 3)


def _ts(ns: int) -> str:
    """A timestamp in us, exact (torch_npu's ``convert_ns2us_str``: a float would round Unix-time us).

    >>> _ts(1795804698865228113)
    '1795804698865228.113'
    """
    return f"{ns // 1000}.{ns % 1000:03d}"


def folder_name(worker: str | None, when: datetime | None = None) -> str:
    """``{worker}_{pid}_{time}_ascend_pt``, as torch_npu names it (worker: the host name by default)."""
    when = when or datetime.now(tz=UTC).astimezone()
    return f"{worker or socket.gethostname()}_{os.getpid()}_{when.strftime('%Y%m%d%H%M%S%f')[:-3]}_ascend_pt"


def write(run: Run, out_dir: str, *, worker: str | None, config: dict, metadata: dict, mstx: list,
          profile_memory: bool) -> str:
    """Write the Ascend layout for ``run`` under ``out_dir``; returns the ``*_ascend_pt`` folder."""
    spec = layout()
    root = os.path.join(os.path.abspath(out_dir), folder_name(worker))
    out = os.path.join(root, spec["folder"]["output"])
    os.makedirs(out, exist_ok=True)
    files = spec["files"]
    rank = _rank()
    info = {"config": config, "start_info": {"emulated": True}, "end_info": {"emulated": True},
            "torch_npu_version": _torch_npu_version(), "cann_version": "emulated", "rank_id": rank}
    info_name = f"profiler_info_{rank}.json" if rank >= 0 else "profiler_info.json"
    write_atomic(os.path.join(root, info_name), json.dumps(info, indent=1) + "\n")
    meta = dict(metadata)
    meta["ascendify"] = {
        "emulated": True,
        "device": "ascendify's emulated npu (no NPU hardware)",
        "times": "host times: a device task's start and duration are those of the host computation that stood "
                 "in for it on the emulated device, in the thread that ran it; not NPU hardware measurements",
        "not_written": ["PROF_*/ and FRAMEWORK/ (CANN's raw data)", "communication.json",
                        "hardware counters (AI Core metrics, l2_cache.csv, npu_module_mem.csv)"],
    }
    write_atomic(os.path.join(root, spec["folder"]["metadata"]), json.dumps(meta, indent=1) + "\n")

    with_steps = bool(run.steps)
    k = files["kernel_details.csv"]
    header = ([k["step_column"]] if with_steps else []) + k["headers"]
    rows = []
    for t in run.tasks:
        shapes = ";".join(",".join(map(str, s)) for s in t.op.shapes)
        dtypes = ";".join(d.upper() for d in t.op.dtypes)
        row = [run.device, t.name, t.type, "HCCL" if t.comm else "AI_CORE", _ts(t.start), _us(t.end - t.start), 0,
               0, shapes, dtypes, ";".join("ND" for _ in t.op.shapes), "", "", ""]
        rows.append(([t.step if t.step is not None else ""] if with_steps else []) + row)
    _write_rows(os.path.join(out, "kernel_details.csv"), header, rows)

    _write_rows(os.path.join(out, "operator_details.csv"), files["operator_details.csv"]["headers"],
              _operator_rows(run))
    _write_rows(os.path.join(out, "op_statistic.csv"), files["op_statistic.csv"]["headers"], _op_statistic(run))
    _write_rows(os.path.join(out, "step_trace_time.csv"), files["step_trace_time.csv"]["headers"], _step_rows(run))
    if profile_memory:
        op_rows, record_rows = _memory_rows(run)
        _write_rows(os.path.join(out, "operator_memory.csv"), files["operator_memory.csv"]["headers"], op_rows)
        _write_rows(os.path.join(out, "memory_record.csv"), files["memory_record.csv"]["headers"], record_rows)
    trace = _trace(run, mstx)
    write_atomic(os.path.join(out, "trace_view.json"), json.dumps(trace) + "\n")
    return root


def trace_events(run: Run, mstx: list) -> list:
    """trace_view.json's events (also what ``export_chrome_trace`` writes)."""
    return _trace(run, mstx)


def _rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    r = os.environ.get("RANK", "")
    return int(r) if r.isdigit() else -1


def _torch_npu_version() -> str:
    import sys

    mod = sys.modules.get("torch_npu")
    return getattr(mod, "__version__", "emulated")


def _walk(ops):
    for op in ops:
        yield op
        yield from _walk(op.children)


def _operator_rows(run: Run) -> list:
    rows = []
    for op in _walk(run.ops):
        if op.name.startswith("ProfilerStep#") or not _has_npu(op):
            continue
        self_tasks = op.tasks
        all_tasks = [t for o in _walk([op]) for t in o.tasks]
        child_time = sum(c.end - c.start for c in op.children)
        dev_self = sum(t.end - t.start for t in self_tasks)
        dev_total = sum(t.end - t.start for t in all_tasks)
        ai_self = sum(t.end - t.start for t in self_tasks if not t.comm)
        ai_total = sum(t.end - t.start for t in all_tasks if not t.comm)
        shapes = ";".join(",".join(map(str, s)) for s in op.shapes)
        rows.append([op.name, shapes, op.stack, _us(max(op.end - op.start - child_time, 0)), _us(op.end - op.start),
                     _us(dev_self), _us(dev_total), _us(ai_self), _us(ai_total)])
    return rows


def _op_statistic(run: Run) -> list:
    by: dict = {}
    for t in run.tasks:
        by.setdefault((t.type, "HCCL" if t.comm else "AI_CORE"), []).append((t.end - t.start) / 1000.0)
    total = sum(sum(v) for v in by.values()) or 1.0
    rows = []
    for (typ, core), durs in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        s = sum(durs)
        rows.append([run.device, typ, core, len(durs), round(s, 3), round(min(durs), 3), round(s / len(durs), 3),
                     round(max(durs), 3), round(100.0 * s / total, 2)])
    return rows


def _union(intervals: list) -> list:
    out: list = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(intervals: list) -> int:
    return sum(e - s for s, e in intervals)


def _intersect(a: list, b: list) -> int:
    i = j = 0
    total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _overlap(run: Run, start: int, end: int) -> tuple[list, list]:
    comp = _union([(max(t.start, start), min(t.end, end)) for t in run.tasks
                   if not t.comm and t.end > start and t.start < end])
    comm = _union([(max(t.start, start), min(t.end, end)) for t in run.tasks
                   if t.comm and t.end > start and t.start < end])
    return comp, comm


def _step_rows(run: Run) -> list:
    windows = list(run.steps)
    if not windows and run.tasks:
        windows = [("", min(t.start for t in run.tasks), max(t.end for t in run.tasks))]
    rows = []
    for n, s, e in windows:
        comp, comm = _overlap(run, s, e)
        both = _intersect(comp, comm)
        busy = _length(_union(comp + comm))
        comm_only = _length(comm) - both
        rows.append([run.device, n, _us(_length(comp)), _us(comm_only), _us(both), _us(_length(comm)),
                     _us(max(e - s - busy, 0)), 0, 0, _us(comm_only), 0])
    return rows


def _memory_rows(run: Run) -> tuple[list, list]:
    mb = 1024.0 * 1024.0
    total = 0
    records, ops = [], []
    open_allocs: dict = {}
    for when, size, ptr, name in run.memory:
        total += size
        records.append(["PTA", _ts(when), round(total / mb, 6), round(total / mb, 6), round(total / mb, 6), "",
                        f"NPU:{run.device}"])
        if size > 0:
            open_allocs[ptr] = (name, size, when, total)
        elif ptr in open_allocs:
            name0, size0, t0, total0 = open_allocs.pop(ptr)
            ops.append([name0, round(size0 / 1024.0, 3), _ts(t0), _ts(when), _ts(when), _us(when - t0),
                        _us(when - t0), round(total0 / mb, 6), round(total0 / mb, 6), round(total0 / mb, 6),
                        round(total / mb, 6), round(total / mb, 6), round(total / mb, 6), "", f"NPU:{run.device}"])
    for name0, size0, t0, total0 in open_allocs.values():  # alive at the end: no release time
        ops.append([name0, round(size0 / 1024.0, 3), _ts(t0), "", "", "", "", round(total0 / mb, 6),
                    round(total0 / mb, 6), round(total0 / mb, 6), "", "", "", "", f"NPU:{run.device}"])
    return ops, records


def _meta(pid: int, name: str, sort: int, threads: dict) -> list:
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
          {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "NPU" if pid >= DEVICE_PID
                                                                                else "CPU"}},
          {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}}]
    for tid, tname in threads.items():
        ev += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}},
               {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
    return ev


def _trace(run: Run, mstx: list) -> list:
    host = os.getpid()
    hw, hccl, overlap = DEVICE_PID + 1, DEVICE_PID + 2, DEVICE_PID + 3
    stream = 2  # the default compute stream's id on an NPU
    events: list = []
    tids = {}
    flow = 0
    for op in _walk(run.ops):
        tids[op.tid] = f"Thread {op.tid}"
        args = {"Sequence number": -1, "Fwd thread id": 0}
        if op.shapes:
            args["Input Dims"] = op.shapes
            args["Input type"] = op.dtypes
        if op.stack:
            args["Call stack"] = op.stack
        events.append({"ph": "X", "name": op.name, "pid": host, "tid": op.tid, "ts": _ts(op.start),
                       "dur": _us(op.end - op.start), "cat": "cpu_op", "args": args})
        for t in op.tasks:
            flow += 1
            pid, tid = (hccl, 0) if t.comm else (hw, stream)
            events.append({"ph": "X", "name": t.name, "pid": pid, "tid": tid, "ts": _ts(t.start),
                           "dur": _us(t.end - t.start), "cat": "kernel",
                           "args": {"Model Id": 4294967295, "Task Type": "HCCL" if t.comm else "AI_CORE",
                                    "Stream Id": stream, "Task Id": flow, "Batch Id": 0, "Subtask Id": 4294967295,
                                    "connection_id": flow, "emulated": "host time"}})
            events += [{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": flow, "pid": host, "tid": op.tid,
                        "ts": _ts(op.start), "cat": "async_npu"},
                       {"ph": "f", "bp": "e", "name": "torch_to_npu", "id": flow, "pid": pid, "tid": tid,
                        "ts": _ts(t.start), "cat": "async_npu"}]
    # msTX entries know their thread by its native id, the ops by the profiler's own thread number: the main
    # thread's entries go to the thread of most top-level ops
    roots = [op.tid for op in run.ops]
    main_tid = max(set(roots), key=roots.count) if roots else None
    for m in mstx:
        tid = main_tid if m["main"] and main_tid is not None else m["tid"]
        tids.setdefault(tid, f"Thread {tid}")
        base = {"name": m["message"], "pid": host, "tid": tid, "ts": _ts(m["start"]), "cat": "mstx",
                "args": {"domain": m["domain"]}}
        if m["end"] is None:
            events.append({**base, "ph": "i", "s": "t"})
        else:
            events.append({**base, "ph": "X", "dur": _us(m["end"] - m["start"])})
    # Overlap Analysis: what step_trace_time.csv sums up
    if run.tasks:
        lo, hi = min(t.start for t in run.tasks), max(t.end for t in run.tasks)
        comp, comm = _overlap(run, lo, hi)
        comm_only = _subtract(comm, comp)
        busy = _union(comp + comm)
        free = _subtract([[lo, hi]], busy)
        for name, spans in (("Computing", comp), ("Communication", comm),
                            ("Communication(Not Overlapped)", comm_only), ("Free", free)):
            for s, e in spans:
                if e > s:
                    events.append({"ph": "X", "name": name, "pid": overlap, "tid": _OVERLAP_TIDS[name],
                                   "ts": _ts(s), "dur": _us(e - s), "cat": "overlap"})
    for key, (a, b) in _memory_counters(run).items():
        events.append({"ph": "C", "name": "NPU MEM", "pid": DEVICE_PID + 4, "tid": 0, "ts": _ts(key),
                       "args": {"Allocated(KB)": a, "Reserved(KB)": b}})
    meta = _meta(host, "Python", 0, tids)
    meta += _meta(hw, "Ascend Hardware", 1, {stream: f"Stream {stream}"})
    meta += _meta(hccl, "HCCL", 2, {0: "Group 0 Communication"})
    meta += _meta(overlap, "Overlap Analysis", 3, {v: k for k, v in _OVERLAP_TIDS.items()})
    meta += _meta(DEVICE_PID + 4, "NPU MEM", 4, {})
    return meta + events


_OVERLAP_TIDS = {"Computing": 0, "Communication": 1, "Communication(Not Overlapped)": 2, "Free": 3}


def _subtract(a: list, b: list) -> list:
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append([cur, bs])
            cur = max(cur, be)
        if cur < e:
            out.append([cur, e])
    return out


def _memory_counters(run: Run) -> dict:
    total = 0
    out = {}
    for when, size, _, _ in run.memory:
        total += size
        out[when] = (round(total / 1024.0, 3), round(total / 1024.0, 3))
    return out

