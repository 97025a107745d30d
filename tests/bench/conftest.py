"""The bench tests run on the CPU and on the emulated npu (enabled once per process, before any backward)."""

import textwrap

import pytest

torch = pytest.importorskip("torch")


def _enable_before_any_backward():
    # transformers must be imported before the emulated npu exists (see bench.device._import_transformers_first)
    from ascendify.bench.device import _import_transformers_first

    _import_transformers_first()
    import ascendify.emulator as emu

    if not emu.is_enabled():
        emu.enable()
        emu._set_active(False)


_enable_before_any_backward()


@pytest.fixture
def npu():
    """The emulated npu as a BenchDevice; settings restored and the emulator inactive afterwards."""
    import ascendify.emulator as emu
    from ascendify.bench.device import BenchDevice

    saved = emu.settings.as_dict()
    dev = BenchDevice.open("npu")
    assert dev.emulated
    yield dev
    emu.settings.update(**saved)
    emu._set_active(False)


@pytest.fixture
def cpu():
    from ascendify.bench.device import BenchDevice

    return BenchDevice.open("cpu")


@pytest.fixture
def tiny_model_file(tmp_path):
    """A user model file with three factories: a linear classifier (known FLOPs), a small CNN, and a model whose
    first call is slow (to see warm-up excluded)."""
    f = tmp_path / "tiny_models.py"
    f.write_text(textwrap.dedent("""
        import time
        import torch.nn as nn

        def linear(num_classes=10, image_size=8):
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, num_classes, bias=False))

        def cnn(num_classes=10):
            return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, num_classes))

        class SlowFirst(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3 * 8 * 8, 4)
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                if self.calls == 2:  # the first call is the FLOP count; the second is the first warm-up step
                    time.sleep(0.4)
                return self.fc(x.flatten(1))

        def slow_first():
            return SlowFirst()
    """))
    return f
