"""Random numbers on the emulated device: one CPU ``torch.Generator`` per ``npu`` device.

Kernels with a ``generator`` argument get the device's generator when the caller passed none, so
``torch.npu.manual_seed`` (and ``torch.manual_seed``, which seeds every device) controls ``npu`` randomness
and leaves the CPU's stream alone, as on hardware.
"""

from __future__ import annotations

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


def seed(index: int) -> None:
    s = torch.Generator().seed()
    manual_seed(s, index)


def initial_seed(index: int) -> int:
    generator(index)
    return _initial_seed[index]


def get_state(index: int) -> torch.Tensor:
    return generator(index).get_state()


def set_state(state: torch.Tensor, index: int) -> None:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor (as returned by torch.npu.get_rng_state())")
    generator(index).set_state(state.cpu())
