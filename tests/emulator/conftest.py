"""One emulated npu device shared by every emulator test (PrivateUse1 can be renamed once per process).

The emulator is enabled for the tests of this directory and made inactive afterwards, so that CPU-only tests
that run later in the same pytest process see no npu (``is_enabled()`` False, ``torch.npu.is_available()``
False); plain CPU tensors are never affected.
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


def _enable_before_any_backward():
    """PyTorch's autograd engine sizes its per-device queues at the first backward() of the process; one run
    on the CPU by an earlier test package (tests/auto...) before the npu exists breaks every later npu
    backward. Enable at collection time, which precedes every test, and stay inactive until this package."""
    import ascendify.emulator as emu

    if not emu.is_enabled():
        emu.enable()
        emu._set_active(False)


_enable_before_any_backward()


@pytest.fixture(scope="package", autouse=True)
def emulator():
    import ascendify.emulator as emu

    emu.enable()  # idempotent; re-activates after a previous package's teardown
    yield emu
    emu._set_active(False)


@pytest.fixture
def fresh_report(emulator):
    """Clean counters, default settings, restored afterwards."""
    saved = emulator.settings.as_dict()
    emulator.reset_report()
    yield emulator
    emulator.settings.update(**saved)
    emulator.reset_report()


@pytest.fixture
def python():
    return sys.executable
