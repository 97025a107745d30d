"""``torch_npu.profiler`` and ``torch_npu.npu.mstx`` on the emulated npu: the Ascend PyTorch Profiler's API and
output folder, built on torch's profiler over the host ops.

The recipe of Ascend's performance-tuning guide runs unchanged::

    experimental_config = torch_npu.profiler._ExperimentalConfig(
        export_type=torch_npu.profiler.ExportType.Text, profiler_level=torch_npu.profiler.ProfilerLevel.Level0,
        aic_metrics=torch_npu.profiler.AiCMetrics.AiCoreNone)
    with torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
            schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=1, repeat=1, skip_first=1),
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler("./result"),
            record_shapes=False, profile_memory=False, with_stack=False,
            experimental_config=experimental_config) as prof:
        for step in range(steps):
            train_one_step()
            prof.step()

and writes ``./result/{host}_{pid}_{time}_ascend_pt/`` as torch_npu does
(:mod:`ascendify.emulator.reporting.ascend_pt`): device tasks are the emulated device's host computations, with
host times, and ``profiler_metadata.json`` says so. :class:`profile` is torch's ``torch.profiler.profile`` (the
same ``schedule`` semantics, ``step()``, ``key_averages()``, ``events()``), with torch_npu's signature;
``export_chrome_trace`` writes the Ascend trace (``trace_view.json``'s events), as torch_npu's does.

msTX (``torch_npu.npu.mstx``): ``mark``, ``range_start``/``range_end``, ``range_push``/``range_pop``,
``mstx_range`` (a decorator) and ``annotate`` (a context manager and decorator), with torch_npu's argument
checks (a bad message warns and returns torch_npu's value); while a profile records, the markers and ranges go
to its trace (category ``mstx``). Outside a profile they do nothing, as without an msTX consumer.
"""

from __future__ import annotations

import enum
import functools
import itertools
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable

import torch
import torch.profiler as _tp

from ascendify.emulator.reporting import ascend_pt


class ProfilerActivity(enum.Enum):
    """torch_npu's activities: host operators (CPU) and device tasks (NPU)."""

    CPU = 0
    NPU = 1


def supported_activities() -> set:
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


ProfilerAction = _tp.ProfilerAction  # torch_npu's enum has the same members; torch's profile compares with torch's


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Db = "db"
    Text = "text"


class HostSystem:
    CPU = "cpu"
    MEM = "mem"
    DISK = "disk"
    NETWORK = "network"
    OSRT = "osrt"
    NUMA = "numa"


def supported_profiler_level() -> set:
    return {ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2, ProfilerLevel.Level_none}


def supported_ai_core_metrics() -> set:
    return {v for k, v in vars(AiCMetrics).items() if not k.startswith("_")}


def supported_export_type() -> set:
    return {ExportType.Db, ExportType.Text}


class _ExperimentalConfig:
    """torch_npu's experimental configuration: kept and written to ``profiler_info.json``. The emulated device
    has no AI Core counters or L2 cache: ``aic_metrics``, ``l2_cache``, ``host_sys``... change nothing else."""

    def __init__(self, profiler_level: str = ProfilerLevel.Level0, aic_metrics: str = AiCMetrics.PipeUtilization,
                 l2_cache: bool = False, msprof_tx: bool = False, mstx: bool = False, data_simplification: bool = True,
                 record_op_args: bool = False, op_attr: bool = False, gc_detect_threshold: float | None = None,
                 export_type: str | list = ExportType.Text, host_sys: list | None = None,
                 mstx_domain_include: list | None = None, mstx_domain_exclude: list | None = None,
                 sys_io: bool = False, sys_interconnection: bool = False):
        if profiler_level not in supported_profiler_level():
            warnings.warn("Invalid parameter profiler_level, reset it to Level0.", stacklevel=2)
            profiler_level = ProfilerLevel.Level0
        types = [export_type] if isinstance(export_type, str) else list(export_type or [ExportType.Text])
        if not types or any(t not in supported_export_type() for t in types):
            warnings.warn("Invalid parameter export_type, reset it to text.", stacklevel=2)
            types = [ExportType.Text]
        self._profiler_level = profiler_level
        self._aic_metrics = aic_metrics
        self._l2_cache = l2_cache
        self._msprof_tx = msprof_tx
        self._mstx = mstx
        self._data_simplification = data_simplification
        self._record_op_args = record_op_args
        self._op_attr = op_attr
        self._gc_detect_threshold = gc_detect_threshold
        self._export_type = types
        self._host_sys = list(host_sys or [])
        self._mstx_domain_include = list(mstx_domain_include or [])
        self._mstx_domain_exclude = list(mstx_domain_exclude or [])
        self._sys_io = sys_io
        self._sys_interconnection = sys_interconnection

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k.startswith("_")}


