"""``ascendify.auto.disable()`` restores every patched attribute: checked against an independent snapshot."""

from __future__ import annotations

import copyreg
import importlib
import os

import torch


def _owners() -> dict[str, object]:
    import torch.amp.autocast_mode as am
    import torch.amp.grad_scaler as gs
    import torch.autograd.profiler as ap
    import torch.distributed as dist
    import torch.distributed.device_mesh as dm
    import torch.distributed.distributed_c10d as c10d
    import torch.fft
    import torch.profiler as tp
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.nn.parallel import DistributedDataParallel

    owners = {
        "torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module, "torch.cuda": torch.cuda,
        "torch.amp": torch.amp, "autocast_mode": am, "autocast": am.autocast, "GradScaler": gs.GradScaler,
        "torch.fft": torch.fft, "dist": dist, "c10d": c10d, "DDP": DistributedDataParallel,
        "FSDP": FullyShardedDataParallel, "device_mesh": dm, "DeviceMesh": dm.DeviceMesh,
        "torch.backends": torch.backends, "torch.backends.cuda": torch.backends.cuda,
        "profiler.profile": tp.profile, "autograd.profile": ap.profile,
        "UntypedStorage": torch.UntypedStorage, "TypedStorage": torch.TypedStorage,
        "DataParallel": torch.nn.DataParallel,
        "UninitializedTensorMixin": torch.nn.parameter.UninitializedTensorMixin,
        "multiprocessing.spawn": importlib.import_module("multiprocessing.spawn"),
        "torch.accelerator": torch.accelerator, "torch.accelerator.memory": importlib.import_module(
            "torch.accelerator.memory"),
    }
    for sub in ("random", "memory", "graphs", "streams", "nvtx", "nccl", "profiler", "jiterator", "sparse", "tunable"):
        try:
            owners[f"torch.cuda.{sub}"] = importlib.import_module(f"torch.cuda.{sub}")
        except Exception:
            pass
    return owners


def _snapshot(owners: dict[str, object]) -> dict[str, dict[str, object]]:
    return {name: dict(vars(o)) for name, o in owners.items()}


def _diff(before: dict, after: dict) -> list[str]:
    out = []
    for owner, attrs in before.items():
        now = after[owner]
        for k in set(attrs) | set(now):
            if k not in now:
                out.append(f"{owner}.{k} removed")
            elif k not in attrs:
                out.append(f"{owner}.{k} added")
            elif now[k] is not attrs[k]:
                out.append(f"{owner}.{k} changed")
    return out


def test_disable_restores_every_patched_attribute(tmp_path):
    import ascendify.auto

    owners = _owners()
    before = _snapshot(owners)
    env_before = dict(os.environ)
    dispatch_before = dict(copyreg.dispatch_table)

    s = ascendify.auto.enable("cpu")
    try:
        patched = s.patches.targets()
        assert len(patched) > 150
        # every owner we patch is covered by the independent snapshot above
        known = {id(o) for o in owners.values()}
        missing = sorted({getattr(o, "__name__", repr(o)) for o, _ in patched if id(o) not in known})
        assert not missing, f"patched owners not covered by the snapshot: {missing}"
        assert _diff(before, _snapshot(owners)), "enable() changed nothing?"
        # exercise a few redirections
        torch.zeros(1, device="cuda").cuda().to("cuda:0")
        torch.cuda.synchronize()
        torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark
    finally:
        rep = ascendify.auto.disable()

    assert rep is not None and rep["redirected"]
    assert _diff(before, _snapshot(owners)) == []
    assert dict(copyreg.dispatch_table) == dispatch_before
    assert dict(os.environ) == env_before
    assert not ascendify.auto.is_enabled()
    assert ascendify.auto.disable() is None
    # CUDA calls behave natively again
    assert torch.cuda.is_available() is False
    assert type(torch.device("cuda")) is torch.device and torch.device("cuda").type == "cuda"


def test_enable_failure_leaves_nothing_patched(monkeypatch):
    import ascendify.auto
    from ascendify.auto.redirects import backends

    owners = _owners()
    before = _snapshot(owners)

    def boom(s):
        raise RuntimeError("install failed")

    monkeypatch.setattr(backends, "install", boom)
    try:
        ascendify.auto.enable("cpu")
    except RuntimeError as e:
        assert "install failed" in str(e)
    else:
        ascendify.auto.disable()
        raise AssertionError("enable() should have failed")
    assert not ascendify.auto.is_enabled()
    assert _diff(before, _snapshot(owners)) == []
