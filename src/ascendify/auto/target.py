"""The device that CUDA calls go to: a small description of it, made once per run.

A :class:`Target` names the torch device type, the module that plays ``torch.cuda``'s role on it, its
distributed backend, and how it takes device indices. *Which* device is not decided here: the one resolver,
:func:`ascendify.device.placement.resolve` with purpose ``redirect``, chooses it (``auto``: a real NPU, the
emulated NPU when on or asked for, CUDA, XPU, MPS, then the CPU) and :meth:`Target.of` describes the choice.

>>> t = Target("cpu")
>>> t.device_str(3), t.indexed, t.dist_backend
('cpu', False, 'gloo')
>>> Target("npu").device_str(1), Target("npu").dist_backend
('npu:1', 'hccl')
"""

from __future__ import annotations

from dataclasses import dataclass, field

# distributed backend per device type when torch's own table has no entry (torch_npu registers hccl itself)
_BACKENDS = {"npu": "hccl", "cpu": "gloo", "xpu": "xccl", "mps": "gloo", "cuda": "nccl"}


@dataclass(frozen=True)
class Target:
    """Where CUDA work goes. ``kind`` says how the device is provided (``torch_npu``, ``emulated``, ``native``)."""

    device_type: str
    kind: str = "native"
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def of(cls, resolved, notes: tuple[str, ...] = ()) -> Target:
        """The target a :class:`ascendify.device.placement.Resolved` names (its ``kind``: ``torch_npu`` for a
        real NPU, ``emulated``, or ``native``)."""
        kind = "emulated" if resolved.emulated else ("torch_npu" if resolved.kind == "npu" else "native")
        return cls(resolved.kind, kind, notes)

    @property
    def name(self) -> str:
        return "npu (emulated)" if self.kind == "emulated" else self.device_type

    @property
    def indexed(self) -> bool:
        """Whether device indices mean anything (``cpu:3`` is just the CPU)."""
        return self.device_type not in ("cpu", "mps")

    @property
    def dist_backend(self) -> str:
        try:
            import torch.distributed as dist

            b = dist.Backend.default_device_backend_map.get(self.device_type)
            if b:
                return b
        except Exception:
            pass
        return _BACKENDS.get(self.device_type, "gloo")

    @property
    def hf32(self) -> bool:
        """True when TF32 switches map to the NPU's HF32 switches."""
        return self.device_type == "npu"

    def device_str(self, index: int | None = None) -> str:
        if index is None or not self.indexed:
            return self.device_type
        return f"{self.device_type}:{index}"

    def module(self):
        """The device module (``torch.npu``, ``torch.xpu``, ``torch.mps``, ``torch.cpu``)."""
        import torch

        return getattr(torch, self.device_type)

    def is_available(self) -> bool:
        if self.device_type == "cpu":
            return True
        try:
            return bool(self.module().is_available())
        except Exception:
            return False
