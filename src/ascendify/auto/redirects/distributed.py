"""``torch.distributed``: ``nccl`` backends, device ids of process groups, DDP, FSDP and device meshes.

``nccl`` (any case, alone or in a ``"cuda:nccl,cpu:gloo"`` spec) becomes the target's backend (``hccl`` on
NPU, ``gloo`` on CPU); other backends pass through. DDP ``device_ids`` / ``output_device`` become target
indices, or None on the CPU (where DDP requires None).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ascendify.auto.record import caller_is_user


def map_backend(b: Any, target, rec, api: str) -> Any:
    """``"nccl"`` -> the target backend; ``"cuda:nccl,cpu:gloo"`` -> ``"npu:hccl,cpu:gloo"``.

    >>> from ascendify.auto.target import Target
    >>> from ascendify.auto.record import Recorder
    >>> map_backend("cuda:nccl,cpu:gloo", Target("cpu"), Recorder(), "x")
    'cpu:gloo'
    >>> map_backend("gloo", Target("npu"), Recorder(), "x")
    'gloo'
    """
    if not isinstance(b, str):
        return b
    if b.lower() == "nccl":
        rec.hit(api, target.dist_backend)
        return target.dist_backend
    if ":" not in b:
        return b
    pairs: dict[str, str] = {}
    changed = False
    for part in b.split(","):
        dev, _, be = part.strip().partition(":")
        if dev == "cuda":
            dev, changed = target.device_type, True
        if be.lower() == "nccl":
            be, changed = target.dist_backend, True
        pairs.setdefault(dev, be)
    if not changed:
        return b
    out = ",".join(f"{d}:{e}" for d, e in pairs.items())
    rec.hit(api, out)
    return out


def _wrap_kwargs(fn, api: str, fixers: dict[str, Any]):
    """Wrap ``fn`` so each named parameter (positional or keyword) passes through ``fixers[name]``."""
    code = inspect.unwrap(fn).__code__  # init_process_group is wrapped by c10d's loggers
    params = list(code.co_varnames[: code.co_argcount])

    @functools.wraps(fn)
    def w(*args: Any, **kwargs: Any):
        if args:
            args = list(args)
            for i, a in enumerate(args):
                if i < len(params) and params[i] in fixers:
                    args[i] = fixers[params[i]](a)
        for k in list(kwargs):
            if k in fixers:
                kwargs[k] = fixers[k](kwargs[k])
        return fn(*args, **kwargs)

    return w


def install(s) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    _patch_groups(s, dist, c10d)
    _patch_is_nccl_available(s, dist, c10d)
    _patch_ddp(s)
    # FSDP, DeviceMesh and pipelining are patched when first imported (importing them costs seconds)
    s.import_hooks.watch("torch.distributed.pipelining.stage", functools.partial(_patch_pipelining, s))
    s.import_hooks.watch("torch.distributed.fsdp", functools.partial(_patch_fsdp, s))
    s.import_hooks.watch("torch.distributed.device_mesh", functools.partial(_patch_mesh, s, dist))


# ---- argument fixers: value -> value on the target, recorded under ``api`` ----


def _backend(s, api: str):
    t, rec = s.target, s.rec
    return lambda b: map_backend(b, t, rec, api)


def _device_id(s, api: str):
    """A process group's / FSDP's ``device_id``: a target device (None on the CPU)."""
    m, t, Device = s.mapper, s.target, s.Device

    def fix(d: Any) -> Any:
        if d is None:
            return None
        if type(d) is int or (type(d) is Device and d.type == "cuda") or (type(d) is str and d[:4] == "cuda"):
            nd = m.map(d, api, True)
            if not t.indexed:
                return None
            return Device(nd) if type(nd) is str else nd
        if t.device_type == "cpu" and type(d) is Device and d.type == "cpu":
            # the accelerator's device (torch.accelerator is the cpu here), which torch refuses as a device_id
            s.rec.hit(api, "None (cpu)")
            return None
        return d

    return fix


def _device_index(s, api: str):
    """DDP's ``output_device`` (and each of ``device_ids``): a target index (None on the CPU)."""
    m, t, rec, Device = s.mapper, s.target, s.rec, s.Device

    def fix(d: Any) -> Any:
        if d is None:
            return None
        if type(d) is int:
            if not t.indexed:
                rec.hit(api, "None (cpu)")
                return None
            return d
        nd = m.map(d, api, True)
        if nd is d:
            return d
        if not t.indexed:
            return None
        nd = Device(nd) if type(nd) is str else nd
        return nd.index

    return fix


