"""``torch.cuda.*``: every name with an equivalent on the target is redirected; the others raise a clear error.

Per name of ``torch.cuda.__all__``:

- *probes* (``is_available``, ``device_count``) answer per caller: the user's code hears about the target
  (so ``device = "cuda" if torch.cuda.is_available() else "cpu"`` picks the accelerator path), libraries
  (torch itself, site-packages such as transformers or accelerate) hear the truth, so they never take CUDA-only
  paths and find the NPU through their own ``is_npu_available`` (see ``docs/auto.md``);
- *equivalents*: on ``npu`` the ``torch_cuda_to_npu`` table of the knowledge base (``torch.cuda.CUDAGraph`` ->
  ``torch.npu.NPUGraph``), on ``cpu`` :mod:`.cpu_cuda`, elsewhere the same name on the device module;
- legacy tensor types (``torch.cuda.FloatTensor``...) build tensors of *that* dtype on the target
  (``DoubleTensor`` stays float64; a target that rejects float64 says so itself);
- no equivalent: a stub that records the call and raises :class:`UnsupportedOnTarget` naming the API and the
  call site; pure annotations (NVTX ranges, ``torch.cuda.profiler.start/stop``) are skipped unless ``--strict``.

Exceptions (``CudaError``), status constants and build flags (``has_magma``) are left alone.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from ascendify.auto.record import caller_is_user
from ascendify.auto.redirects.devices import class_factory
from ascendify.core.patching import light_wraps

LEFT_ALONE = frozenset({"CudaError", "DeferredCudaCallError", "cudaStatus", "has_half", "has_magma", "amp"})
SUBMODULES = ("random", "memory", "graphs", "streams", "nvtx", "nccl", "profiler", "jiterator", "sparse", "tunable")
# submodules whose public functions are pure annotations: skipped (not an error) unless --strict
IGNORABLE = {
    "nvtx": "NVTX ranges are annotations for NVIDIA tools; skipped (use torch_npu's msTX or the profiler)",
    "profiler": "cudaProfilerStart/Stop only drive NVIDIA profilers; skipped",
}
LEGACY_DTYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "ByteTensor": "uint8", "CharTensor": "int8", "ShortTensor": "int16", "IntTensor": "int32",
    "LongTensor": "int64", "BoolTensor": "bool",
}
PRIVATE_MEMORY = ("_record_memory_history", "_snapshot", "_dump_snapshot")
TIPS = {
    "nccl": "use torch.distributed collectives (the backend is mapped to the target's)",
    "jiterator": "write the kernel with torch ops instead",
    "get_arch_list": "no CUDA architectures on this device",
    "cudart": "the CUDA runtime is not present",
}


class _Missing(str):
    """An NPU name that exists in torch_npu but not in this process (e.g. not emulated)."""


class _Null(contextlib.nullcontext):
    """What a skipped annotation returns: usable as a context manager and as a decorator."""

    def __call__(self, fn: Any = None, *a: Any, **k: Any) -> Any:
        return fn if callable(fn) else None


_ABSENT = object()


def _safe_getattr(mod: Any, name: str) -> Any:
    """``getattr(mod, name)`` or None; device modules may raise their own errors for names they lack."""
    if mod is None:
        return None
    try:
        return getattr(mod, name)
    except Exception:
        return None


def _equivalents(s) -> dict[str, Any]:
    """``torch.cuda`` name -> implementation object on the target (None: known to have none)."""
    t = s.target
    if t.device_type == "cpu":
        from ascendify.auto.redirects import cpu_cuda

        return cpu_cuda.table()
    mod = t.module()
    out: dict[str, Any] = {}
    if t.device_type == "npu":
        from ascendify.core import knowledge

        for cuda_name, npu_name in knowledge.cuda_to_npu_map().items():
            short = cuda_name[len("torch.cuda.") :]
            if "." in short:
                continue
            if npu_name is None:
                out[short] = None
                continue
            obj: Any = mod
            try:
                for part in npu_name.split(".")[2:]:
                    obj = getattr(obj, part)
            except Exception:
                obj = _Missing(npu_name)
            out[short] = obj
    _complete_queries(out, mod, t.device_type)
    return out


def _complete_queries(out: dict[str, Any], mod: Any, device_type: str) -> None:
    """Device queries answer complete objects: inductor, Dynamo and profilers read CUDA's fields
    of the properties object and index the capability tuple."""
    import functools

    from ascendify.auto.redirects import cpu_cuda

    props = out.get("get_device_properties", _safe_getattr(mod, "get_device_properties"))
    if callable(props) and not isinstance(props, _Missing):
        @functools.wraps(props)
        def get_device_properties(*a: Any, **k: Any):
            return cpu_cuda.complete_properties(props(*a, **k), device_type)

        out["get_device_properties"] = get_device_properties
    cap = out.get("get_device_capability", _safe_getattr(mod, "get_device_capability"))
    if callable(cap) and not isinstance(cap, _Missing):
        @functools.wraps(cap)
        def get_device_capability(*a: Any, **k: Any):
            v = cap(*a, **k)
            return (0, 0) if v is None else v  # torch_npu answers None unless TORCH_NPU_DEVICE_CAPABILITY is set

        out["get_device_capability"] = get_device_capability


class _Redirects:
    """What every replacement of a ``torch.cuda`` name needs: the session, the target's equivalents and device
    module, and the factories of the replacements (redirecting function or class, unsupported stub)."""

    def __init__(self, s) -> None:
        self.s = s
        self.t = s.target
        self.m = s.mapper
        self.rec = s.rec
        self.eq = _equivalents(s)
        self.tmod = None if self.t.device_type == "cpu" else self.t.module()
        self.no_effect: dict[str, str] = {}
        if self.t.device_type == "cpu":
            from ascendify.auto.redirects.cpu_cuda import NO_EFFECT

            self.no_effect = NO_EFFECT

    def impl_of(self, name: str) -> Any:
        """The target's equivalent of ``torch.cuda.<name>`` (None: none; ``_Missing``: absent here)."""
        impl = self.eq.get(name, _ABSENT)
        if impl is _ABSENT:  # not in the table: same name on the device module
            impl = _safe_getattr(self.tmod, name)
        return impl

    def map_args(self, args: tuple, kwargs: dict, api: str) -> tuple[tuple, dict]:
        m = self.m
        if args:
            a = args[0]
            if type(a) is str or type(a) is m.Device:
                args = (m.map(a, api),) + args[1:]
        if kwargs and kwargs.get("device") is not None:
            kwargs["device"] = m.map(kwargs["device"], api)
        return args, kwargs

    def redirect_fn(self, name: str, impl: Any, api: str) -> Any:
        rec, map_args = self.rec, self.map_args
        reason = self.no_effect.get(name)
        dest = f"{self.t.device_type}: {getattr(impl, '__qualname__', name)}"

        if reason:
            def fn(*args: Any, **kwargs: Any):
                rec.noop(api, reason)
                return impl(*args, **kwargs)
        else:
            def fn(*args: Any, **kwargs: Any):
                rec.hit(api, dest)
                if args or kwargs:
                    args, kwargs = map_args(args, kwargs, api)
                return impl(*args, **kwargs)

        return light_wraps(fn, impl)

    def redirect_cls(self, name: str, impl: type, api: str) -> Any:
        rec, map_args = self.rec, self.map_args
        dest = f"{self.t.device_type}: {impl.__qualname__}"

        def make(*args: Any, **kwargs: Any):
            rec.hit(api, dest)
            args, kwargs = map_args(args, kwargs, api)
            return impl(*args, **kwargs)

        return class_factory(impl, name, "torch.cuda", make)

    def redirect(self, name: str, impl: Any, api: str) -> Any:
        """The replacement of a name with an equivalent ``impl`` (a class, a function, or a plain value)."""
        if isinstance(impl, type):
            return self.redirect_cls(name, impl, api)
        if callable(impl):
            return self.redirect_fn(name, impl, api)
        return impl

    def unsupported(self, name: str, api: str, reason: str, ignorable: bool = False) -> Any:
        rec = self.rec

        def stub(*_a: Any, **_k: Any):
            rec.unsupported_call(api, reason, ignorable)
            return _Null()

        stub.__name__ = name
        stub.__qualname__ = name
        stub.__doc__ = f"ascendify: {api} has no equivalent on {self.t.name}: {reason}"
        stub._ascendify_unsupported = True
        return stub

    def no_equivalent_reason(self, name: str) -> str:
        tip = TIPS.get(name)
        if self.t.device_type == "npu":
            from ascendify.core import knowledge

            entry = knowledge.cuda_entry(f"torch.cuda.{name}") or {}
            if entry.get("doc_npu_name"):
                tip = f"see {entry['doc_npu_name']}"
        return f"no {self.t.device_type} equivalent" + (f"; {tip}" if tip else "")

    def place(self, owner: Any, name: str, new: Any) -> Any:
        """Set ``owner.name``; where torch had a class keep a class (torch runs ``isinstance`` on them)."""
        orig = getattr(owner, name, None)
        if isinstance(orig, type) and not isinstance(new, type):
            new = class_factory(orig, name, owner.__name__, new)
        self.s.patches.set(owner, name, new)
        return new


