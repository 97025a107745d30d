"""``torch.npu`` under emulation: the names of ``torch_npu.npu`` that make sense without hardware.

Registered as ``torch.npu`` (and ``torch_npu.npu``) by :func:`ascendify.emulator.enable`. Every public name
defined here exists in torch_npu (the reference list in ``ascendify.core.knowledge``); a torch_npu name that is
not emulated raises :class:`~ascendify.emulator.errors.NotEmulatedError` naming it, and a name torch_npu does
not have raises a plain ``AttributeError``. Nothing returns a silent fake value.

The emulated device is synchronous: ``synchronize`` returns at once, streams are labels, events time the
host. Memory statistics come from the emulator's accounting against ``settings.memory_capacity``.
"""

from __future__ import annotations

import sys
import types

import torch

from ascendify.core import knowledge
from ascendify.emulator import runtime
from ascendify.emulator.api.legacy_types import TYPES as _LEGACY_TYPES
from ascendify.emulator.api.npu import amp
from ascendify.emulator.api.npu import graphs as _graphs
from ascendify.emulator.api.npu import streams as _streams
from ascendify.emulator.device import default_index as _default_index
from ascendify.emulator.device import rng
from ascendify.emulator.errors import NotEmulatedError as _NotEmulatedError

Event = _streams.Event
Stream = _streams.Stream
StreamContext = _streams.StreamContext
current_stream = _streams.current_stream
default_stream = _streams.default_stream
set_stream = _streams.set_stream
stream = _streams.stream
NPUGraph = _graphs.NPUGraph
graph = _graphs.graph
make_graphed_callables = _graphs.make_graphed_callables
graph_pool_handle = _graphs.graph_pool_handle

_settings = runtime.settings
_memory = runtime.memory


# ------------------------------------------------------------------------------------------------ devices
def _get_device_index(device=None, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index in ``device`` (an int, ``"npu:1"``, a ``torch.device``); the current one when absent."""
    if device is None:
        return runtime.current_device[0]
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type == "cpu" and allow_cpu:
            return -1
        if device.type != "npu":
            raise ValueError(f"Expected an npu device, but got: {device}")
        return runtime.check_index(device.index)
    if isinstance(device, int):
        return runtime.check_index(device)
    raise ValueError(f"Cannot interpret {device!r} as an npu device")


_utils = types.SimpleNamespace(_get_device_index=_get_device_index)
_initialized = True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    return None


def _lazy_call(callable, **kwargs) -> None:
    callable()


def init() -> None:
    return None


def is_initialized() -> bool:
    return runtime.enabled


def is_available() -> bool:
    return runtime.enabled


def device_count() -> int:
    return _settings.device_count


def current_device() -> int:
    """The current index; 0 in single-device mode (torchrun), where every ``npu:N`` is device 0: FSDP2,
    DeviceMesh and DTensor place tensors on ``npu:current_device()`` and compare with where they landed."""
    return 0 if _settings.single_device else runtime.current_device[0]


def set_device(device) -> None:
    index = _get_device_index(device)
    if index >= 0:
        runtime.current_device[0] = index
        _default_index.note_current(index)


class device:  # noqa: N801 - torch's name
    """``with torch.npu.device(1):`` makes npu:1 current for the block."""

    def __init__(self, device):
        self.idx = _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = runtime.current_device[0]
        runtime.current_device[0] = self.idx
        _default_index.note_current(self.idx)

    def __exit__(self, *exc):
        runtime.current_device[0] = self.prev_idx
        return False


class device_of(device):  # noqa: N801
    """``with torch.npu.device_of(t):`` makes the device of ``t`` current (a no-op for CPU tensors)."""

    def __init__(self, obj):
        idx = obj.get_device() if obj.device.type == "npu" else runtime.current_device[0]
        super().__init__(idx)


def synchronize(device=None) -> None:
    _get_device_index(device, optional=True)
    _graphs.refuse_sync("torch.npu.synchronize()")


def is_current_stream_capturing() -> bool:
    """True while an NPU graph is being captured (:mod:`.graphs`)."""
    return _graphs.capturing()


def can_device_access_peer(device, peer_device) -> bool:
    _get_device_index(device)
    _get_device_index(peer_device)
    return True


class _DeviceProperties:
    """What torch_npu's ``get_device_properties`` documents: name, total_memory, L2_cache_size, core counts."""

    def __init__(self, name: str, total_memory: int):
        self.name = name
        self.total_memory = total_memory
        self.L2_cache_size = 192 << 20
        self.cube_core_num = 20
        self.vector_core_num = 40

    def __repr__(self) -> str:
        return (f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"cube_core_num={self.cube_core_num}, vector_core_num={self.vector_core_num}, "
                f"L2_cache_size={self.L2_cache_size >> 20}MB)")


def get_device_properties(device=None) -> _DeviceProperties:
    _get_device_index(device, optional=True)
    return _DeviceProperties(_settings.device_name, _settings.memory_capacity)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None):
    """torch_npu returns the value of ``TORCH_NPU_DEVICE_CAPABILITY`` ("major.minor"), else None."""
    import os

    _get_device_index(device, optional=True)
    value = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY")
    if not value:
        return None
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)