def _device_ids(s, api: str):
    one = _device_index(s, api)

    def fix(ids: Any) -> Any:
        if ids is None:
            return None
        out = [one(i) for i in ids]
        return None if any(o is None for o in out) else type(ids)(out) if isinstance(ids, tuple) else out

    return fix


# ---- the patches ----


def _patch_groups(s, dist: Any, c10d: Any) -> None:
    """``init_process_group`` / ``new_group``: backend and device_id."""
    for owner in (dist, c10d):
        s.patches.set(owner, "init_process_group", _wrap_kwargs(
            c10d.init_process_group, "dist.init_process_group",
            {"backend": _backend(s, "dist.init_process_group(backend)"),
             "device_id": _device_id(s, "dist.init_process_group(device_id)")}))
        s.patches.set(owner, "new_group", _wrap_kwargs(
            c10d.new_group, "dist.new_group",
            {"backend": _backend(s, "dist.new_group(backend)"),
             "device_id": _device_id(s, "dist.new_group(device_id)")}))


def _patch_is_nccl_available(s, dist: Any, c10d: Any) -> None:
    t, rec = s.target, s.rec
    real_is_backend_available = c10d.is_backend_available
    real_is_nccl_available = c10d.is_nccl_available

    def is_nccl_available() -> bool:
        """User code: is the target's backend available? torch itself: the truth (it picks NCCL code paths)."""
        if not caller_is_user(2):
            return real_is_nccl_available()
        rec.hit("dist.is_nccl_available", t.dist_backend)
        try:
            return bool(real_is_backend_available(t.dist_backend))
        except Exception:
            return False

    # only the public namespace: c10d's own functions look the name up in their module globals
    s.patches.set(dist, "is_nccl_available", is_nccl_available)


def _patch_ddp(s) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    s.patches.set(DDP, "__init__", _wrap_kwargs(DDP.__init__, "DistributedDataParallel", {
        "device_ids": _device_ids(s, "DistributedDataParallel(device_ids)"),
        "output_device": _device_index(s, "DistributedDataParallel(output_device)"),
    }))


def _patch_fsdp(s, mod) -> None:
    FSDP = mod.FullyShardedDataParallel
    s.patches.set(FSDP, "__init__", _wrap_kwargs(FSDP.__init__, "FullyShardedDataParallel",
                                                 {"device_id": _device_id(s, "FullyShardedDataParallel(device_id)")}))


def _patch_mesh(s, dist: Any, dm) -> None:
    m, P = s.mapper, s.patches

    def dtype_fix(api: str):
        return lambda d: m.map(d, api)

    P.set(dm.DeviceMesh, "__init__", _wrap_kwargs(dm.DeviceMesh.__init__, "DeviceMesh",
                                                   {"device_type": dtype_fix("DeviceMesh(device_type)")}))
    real_init_mesh = dm.init_device_mesh
    wrapped = _wrap_kwargs(real_init_mesh, "init_device_mesh",
                           {"device_type": dtype_fix("init_device_mesh(device_type)")})
    P.set(dm, "init_device_mesh", wrapped)
    if getattr(dist, "init_device_mesh", None) is real_init_mesh:
        P.set(dist, "init_device_mesh", wrapped)


def _patch_pipelining(s, st) -> None:
    m, P = s.mapper, s.patches

    def dev(api: str):
        return lambda d: m.map(d, api, True)

    P.set(st.PipelineStage, "__init__", _wrap_kwargs(st.PipelineStage.__init__, "PipelineStage",
                                                      {"device": dev("PipelineStage(device)")}))
    P.set(st, "build_stage", _wrap_kwargs(st.build_stage, "build_stage", {"device": dev("build_stage(device)")}))