def install(s) -> None:
    import torch

    r = _Redirects(s)
    _install_probes(r, torch.cuda)
    _install_legacy_types(r, torch)
    replaced = _install_names(r, torch)
    for sub in SUBMODULES:
        _install_submodule(r, sub, replaced)


def _install_probes(r: _Redirects, cuda: Any) -> None:
    """``is_available`` / ``device_count``: the target for user code, the truth for libraries."""
    t, rec = r.t, r.rec
    real_available = cuda.is_available
    real_count = cuda.device_count
    count_impl = r.eq.get("device_count") or getattr(r.tmod, "device_count", None)

    def is_available() -> bool:
        if caller_is_user(2):
            rec.hit("torch.cuda.is_available", f"{t.device_type} available (user code)")
            return t.is_available()
        return real_available()

    def device_count() -> int:
        if caller_is_user(2):
            rec.hit("torch.cuda.device_count", f"{t.device_type} device count (user code)")
            return int(count_impl()) if count_impl else 1
        return real_count()

    is_available.__doc__ = "ascendify: the target's availability for user code, the truth for libraries."
    device_count.__doc__ = is_available.__doc__
    r.s.patches.set(cuda, "is_available", is_available)
    r.s.patches.set(cuda, "device_count", device_count)


def _install_legacy_types(r: _Redirects, torch: Any) -> None:
    for tname, dtname in LEGACY_DTYPES.items():
        dt = getattr(torch, dtname)
        r.s.legacy_types[tname] = dt
        r.s.patches.set(torch.cuda, tname, _legacy_type(tname, dt, r.s))