class schedule:  # noqa: N801 (torch_npu's name)
    """torch_npu's ``schedule(wait, active, warmup=0, repeat=0, skip_first=0, skip_first_wait=0)`` (note the
    argument order: ``active`` second, unlike torch's); each step's action as torch's profiler expects it."""

    def __init__(self, wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0):
        def count(name, value, least):
            if not isinstance(value, int) or value < least:
                warnings.warn(f"Invalid parameter {name}, reset it to {least}.", stacklevel=3)
                return least
            return value

        self.wait, self.active = count("wait", wait, 0), count("active", active, 1)
        self.warmup, self.repeat = count("warmup", warmup, 0), count("repeat", repeat, 0)
        self.skip_first, self.skip_first_wait = count("skip_first", skip_first, 0), count(
            "skip_first_wait", skip_first_wait, 0)
        with warnings.catch_warnings():  # torch warns about warmup=0; torch_npu does not
            warnings.simplefilter("ignore", UserWarning)
            self._fn = _tp.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat,
                                    skip_first=self.skip_first, skip_first_wait=self.skip_first_wait)

    def __call__(self, step: int):
        if step < 0:
            raise ValueError("Invalid parameter step, which must be not less than 0.")
        return self._fn(step)

    def to_dict(self) -> dict:
        return {"wait": self.wait, "active": self.active, "warmup": self.warmup, "repeat": self.repeat,
                "skip_first": self.skip_first, "skip_first_wait": self.skip_first_wait}


Schedule = schedule


def _work_dir(dir_name: str | None) -> str:
    if dir_name:
        return dir_name
    base = os.environ.get("ASCEND_WORK_PATH")
    return os.path.join(os.path.abspath(base), "profiling_data") if base else os.getcwd()


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None,
                              analyse_flag: bool = True, async_mode: bool = False) -> Callable:
    """torch_npu's handler: when a cycle of the schedule ends, write the Ascend layout under ``dir_name``
    (default ``$ASCEND_WORK_PATH/profiling_data`` or the working directory)."""
    if worker_name is not None and (not isinstance(worker_name, str) or not worker_name):
        warnings.warn("Invalid parameter worker_name, reset it to default.", stacklevel=2)
        worker_name = None
    if not isinstance(analyse_flag, bool):
        analyse_flag = True
    out = _work_dir(dir_name)

    def handler_fn(prof) -> None:
        if analyse_flag and isinstance(prof, profile):
            prof._write_ascend(out, worker_name)
        elif analyse_flag:  # torch's own profile handed over: its chrome trace, as torch's handler writes
            _tp.tensorboard_trace_handler(out, worker_name)(prof)

    return handler_fn


# -- msTX ---------------------------------------------------------------------------------------------------------

_collectors: list[list] = []  # the mstx lists of the profiles recording now
_ids = itertools.count(1)
_open: dict[int, dict] = {}
_lock = threading.Lock()
_stacks = threading.local()


def _now() -> int:
    return time.time_ns()  # the profiler's clock: Unix time in ns


def _record(entry: dict) -> None:
    with _lock:
        for c in _collectors:
            c.append(entry)


def _valid(fn: str, message, domain, stream) -> bool:
    if not message or not isinstance(message, str):
        warnings.warn(f"Invalid message for mstx.{fn} function. Please provide a valid message string.",
                      stacklevel=3)
        return False
    if not domain or not isinstance(domain, str):
        warnings.warn(f"Invalid domain for mstx.{fn} func. Please input valid domain string.", stacklevel=3)
        return False
    if stream is not None and not isinstance(stream, torch.npu.Stream):
        warnings.warn(f"Invalid stream for mstx.{fn} func. Please input valid stream.", stacklevel=3)
        return False
    return True


