"""Which device a verb runs on: the one answer to ``--device`` (and to ``--to``, ``--golden``/``--target``,
``ASCENDIFY_TARGET``), for every verb.

:mod:`ascendify.core.devices` only *detects* (probes that never raise and never change the process); this module
*decides*, and may turn the emulated NPU on, so it sits above both :mod:`ascendify.core.devices` and
:mod:`ascendify.emulator` (which itself asks :mod:`ascendify.core.devices`). Importing it costs no torch; the
command line's side (one ``--device`` option for every verb) is :func:`ascendify.commands.add_device_argument`.

>>> resolve("cpu")
Resolved(device='cpu', emulated=False, why='the host CPU, as asked')
>>> resolve("tpu")  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
DeviceSpecError: unknown device 'tpu': use one of auto, npu, cuda, xpu, mps, cpu (npu:N, cuda:N)
"""

from __future__ import annotations

import shutil
from typing import Any, NamedTuple

from ascendify.core import devices


class DeviceError(ValueError):
    """A device the user asked for that this machine cannot give; the message says what to do. ``exit_code``:
    3, the device is not usable here (an environment problem), or 2 for :class:`DeviceSpecError`."""

    exit_code = 3


class DeviceSpecError(DeviceError):
    """A device word that names no device (``tpu``, ``cuda:``, ``npu:x``), or one the purpose cannot take
    (``bench --device xpu``): a usage error."""

    exit_code = 2
    usage = True


DEVICE_CHOICES = ("auto", "npu", "cuda", "xpu", "mps", "cpu")
PURPOSES = ("run", "train", "bench", "redirect", "port")
_ACCELERATORS = ("cuda", "xpu", "mps")
_NAMES = {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}


class Resolved(NamedTuple):
    """Where the work runs: ``device`` (``npu``, ``npu:1``, ``cuda``, ``cpu``), whether it is the emulated NPU,
    and why it was chosen (one sentence for the report)."""

    device: str
    emulated: bool
    why: str

    @property
    def kind(self) -> str:
        """The device type (``npu`` for ``npu:1``)."""
        return self.device.partition(":")[0]


def parse(requested: str | None) -> tuple[str, int | None]:
    """``(word, index)`` of a device word (``auto``, ``npu``, ``cuda:1``...; None means ``auto``).
    Raises :class:`DeviceSpecError` for anything else."""
    req = (requested or "auto").strip().lower()
    kind, sep, index = req.partition(":")
    if kind not in DEVICE_CHOICES or (sep and not index.isdigit()) or (kind == "auto" and sep):
        raise DeviceSpecError(f"unknown device {requested!r}: use one of {', '.join(DEVICE_CHOICES)} (npu:N, cuda:N)")
    return kind, int(index) if sep else None


def words(purpose: str = "run") -> tuple[str, ...]:
    """The device words ``purpose`` takes, as shown in ``--help`` (``npu[:N]``: an index too).

    >>> words("run"), words("bench")
    (('auto', 'npu[:N]', 'cuda[:N]', 'xpu[:N]', 'mps', 'cpu'), ('auto', 'npu', 'cuda', 'cpu'))
    """
    indexed = purpose in ("run", "train")
    out = []
    for w in DEVICE_CHOICES:
        if w in ("xpu", "mps") and purpose in ("bench", "port"):
            continue
        out.append(f"{w}[:N]" if indexed and w in ("npu", "cuda", "xpu") else w)
    return tuple(out)


def auto_means(purpose: str = "run") -> str:
    """What ``auto`` is for ``purpose``, in a few words (the order of :func:`resolve`)."""
    return {"run": "a real NPU, CUDA, XPU or MPS, else the emulated NPU",
            "train": "a real NPU, CUDA, XPU or MPS, else the emulated NPU",
            "bench": "a real NPU, else CUDA, else the CPU (the emulated NPU only when asked for: npu)",
            "redirect": "a real NPU, the emulated NPU when on, CUDA, XPU, MPS, else the CPU",
            "port": "a real NPU, else CUDA, else the emulated NPU"}[purpose]