def _install_names(r: _Redirects, torch: Any) -> dict[str, Any]:
    """Every other name of ``torch.cuda.__all__``; returns name -> replacement (the submodules reuse them)."""
    cuda = torch.cuda
    replaced: dict[str, Any] = {}
    for name in cuda.__all__:
        if name in LEFT_ALONE or name in ("is_available", "device_count") or name in LEGACY_DTYPES:
            continue
        if name in SUBMODULES:
            continue
        api = f"torch.cuda.{name}"
        impl = r.impl_of(name)
        if name.endswith("Storage") and impl is None and r.t.device_type == "cpu":
            impl = getattr(torch, name, None)
        if impl is None:
            new = r.unsupported(name, api, r.no_equivalent_reason(name))
        elif isinstance(impl, _Missing):
            new = r.unsupported(name, api, f"{impl} exists in torch_npu but not in this process ({r.t.name})")
        else:
            new = r.redirect(name, impl, api)
        replaced[name] = r.place(cuda, name, new)
    return replaced


def _install_submodule(r: _Redirects, sub: str, replaced: dict[str, Any]) -> None:
    """Patch the functions of ``torch.cuda.<sub>`` too, so ``from torch.cuda.memory import X`` is covered."""
    try:
        smod = importlib.import_module(f"torch.cuda.{sub}")
    except Exception:
        return
    names = list(getattr(smod, "__all__", None) or [n for n in vars(smod) if not n.startswith("_")])
    if sub == "memory":
        names += list(PRIVATE_MEMORY)
    for name in names:
        obj = getattr(smod, name, None)
        if obj is None or isinstance(obj, type(contextlib)) or not callable(obj):
            continue
        if getattr(obj, "__module__", "") and not str(getattr(obj, "__module__", "")).startswith("torch.cuda"):
            continue  # re-exported helpers (contextlib.contextmanager, ...)
        r.place(smod, name, _submodule_replacement(r, sub, name, replaced))


def _submodule_replacement(r: _Redirects, sub: str, name: str, replaced: dict[str, Any]) -> Any:
    api = f"torch.cuda.{sub}.{name}"
    if name in replaced:
        return replaced[name]
    if sub in IGNORABLE:
        return r.unsupported(name, api, IGNORABLE[sub], ignorable=True)
    if sub == "memory" and name in PRIVATE_MEMORY:
        impl = _safe_getattr(_safe_getattr(r.tmod, "memory"), name)
        return r.redirect_fn(name, impl, api) if callable(impl) else r.unsupported(
            name, api, r.no_equivalent_reason(name))
    if sub in ("random", "memory", "graphs", "streams"):
        impl = r.impl_of(name)
        if impl is None or isinstance(impl, _Missing):
            return r.unsupported(name, api, r.no_equivalent_reason(name))
        if isinstance(impl, type):
            return r.redirect_cls(name, impl, api)
        return r.redirect_fn(name, impl, api)
    return r.unsupported(name, api, r.no_equivalent_reason(sub))


def _legacy_type(name: str, dtype: Any, s) -> type:
    """``torch.cuda.<name>``: builds ``dtype`` tensors on the target; ``isinstance`` checks dtype and device."""
    import torch

    t = s.target
    api = f"torch.cuda.{name}"
    empty, tensor = torch.empty, torch.tensor  # already wrapped or not: we pass a target device anyway

    class _Meta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.device.type == t.device_type

        def __call__(cls, *args: Any, **kwargs: Any):
            s.rec.hit(api, f"{t.device_type} {dtype}")
            dev = t.device_str(None)
            if args and all(isinstance(a, int) for a in args):
                return empty(*args, dtype=dtype, device=dev)
            if len(args) == 1 and isinstance(args[0], torch.Size):
                return empty(args[0], dtype=dtype, device=dev)
            if len(args) == 1:
                return tensor(args[0], dtype=dtype, device=dev)
            if not args:
                return empty(0, dtype=dtype, device=dev)
            raise TypeError(f"{api}: unsupported arguments {args!r}")

        def __repr__(cls) -> str:
            return f"<class 'torch.cuda.{name}' -> {t.device_type} {dtype}>"

    return _Meta(name, (), {"__module__": "torch.cuda", "_ascendify_legacy": f"torch.cuda.{name}", "dtype": dtype})
