"""Emulator settings: one dataclass, filled from environment variables and overridable from Python.

Every setting has an environment variable (read when :func:`ascendify.emulator.enable` runs) and a keyword of
``enable(**settings)``; ``ascendify.emulator.settings`` is the live object (change it at any time).

========================  =====================================  ========  ==========================================
setting                   environment variable                   default   meaning
========================  =====================================  ========  ==========================================
``fidelity``              ``ASCENDIFY_EMULATE_FIDELITY``         ``warn``  ops with no NPU kernel / APIs unsupported on
                                                                           every chip: ``warn`` (report, warn once) or
                                                                           ``error`` (raise, like
                                                                           ``TORCH_NPU_FALLBACK_CPU_DISABLE=1``, which
                                                                           also selects ``error``)
``float64``               ``ASCENDIFY_EMULATE_FLOAT64``          ``warn``  float64/complex128 on ``npu``: ``allow``,
                                                                           ``warn`` or ``error``
``fp16_overflow``         ``ASCENDIFY_EMULATE_FP16_OVERFLOW``    ``off``   inf/nan produced by an fp16/bf16 op from
                                                                           finite inputs: ``off``, ``warn``, ``error``
``overflow_mode``         ``ASCENDIFY_EMULATE_OVERFLOW_MODE``    ``inf_nan``  CANN's floating-point overflow mode:
                                                                           ``inf_nan`` (IEEE 754 inf/NaN, the default
                                                                           on Atlas A2/A3) or ``saturation`` (inf ->
                                                                           +-max of the dtype, NaN -> 0, as on Atlas
                                                                           training series (910A), or A2/A3 with
                                                                           ``INF_NAN_MODE_ENABLE=0`` and
                                                                           ``INF_NAN_MODE_FORCE_DISABLE=1``)
``memory_capacity``       ``ASCENDIFY_EMULATE_MEMORY``           64 GiB    emulated device memory in bytes (suffixes
                                                                           K/M/G/T accepted); beyond it allocations
                                                                           raise ``torch.OutOfMemoryError``
``device_count``          ``ASCENDIFY_EMULATE_DEVICES``          ``8``     number of emulated devices (``npu:0``...);
                                                                           else the number of ids in
                                                                           ``ASCEND_RT_VISIBLE_DEVICES``
``device_name``           ``ASCENDIFY_EMULATE_DEVICE_NAME``      Ascend910B3  ``torch.npu.get_device_name()``
``single_device``         ``ASCENDIFY_EMULATE_SINGLE_DEVICE``    auto      every ``npu:N`` is the one physical ``npu:0``
                                                                           (tensors show ``npu:0``). On by default
                                                                           under torchrun (``LOCAL_RANK`` set):
                                                                           PyTorch's autograd engine runs Python
                                                                           backends on device 0 only
``self_test``             ``ASCENDIFY_EMULATE_SELF_TEST``        ``1``     run the short self-test when enabling
``cann_version``          ``ASCENDIFY_EMULATE_CANN``             9.1.0     the CANN release whose HCCL rules the
                                                                           ``hccl`` backend enforces (``8.0.RC1``...)
========================  =====================================  ========  ==========================================

>>> s = Settings.from_env({"ASCENDIFY_EMULATE_MEMORY": "2G", "TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
>>> s.memory_capacity, s.fidelity
(2147483648, 'error')
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

MODES = ("warn", "error")
FLOAT64_MODES = ("allow", "warn", "error")
OVERFLOW_MODES = ("off", "warn", "error")
FLOAT_OVERFLOW_MODES = ("inf_nan", "saturation")
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str | int) -> int:
    """``"2G"`` -> 2147483648; plain integers are bytes. Raises ``ValueError`` on anything else.

    >>> parse_bytes("512M"), parse_bytes(1024), parse_bytes("1.5k")
    (536870912, 1024, 1536)
    """
    if isinstance(text, int):
        value = text
    else:
        t = text.strip().upper().removesuffix("IB").removesuffix("B")
        unit = t[-1:] if t[-1:] in _SUFFIX and t[-1:] != "" else ""
        num = t[: -len(unit)] if unit else t
        try:
            value = int(float(num) * _SUFFIX[unit])
        except ValueError:
            raise ValueError(f"not a memory size: {text!r} (use bytes or a K/M/G/T suffix, e.g. 16G)") from None
    if value <= 0:
        raise ValueError(f"memory size must be positive, got {text!r}")
    return value


OBSERVERS: list = []  # callables (settings, field) told of every change (the C++ kernels mirror a few fields)


@dataclasses.dataclass
class Settings:
    fidelity: str = "warn"
    float64: str = "warn"
    fp16_overflow: str = "off"
    overflow_mode: str = "inf_nan"
    memory_capacity: int = 64 << 30
    device_count: int = 8
    device_name: str = "Ascend910B3"
    single_device: bool = False
    self_test: bool = True
    cann_version: str = "9.1.0"  # what torch_npu 2.13 asks for (compat_matrix.json: the master README)

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        for fn in OBSERVERS:
            fn(self, name)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad setting."""
        checks = (("fidelity", MODES), ("float64", FLOAT64_MODES), ("fp16_overflow", OVERFLOW_MODES),
                  ("overflow_mode", FLOAT_OVERFLOW_MODES))
        for name, allowed in checks:
            if getattr(self, name) not in allowed:
                raise ValueError(f"emulator setting {name}={getattr(self, name)!r}: expected one of {allowed}")
        if not isinstance(self.device_count, int) or not 1 <= self.device_count <= 64:
            raise ValueError(f"emulator setting device_count={self.device_count!r}: expected 1..64")
        self.memory_capacity = parse_bytes(self.memory_capacity)
        if not isinstance(self.cann_version, str) or not re.fullmatch(r"\d+\.\d+(\.(\d+|RC\d+))?",
                                                                       self.cann_version.strip(), re.IGNORECASE):
            raise ValueError(f"emulator setting cann_version={self.cann_version!r}: expected e.g. 8.0.RC1 or 9.1.0")

    def update(self, **changes) -> None:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown emulator setting(s): {', '.join(sorted(unknown))}")
        for k, v in changes.items():
            setattr(self, k, v)
        self.validate()

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        s = cls()
        if env.get("TORCH_NPU_FALLBACK_CPU_DISABLE", "").strip() == "1":
            s.fidelity = "error"
        if v := env.get("ASCENDIFY_EMULATE_FIDELITY"):
            s.fidelity = v.strip().lower()
        if v := env.get("ASCENDIFY_EMULATE_FLOAT64"):
            s.float64 = v.strip().lower()
        if v := env.get("ASCENDIFY_EMULATE_FP16_OVERFLOW"):
            s.fp16_overflow = v.strip().lower()
        if v := env.get("ASCENDIFY_EMULATE_DEVICE_NAME"):
            s.device_name = v.strip()
        s.overflow_mode = overflow_mode_for(s.device_name, env)
        if v := env.get("ASCENDIFY_EMULATE_OVERFLOW_MODE"):
            s.overflow_mode = v.strip().lower().replace("-", "_")
        if v := env.get("ASCENDIFY_EMULATE_MEMORY"):
            s.memory_capacity = parse_bytes(v)
        if v := env.get("ASCEND_RT_VISIBLE_DEVICES"):  # torch_npu's device selection: "0,1" -> 2 devices
            ids = [x for x in v.split(",") if x.strip()]
            if ids:
                s.device_count = len(ids)
        if v := env.get("ASCENDIFY_EMULATE_DEVICES"):
            try:
                s.device_count = int(v)
            except ValueError:
                raise ValueError(f"ASCENDIFY_EMULATE_DEVICES={v!r}: expected an integer") from None
        s.single_device = "LOCAL_RANK" in env
        if v := env.get("ASCENDIFY_EMULATE_SINGLE_DEVICE"):
            s.single_device = v.strip().lower() not in ("0", "false", "no", "off")
        if v := env.get("ASCENDIFY_EMULATE_CANN"):
            s.cann_version = v.strip()
        if v := env.get("ASCENDIFY_EMULATE_SELF_TEST"):
            s.self_test = v.strip().lower() not in ("0", "false", "no", "off")
        s.validate()
        return s