class mstx:  # noqa: N801 (torch_npu's name)
    """``torch_npu.npu.mstx``: msTX markers and ranges (in the trace of a recording profile)."""

    @staticmethod
    def mark(message: str, stream=None, domain: str = "default") -> None:
        if _valid("mark", message, domain, stream):
            _record({"message": message, "domain": domain, "start": _now(), "end": None,
                     "tid": threading.get_native_id(),
                     "main": threading.current_thread() is threading.main_thread()})

    @staticmethod
    def range_start(message: str, stream=None, domain: str = "default") -> int:
        if not _valid("range_start", message, domain, stream):
            return 0
        rid = next(_ids)
        entry = {"message": message, "domain": domain, "start": _now(), "end": None,
                 "tid": threading.get_native_id(), "main": threading.current_thread() is threading.main_thread()}
        with _lock:
            _open[rid] = entry
        return rid

    @staticmethod
    def range_end(range_id: int, domain: str = "default") -> None:
        if not isinstance(range_id, int):
            warnings.warn("Invalid message for mstx.range_end function. Please provide the return value from "
                          "mstx.range_start.", stacklevel=2)
            return
        with _lock:
            entry = _open.pop(range_id, None)
        if entry is not None:
            entry["end"] = _now()
            _record(entry)

    @staticmethod
    def range_push(message: str, stream=None, domain: str = "default") -> int:
        if not _valid("range_push", message, domain, stream):
            return -1
        stack = _stacks.__dict__.setdefault("ranges", [])
        stack.append(mstx.range_start(message, stream, domain))
        return len(stack) - 1

    @staticmethod
    def range_pop(domain: str = "default") -> int:
        stack = _stacks.__dict__.setdefault("ranges", [])
        if not stack:
            return -1
        mstx.range_end(stack.pop(), domain)
        return len(stack)

    @staticmethod
    def mstx_range(message: str, stream=None, domain: str = "default"):
        def wrapper(func):
            @functools.wraps(func)
            def inner(*args, **kwargs):
                range_id = mstx.range_start(message, stream, domain)
                try:
                    return func(*args, **kwargs)
                finally:
                    mstx.range_end(range_id, domain)

            return inner

        return wrapper


class annotate:  # noqa: N801 (torch_npu's name)
    """``torch_npu.npu.mstx.annotate``: an msTX range as a context manager or a decorator."""

    def __init__(self, message: str = "", stream=None, domain: str = "default"):
        self.message, self.stream, self.domain, self.range_id = message, stream, domain, None

    def __enter__(self):
        self.range_id = mstx.range_start(self.message, self.stream, self.domain)
        return self

    def __exit__(self, *exc):
        if self.range_id is not None:
            mstx.range_end(self.range_id, self.domain)
            self.range_id = None

    def __call__(self, func):
        message = self.message or func.__name__

        @functools.wraps(func)
        def inner(*args, **kwargs):
            range_id = mstx.range_start(message, self.stream, self.domain)
            try:
                return func(*args, **kwargs)
            finally:
                mstx.range_end(range_id, self.domain)

        return inner


mstx.annotate = annotate
mstx.mstx = mstx  # torch_npu.npu.mstx is the class; ``torch_npu.npu.mstx.mstx`` names it too


# -- the profiler -------------------------------------------------------------------------------------------------