def check(requested: str | None, purpose: str = "run") -> tuple[str, int | None]:
    """:func:`parse`, plus what ``purpose`` cannot take (see :func:`resolve`): a usage error raised before any
    work, with nothing probed or turned on."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}: one of {', '.join(PURPOSES)}")
    kind, index = parse(requested)
    if index is not None and purpose in ("bench", "redirect", "port"):
        why = {"bench": "the bench measures device 0", "port": "port runs each side on device 0",
               "redirect": "cuda:N in the program becomes N on the target"}[purpose]
        raise DeviceSpecError(f"{requested}: give the device type only ({kind}): {why}")
    if purpose == "bench" and kind in ("xpu", "mps"):
        raise DeviceSpecError(f"{requested}: not benchmarked yet: use npu, cuda or cpu")
    if purpose == "port" and kind in ("xpu", "mps"):
        raise DeviceSpecError(f"{requested}: port runs its NPU side on an Ascend NPU (or the emulated one) and the "
                              "original on CUDA or the host: use auto, npu, cuda or cpu")
    return kind, index


def resolve(requested: str | None = "auto", *, purpose: str = "run",
            emulator: dict[str, Any] | None = None) -> Resolved:
    """The device for ``requested``, one of ``auto``, ``npu[:N]``, ``cuda[:N]``, ``xpu[:N]``, ``mps``, ``cpu``
    (None means ``auto``), for ``purpose``.

    The words mean the same for every verb:

    - ``npu``: the real Ascend NPU where torch_npu sees one, else the emulated NPU (turned on here with the
      ``emulator`` settings, e.g. ``{"memory_capacity": "16G"}``). A torch_npu that is installed but sees no NPU
      is an error (``run ascendify doctor``), never papered over with the emulator.
    - ``cuda``, ``xpu``, ``mps``: that accelerator; :class:`DeviceError` (exit 3) where there is none.
    - ``cpu``: the host CPU.
    - ``auto``: the first of, in this order,

      1. a real Ascend NPU;
      2. the emulated NPU when it is on in this process already, or asked for (``ASCENDIFY_EMULATE=npu``);
      3. CUDA, 4. XPU, 5. MPS;
      6. the purpose's fallback: the emulated NPU (``run``, ``train``, ``port``: the embedded default wherever no
         real accelerator is present), or the CPU (``bench``, ``redirect``).

    The purposes, and the only differences between them:

    - ``run`` (train's, compare's and lockstep's device): as above.
    - ``train``: as ``run``; an emulated ``npu:N`` other than ``npu:0`` is refused (the emulator runs backward on
      one device), before anything is built.
    - ``bench``: ``auto`` ends at the CPU and skips XPU and MPS: a figure taken on the emulated NPU is host speed,
      so the bench measures it only when asked (``npu``); one device (no ``:N``); XPU and MPS are not
      benchmarked yet (a usage error).
    - ``redirect`` (``ascendify run``/``dump --to``, ``import ascendify.auto``): ``auto`` ends at the CPU: the
      program is redirected to the emulator only when asked; no ``:N`` (each ``cuda:N`` maps to index N).
    - ``port`` (where port's NPU side runs): nothing is turned on here (the runs are child processes, which
      turn the emulator on themselves); ``auto`` looks for a real NPU, then CUDA (only where ``nvidia-smi`` is on
      the PATH: port's own process never imports torch for a probe), then the emulated NPU; ``cpu`` means the host
      only: the NPU side on the emulated NPU (:attr:`Resolved.emulated`); no ``:N``, no XPU or MPS.

    Raises :class:`DeviceSpecError` (usage, exit 2) for a word that names no device or one the purpose cannot
    take, and :class:`DeviceError` (exit 3) for a device that is not here, before anything is built.
    """
    kind, index = check(requested, purpose)
    suffix = f":{index}" if index is not None else ""
    port = purpose == "port"
    if kind == "auto":
        if devices.is_npu_available():
            return Resolved("npu", False, "an Ascend NPU is present: every NPU step runs on it" if port else
                            "an Ascend NPU is present")
        if devices.is_emulated_npu_enabled() or devices.emulation_requested():
            kind = "npu"
        else:
            for name in ("cuda",) if purpose in ("bench", "port") else _ACCELERATORS:
                if _accelerator_here(name, purpose):
                    why = ("a CUDA GPU is present and no Ascend NPU: the original runs on the GPU; the migrated copy "
                           "needs an NPU") if port else f"no Ascend NPU here; a {_NAMES[name]} device is"
                    return Resolved(name, False, why)
            if purpose in ("bench", "redirect"):
                return Resolved("cpu", False, "no accelerator here: the host CPU (the emulated NPU only when asked "
                                              "for: npu)")
            if port:
                _refuse_broken_torch_npu()
                return Resolved("npu", True, "no Ascend NPU or GPU here: the emulated NPU (on the host CPU) stands "
                                             "in, at host speed")
            kind = "npu"
    if kind == "cpu":
        if port:
            _refuse_broken_torch_npu()
            return Resolved("npu", True, "--device cpu: the host only, the NPU side on the emulated NPU")
        return Resolved("cpu" + suffix, False, "the host CPU, as asked")
    if kind == "npu":
        if devices.is_npu_available():
            return Resolved("npu" + suffix, False, "an Ascend NPU is present")
        if port:
            _refuse_broken_torch_npu()
            return Resolved("npu", True, "no Ascend NPU here: the emulated NPU stands in (its speed is the host's)")
        was_on = devices.is_emulated_npu_enabled()
        enable_emulated_npu(**(emulator or {}))
        if purpose in ("run", "train"):
            _check_emulated_index(index or 0, backward=purpose == "train")
        why = ("the emulated NPU, on in this process" if was_on else
               "no Ascend NPU here: the emulated npu device (on the host CPU) stands in, at host speed")
        return Resolved("npu" + suffix, True, why)
    if not _accelerator_here(kind, purpose):
        raise DeviceError(f"no {kind} device here: use npu (the emulated NPU where no NPU exists) or cpu (no "
                          f"{_NAMES[kind]} device is visible to torch)")
    return Resolved(kind + suffix, False, f"a {_NAMES[kind]} device, as asked")


def _accelerator_here(kind: str, purpose: str) -> bool:
    if purpose == "port" and kind == "cuda" and not shutil.which("nvidia-smi"):
        return False
    return getattr(devices, f"is_{kind}_available")()


def _refuse_broken_torch_npu() -> None:
    if devices.torch_npu_installed():
        raise DeviceError("torch_npu is installed but no NPU is usable: run `ascendify doctor`")


def enable_emulated_npu(**settings) -> None:
    """Turn the emulated NPU on in this process (idempotent); ``settings`` are the emulator's
    (``memory_capacity="16G"``...). Raises :class:`DeviceError` saying why it cannot start (a real torch_npu
    is installed, another backend owns the device slot, a bad setting)."""
    _refuse_broken_torch_npu()
    import ascendify.emulator as emu

    try:
        emu.enable(**settings)
    except (emu.EmulatorError, ValueError) as e:
        raise DeviceError(f"no real NPU here and the emulated NPU cannot start: {e}") from e


def _check_emulated_index(index: int, backward: bool) -> None:
    from ascendify.emulator import settings

    if index >= settings.device_count:
        raise DeviceError(f"npu:{index}: the emulated NPU has {settings.device_count} device(s) (npu:0 to "
                          f"npu:{settings.device_count - 1}; ASCENDIFY_EMULATE_DEVICES sets the count)")
    if backward and index > 0 and not settings.single_device:
        raise DeviceError(f"npu:{index}: the emulated NPU runs backward on npu:0 only (PyTorch's Python device "
                          "guard knows one device): use npu or npu:0, or set ASCENDIFY_EMULATE_SINGLE_DEVICE=1 "
                          "to make every npu:N the one device")