def chip_family(device_name: str) -> str:
    """The Ascend product family of a SoC name, the one vocabulary of every per-chip rule (HCCL's, the fused
    operators', the overflow mode): ``A1`` (Atlas training series, 910A/910ProA...), ``A2`` (910B), ``A3``
    (910_93), ``A5`` (950), ``310P`` (Atlas inference series), else ``other``.

    >>> [chip_family(n) for n in ("Ascend910B3", "Ascend910_9391", "Ascend910ProA", "Ascend950PR", "Ascend310P3")]
    ['A2', 'A3', 'A1', 'A5', '310P']
    """
    name = device_name.replace(" ", "")
    for prefix, family in (("Ascend950", "A5"), ("Ascend910_93", "A3"), ("Ascend910B", "A2"), ("Ascend910", "A1"),
                           ("Ascend310P", "310P")):
        if name.startswith(prefix):
            return family
    return "other"


def overflow_mode_for(device_name: str, env: Mapping[str, str]) -> str:
    """CANN's overflow mode on ``device_name`` under ``env`` (torch_npu's ``INF_NAN_MODE_ENABLE``, default 1; on
    Atlas A2/A3 a 0 takes effect only with ``INF_NAN_MODE_FORCE_DISABLE=1``; Atlas training series chips only
    saturate).

    >>> overflow_mode_for("Ascend910B3", {}), overflow_mode_for("Ascend910A", {})
    ('inf_nan', 'saturation')
    >>> overflow_mode_for("Ascend910B3", {"INF_NAN_MODE_ENABLE": "0", "INF_NAN_MODE_FORCE_DISABLE": "1"})
    'saturation'
    """
    if chip_family(device_name) == "A1":  # the training series only saturates
        return "saturation"
    if env.get("INF_NAN_MODE_ENABLE", "1").strip() == "0" and env.get("INF_NAN_MODE_FORCE_DISABLE", "").strip() == "1":
        return "saturation"
    return "inf_nan"