class profile(_tp.profile):  # noqa: N801 (torch_npu's name)
    """``torch_npu.profiler.profile`` on the emulated npu: torch's profiler over the host ops (with the input
    tensors' devices, to tell the NPU's operators), its ``schedule``/``step()``/``key_averages()``, and the
    Ascend output folder through :func:`tensorboard_trace_handler`."""

    def __init__(self, *, activities: Iterable | None = None, schedule: Callable | None = None,
                 on_trace_ready: Callable | None = None, record_shapes: bool = False, profile_memory: bool = False,
                 with_stack: bool = False, with_flops: bool = False, with_modules: bool = False,
                 experimental_config: _ExperimentalConfig | None = None, execution_trace_observer=None,
                 custom_trace_id_callback: Callable | None = None, use_cuda: bool | None = None):
        acts = set(activities) if activities else supported_activities()
        names = {getattr(a, "name", str(a)).upper() for a in acts}
        if use_cuda is not None:
            warnings.warn("This is npu environment, use_cuda is invalid", stacklevel=2)
        if schedule is not None and not callable(schedule):
            warnings.warn("schedule is not Callable, set by default.", stacklevel=2)
            schedule = None
        if on_trace_ready is not None and not callable(on_trace_ready):
            warnings.warn("on_trace_ready is not Callable, set by default.", stacklevel=2)
            on_trace_ready = None
        self._npu_activity = "NPU" in names or "PRIVATEUSE1" in names
        self._record_shapes_asked = record_shapes
        self._profile_memory_asked = profile_memory
        self._with_stack_asked = with_stack
        self._experimental = experimental_config or _ExperimentalConfig()
        self._npu_schedule = schedule
        self._npu_metadata: dict = {}
        self._mstx: list = []
        self._custom_trace_id_callback = custom_trace_id_callback
        self._common = {"activities": sorted("ProfilerActivity." + n for n in names), "record_shapes": record_shapes,
                        "profile_memory": profile_memory, "with_stack": with_stack, "with_flops": with_flops,
                        "with_modules": with_modules,
                        "schedule": schedule.to_dict() if hasattr(schedule, "to_dict") else None}
        super().__init__(activities=[_tp.ProfilerActivity.CPU], schedule=schedule, on_trace_ready=on_trace_ready,
                         record_shapes=True,  # the input tensors' devices tell the NPU's operators
                         profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops,
                         with_modules=with_modules, execution_trace_observer=execution_trace_observer)

    # mstx ranges and markers go to the recording profile
    def start_trace(self):
        self._mstx = []
        with _lock:
            _collectors.append(self._mstx)
        super().start_trace()

    def stop_trace(self):
        with _lock:
            if self._mstx in _collectors:
                _collectors.remove(self._mstx)
        super().stop_trace()

    def add_metadata(self, key: str, value: str):
        if not isinstance(key, str) or not isinstance(value, str):
            warnings.warn("The key and value of metadata must be string. Skip this metadata.", stacklevel=2)
            return
        self._npu_metadata[key] = value
        super().add_metadata(key, value)

    def add_metadata_json(self, key: str, value: str):
        if not isinstance(key, str) or not isinstance(value, str):
            warnings.warn("The key and value of metadata must be string. Skip this metadata.", stacklevel=2)
            return
        try:
            self._npu_metadata[key] = json.loads(value)
        except ValueError:
            warnings.warn("The metadata value must be json format string. Skip this metadata", stacklevel=2)
            return
        super().add_metadata_json(key, value)

    def set_custom_trace_id_callback(self, callback: Callable[[], str]) -> None:
        self._custom_trace_id_callback = callback

    def get_trace_id(self) -> str:
        return self._custom_trace_id_callback() if self._custom_trace_id_callback else ""

    def _run(self) -> ascend_pt.Run:
        run = ascend_pt.build(self, self._record_shapes_asked, self._with_stack_asked)
        if not self._npu_activity:  # ProfilerActivity.CPU only: no device tasks, as on an NPU
            run.tasks = []
            for op in ascend_pt._walk(run.ops):
                op.tasks = []
        return run

    def _write_ascend(self, dir_name: str, worker_name: str | None) -> str:
        config = {"common_config": self._common, "experimental_config": self._experimental.to_dict()}
        return ascend_pt.write(self._run(), dir_name, worker=worker_name, config=config,
                               metadata=self._npu_metadata, mstx=list(self._mstx),
                               profile_memory=self._profile_memory_asked)

    def export_chrome_trace(self, path: str):
        """The Ascend trace (trace_view.json's events) to ``path``, as torch_npu writes it."""
        from ascendify.core.fileio import write_atomic

        write_atomic(path, json.dumps(ascend_pt.trace_events(self._run(), list(self._mstx))) + "\n")

    @classmethod
    def enable_profiler_in_child_thread(cls, *args, **kwargs):
        return None  # torch's profiler already records every thread of the process

    @classmethod
    def disable_profiler_in_child_thread(cls):
        return None


_KinetoProfile = profile


def analyse(profiler_path: str, max_process_number: int = 1, export_type=None) -> None:
    """Offline analysis of raw profiling data: under emulation the handler wrote the finished layout already."""
    warnings.warn("torch_npu.profiler.analyse: the emulated profiler writes its output folder when the trace is "
                  "ready; there is no raw data to analyse", stacklevel=2)


def module_attrs() -> dict:
    """The contents of the shim's ``torch_npu.profiler``."""
    return {name: globals()[name] for name in (
        "profile", "_KinetoProfile", "ProfilerActivity", "supported_activities", "tensorboard_trace_handler",
        "schedule", "Schedule", "ProfilerAction", "_ExperimentalConfig", "supported_profiler_level",
        "supported_ai_core_metrics", "supported_export_type", "ProfilerLevel", "AiCMetrics", "ExportType",
        "HostSystem", "analyse")}


def mstx_attrs() -> dict:
    """The contents of ``torch.npu.mstx`` as a module (``torch_npu.npu.mstx`` itself is the class)."""
    return {"mstx": mstx, "annotate": annotate}