def is_bf16_supported() -> bool:
    """True: the emulated device is an A2-class chip (bf16 needs A2 or later)."""
    return True


# ------------------------------------------------------------------------------------------------ memory
def _idx(device) -> int:
    """The index whose memory counters hold ``device``'s allocations (0 for all in single-device mode)."""
    i = _get_device_index(device, optional=True)
    return 0 if _settings.single_device else i


def memory_allocated(device=None) -> int:
    return _memory.allocated[_idx(device)]


def max_memory_allocated(device=None) -> int:
    return _memory.peak[_idx(device)]


def memory_reserved(device=None) -> int:
    return _memory.allocated[_idx(device)]


def max_memory_reserved(device=None) -> int:
    return _memory.peak[_idx(device)]


memory_cached = memory_reserved
max_memory_cached = max_memory_reserved


def reset_peak_memory_stats(device=None) -> None:
    _memory.reset_peak(_idx(device))


def reset_max_memory_allocated(device=None) -> None:
    _memory.reset_peak(_idx(device))


reset_max_memory_cached = reset_max_memory_allocated


def reset_accumulated_memory_stats(device=None) -> None:
    _memory.reset_accumulated(_idx(device))


def memory_stats(device=None) -> dict:
    return dict(sorted(_memory.stats(_idx(device)).items()))


def memory_stats_as_nested_dict(device=None) -> dict:
    nested: dict = {}
    for key, value in _memory.stats(_idx(device)).items():
        node = nested
        *parts, leaf = key.split(".")
        for p in parts:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def memory_summary(device=None, abbreviated: bool = False) -> str:
    i = _idx(device)
    s = _memory.stats(i)
    cap = _memory.capacity(i)
    mib = 1 << 20
    return "\n".join([
        f"Emulated NPU memory summary, device npu:{i} ({_settings.device_name})",
        f"  allocated: {s['allocated_bytes.all.current'] / mib:.2f} MiB ({s['allocated_bytes.all.current']} bytes; "
        f"peak {s['allocated_bytes.all.peak'] / mib:.2f} MiB, {s['allocated_bytes.all.peak']} bytes)",
        f"  capacity:  {cap / mib:.2f} MiB",
        f"  allocations: {s['allocation.all.allocated']}  frees: {s['allocation.all.freed']}  "
        f"OOMs: {s['num_ooms']}",
    ])


def mem_get_info(device=None) -> tuple[int, int]:
    """``(free, total)`` bytes of the emulated device."""
    i = _idx(device)
    total = _memory.capacity(i)
    return max(total - _memory.allocated[i], 0), total


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    if not isinstance(fraction, float | int) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _memory.set_fraction(_idx(device), float(fraction))


def get_per_process_memory_fraction(device=None) -> float:
    return _memory.fraction[_idx(device)]


def empty_cache() -> None:
    """Nothing is cached by the emulated allocator: memory is returned when tensors die."""


def host_empty_cache() -> None:
    """Nothing is cached for host memory either."""


def ipc_collect() -> None:
    return None


# ------------------------------------------------------------------------------------------------ RNG
def manual_seed(seed: int) -> None:
    rng.manual_seed(seed, runtime.current_device[0])


def manual_seed_all(seed: int) -> None:
    for i in range(_settings.device_count):
        rng.manual_seed(seed, i)


def seed() -> None:
    rng.seed(runtime.current_device[0])


def seed_all() -> None:
    s = torch.Generator().seed()
    manual_seed_all(s)


def initial_seed() -> int:
    return rng.initial_seed(runtime.current_device[0])


def get_rng_state(device="npu") -> torch.Tensor:
    import sys

    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller == "torch.distributed.tensor._random":  # DTensor's tracker reads it as Philox's (seed, offset)
        return rng.get_philox_state(_idx(device))
    return rng.get_state(_idx(device))


def set_rng_state(new_state: torch.Tensor, device="npu") -> None:
    rng.set_state(new_state, _idx(device))


def get_rng_state_all() -> list[torch.Tensor]:
    return [rng.get_state(i) for i in range(_settings.device_count)]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        rng.set_state(state, i)


def __getattr_default_generators():
    return tuple(rng.generator(i) for i in range(_settings.device_count))


