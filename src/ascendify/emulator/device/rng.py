"""Random numbers on the emulated device: one CPU ``torch.Generator`` per ``npu`` device.

Kernels with a ``generator`` argument get the device's generator when the caller passed none, so
``torch.npu.manual_seed`` (and ``torch.manual_seed``, which seeds every device) controls ``npu`` randomness
and leaves the CPU's stream alone, as on hardware. Random ops that take no generator (``native_dropout``,
which ``nn.Dropout`` uses on devices; attention with dropout) run inside :func:`drawing_from`: the CPU
kernel draws from the CPU default generator, which for the call holds the device generator's state.

``torch.Generator("npu")`` would ask C++ hooks that a Python backend cannot provide: :func:`install_generator`
makes ``torch.Generator`` a thin factory that returns a :class:`NpuGenerator` for ``npu`` (a CPU engine, which
is what the emulated device's kernels draw from, reporting ``device == npu:N``) and the usual generator for
everything else; ``isinstance(g, torch.Generator)`` keeps answering for every generator.
"""

from __future__ import annotations

import contextlib

import torch

_generators: dict[int, torch.Generator] = {}
_initial_seed: dict[int, int] = {}


def generator(index: int) -> torch.Generator:
    g = _generators.get(index)
    if g is None:
        g = _generators[index] = torch.Generator()
        seed = torch.initial_seed()
        g.manual_seed(seed)
        _initial_seed[index] = seed
    return g


def manual_seed(seed: int, index: int) -> None:
    seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    generator(index).manual_seed(seed)
    _initial_seed[index] = seed
    _offsets[index] = 0


def seed(index: int) -> None:
    s = torch.Generator().seed()
    manual_seed(s, index)


def initial_seed(index: int) -> int:
    generator(index)
    return _initial_seed[index]


# DTensor's RNG tracker reads the device state as Philox's (16 bytes: a uint64 seed, then a uint64 offset, the
# shape of torch_npu's state), moves the offset to give each shard its own stream, and sets it back
# (``_PhiloxState``). ``torch.npu.get_rng_state()`` hands DTensor that shape (``get_philox_state``) and everyone
# else the engine's own state (a Mersenne Twister's, which restores exactly in any process and keeps the npu
# stream equal to the CPU's from the same seed). A Philox-shaped state this device handed out restores its engine
# exactly (kept under its (seed, offset), the last SNAPSHOTS of them); an offset never handed out (the tracker's
# arithmetic) seeds the engine from (seed, offset): the stream is a function of the pair, as with Philox.
_STATE_BYTES = 16
SNAPSHOTS = 256
_offsets: dict[int, int] = {}
_snapshots: dict[tuple[int, int, int], torch.Tensor] = {}


def get_state(index: int) -> torch.Tensor:
    return generator(index).get_state()


def _pack(seed: int, offset: int) -> torch.Tensor:
    return torch.tensor([seed & 0xFFFF_FFFF_FFFF_FFFF, offset], dtype=torch.uint64).view(torch.uint8).clone()


def get_philox_state(index: int) -> torch.Tensor:
    g = generator(index)
    engine = g.get_state()
    seed = _initial_seed[index]
    offset = _offsets.get(index, 0)
    known = _snapshots.get((index, seed, offset))
    if known is None or not torch.equal(known, engine):
        if known is not None:  # drawn since that state was handed out: a new position
            offset += 1
        _offsets[index] = offset
        _snapshots[(index, seed, offset)] = engine
        while len(_snapshots) > SNAPSHOTS:
            _snapshots.pop(next(iter(_snapshots)))
    return _pack(seed, offset)


def set_state(state: torch.Tensor, index: int) -> None:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor (as returned by torch.npu.get_rng_state())")
    state = state.cpu()
    g = generator(index)
    if state.numel() != _STATE_BYTES:
        g.set_state(state)  # the engine's own state
        return
    seed, offset = (int(v) for v in state.contiguous().view(torch.uint64).tolist())
    seed &= 0xFFFF_FFFF_FFFF_FFFF
    engine = _snapshots.get((index, seed, offset))
    if engine is not None:
        g.set_state(engine)
    else:  # a position this device never handed out: the stream is a function of (seed, offset)
        g.manual_seed((seed * 0x9E3779B97F4A7C15 + offset * 0xBF58476D1CE4E5B9 + 1) & 0xFFFF_FFFF_FFFF_FFFF)
        _snapshots[(index, seed, offset)] = g.get_state()
    _initial_seed[index] = seed
    _offsets[index] = offset


@contextlib.contextmanager
def drawing_from(index: int):
    """While active, the CPU default generator continues device ``index``'s random stream; afterwards the
    device generator has advanced and the CPU generator is back where it was (same thread only)."""
    g = generator(index)
    cpu = torch.default_generator
    saved = cpu.get_state()
    cpu.set_state(g.get_state())
    try:
        yield
    finally:
        g.set_state(cpu.get_state())
        cpu.set_state(saved)


_TorchGenerator = torch._C.Generator


class NpuGenerator(_TorchGenerator):
    """What ``torch.Generator("npu:N")`` gives under emulation: seeded, saved and restored like any generator,
    accepted by every random op on ``npu`` tensors (``generator=g``). Its engine is the CPU's Mersenne
    Twister, like every emulated ``npu`` random number (an Ascend device draws different numbers)."""

    @property
    def device(self) -> torch.device:
        return torch.device("npu", self._npu_index)

    def __repr__(self) -> str:
        return f"<NpuGenerator device={self.device} (emulated)>"

    def __reduce__(self):
        return (_rebuild_npu_generator, (self._npu_index, self.get_state()))


def _rebuild_npu_generator(index: int, state: torch.Tensor) -> NpuGenerator:
    g = NpuGenerator()
    g._npu_index = index
    g.set_state(state)
    return g


class _GeneratorMeta(type(_TorchGenerator)):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _TorchGenerator)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, _TorchGenerator)


class Generator(_TorchGenerator, metaclass=_GeneratorMeta):
    """Stands in for ``torch.Generator`` while emulating: ``Generator("npu")`` is an :class:`NpuGenerator`,
    any other device the usual ``torch._C.Generator``."""

    def __new__(cls, device=None):
        if device is not None:
            d = torch.device(device)
            if d.type == "npu":
                from ascendify.emulator import runtime

                g = NpuGenerator()
                g._npu_index = runtime.check_index(d.index)
                return g
            return _TorchGenerator(d)
        return _TorchGenerator()


def install_generator() -> None:
    """Make ``torch.Generator("npu")`` work (idempotent)."""
    if torch.Generator is _TorchGenerator:
        from ascendify.emulator import runtime

        Generator.__doc__ = _TorchGenerator.__doc__
        runtime.patches.set(torch, "Generator", Generator)