# ------------------------------------------------------------------------------------------------ AMP
def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("npu", enabled)


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("npu", dtype)


# ------------------------------------------------------------------------------------------------ flags
class _Flags:
    """A namespace of flags that exist on the real device and have no numeric effect on the emulator
    (the emulator computes in IEEE fp32; HF32 is not modelled)."""

    def __init__(self, name: str, **flags):
        self._name = name
        self.__dict__.update(flags)

    def __repr__(self) -> str:
        flags = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return f"<torch.npu.{self._name} {flags}>"


matmul = _Flags("matmul", allow_hf32=False)
conv = _Flags("conv", allow_hf32=True)
config = _Flags("config", allow_internal_format=False)

_compile_options: dict = {"jit_compile": True}
_sdp = {"flash": True, "mem_efficient": True, "math": True}
_sync_debug_mode = [0]


def set_compile_mode(jit_compile: bool = True) -> None:
    """Accepted and recorded: kernel compilation strategy has no meaning on the emulator."""
    _compile_options["jit_compile"] = bool(jit_compile)


def is_jit_compile_false() -> bool:
    return not _compile_options["jit_compile"]


def set_option(option: dict) -> None:
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    _compile_options.update(option)


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def math_sdp_enabled() -> bool:
    return _sdp["math"]


def set_sync_debug_mode(debug_mode) -> None:
    modes = {"default": 0, "warn": 1, "error": 2}
    _sync_debug_mode[0] = modes.get(debug_mode, debug_mode) if isinstance(debug_mode, str) else int(debug_mode)


def get_sync_debug_mode() -> int:
    return _sync_debug_mode[0]


globals().update(_LEGACY_TYPES)  # torch.npu.FloatTensor and kin (see legacy.py)


# ------------------------------------------------------------------------------------------------ names
def _reference_leaves(prefix: str) -> set[str]:
    names = set()
    for n in knowledge.npu_names():
        if n.startswith(prefix):
            rest = n[len(prefix):]
            if rest and "." not in rest:
                names.add(rest)
    return names


def _not_emulated(module: str, name: str):
    known = _reference_leaves(module + ".")
    if name in known:
        raise _NotEmulatedError(
            f"{module}.{name} exists in torch_npu but is not emulated by ascendify's emulated npu device "
            "(it needs real hardware or has no meaning on the CPU); guard it, or run on an Ascend NPU"
        )
    raise AttributeError(f"module '{module}' has no attribute '{name}'")


def __getattr__(name: str):
    if name == "default_generators":
        return __getattr_default_generators()
    if name.startswith("__"):
        raise AttributeError(name)
    _not_emulated("torch.npu", name)


# submodules that torch_npu has (torch.npu.memory.memory_allocated...), built from the names above
_SUBMODULES = ("memory", "random", "utils", "streams", "autocast_utils", "graphs")


def _build_submodules() -> dict[str, types.ModuleType]:
    top = sys.modules[__name__]
    subs = {"amp": amp}
    for sub in _SUBMODULES:
        m = types.ModuleType(f"torch.npu.{sub}")
        m.__doc__ = f"torch_npu's torch.npu.{sub}, emulated (the names also on torch.npu)."
        for leaf in _reference_leaves(f"torch.npu.{sub}."):
            if leaf in top.__dict__ or leaf == "default_generators":
                if leaf in top.__dict__:
                    setattr(m, leaf, top.__dict__[leaf])

        def _sub_getattr(name, _sub=sub):
            if name.startswith("__"):
                raise AttributeError(name)
            _not_emulated(f"torch.npu.{_sub}", name)

        m.__getattr__ = _sub_getattr
        subs[sub] = m
    return subs


_SUBMODULE_OBJECTS = _build_submodules()
memory = _SUBMODULE_OBJECTS["memory"]
random = _SUBMODULE_OBJECTS["random"]
utils = _SUBMODULE_OBJECTS["utils"]
streams = _SUBMODULE_OBJECTS["streams"]
autocast_utils = _SUBMODULE_OBJECTS["autocast_utils"]
graphs = _SUBMODULE_OBJECTS["graphs"]


def _mstx_module() -> types.ModuleType:
    from ascendify.emulator.api import profiler

    m = types.ModuleType("torch.npu.mstx", "torch_npu's msTX markers, emulated (ascendify.emulator.api.profiler).")
    m.__dict__.update(profiler.mstx_attrs())
    return m


# torch_npu.npu.mstx is the class (torch_npu: ``from .mstx import mstx``); its module holds mstx and annotate
_SUBMODULE_OBJECTS["mstx"] = _mstx_module()
mstx = _SUBMODULE_OBJECTS["mstx"].mstx
