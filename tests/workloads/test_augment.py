"""ascendify.workloads.augment: every augmentation really changes the images, and normalise does what it says, on the
CPU and on the emulated npu."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("kornia")

from ascendify.bench.device import _import_transformers_first  # noqa: E402
from ascendify.workloads import augment as data_aug  # noqa: E402


def _enable_before_any_backward():
    """The emulated npu must exist before the process's first backward (see tests/emulator/conftest.py)."""
    _import_transformers_first()
    import ascendify.emulator as emu

    if not emu.is_enabled():
        emu.enable()
        emu._set_active(False)


_enable_before_any_backward()


def _images(device):
    g = torch.Generator().manual_seed(0)
    # smooth gradients plus texture: flips, rotations and crops all move pixels that differ
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 32), torch.linspace(0, 1, 32), indexing="ij")
    base = torch.stack([xx, yy, xx * yy]).unsqueeze(0).repeat(4, 1, 1, 1)
    return (0.7 * base + 0.3 * torch.rand(4, 3, 32, 32, generator=g)).clamp(0, 1).to(device)


def _laplacian_energy(x):
    k = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=x.device).expand(3, 1, 3, 3)
    return torch.nn.functional.conv2d(x, k, groups=3).pow(2).mean().item()


@pytest.fixture(params=["cpu", "npu"])
def device(request):
    if request.param == "cpu":
        yield "cpu"
        return
    import ascendify.emulator as emu
    from ascendify.bench.device import BenchDevice

    BenchDevice.open("npu")
    yield "npu"
    emu._set_active(False)


def _only(step, **kw):
    return data_aug.build_augment(32, only=step, p=1.0, mean=None, std=None, **kw) if step != "normalize" \
        else data_aug.build_augment(32, only=step, p=1.0)


def test_flip_mirrors_exactly(device):
    x = _images(device)
    y = _only("flip")(x)
    assert y.device.type == device
    torch.testing.assert_close(y.cpu(), x.cpu().flip(-1))


@pytest.mark.parametrize("step", ["crop", "rotation", "color_jitter"])
def test_step_changes_every_image(device, step):
    torch.manual_seed(1)
    x = _images(device)
    y = _only(step)(x)
    assert y.shape == x.shape and y.device.type == device
    per_image = (y - x).abs().flatten(1).mean(1).cpu()
    assert (per_image > 1e-3).all(), (step, per_image)
    if step == "color_jitter":  # colours move: per-channel means change
        assert not torch.allclose(y.mean((2, 3)).cpu(), x.mean((2, 3)).cpu(), atol=1e-3)


def test_blur_removes_high_frequencies(device):
    x = _images(device)
    y = _only("blur", blur_sigma=(1.5, 1.5))(x)
    assert _laplacian_energy(y) < 0.5 * _laplacian_energy(x)


def test_normalize_is_exact(device):
    x = _images(device)
    y = _only("normalize")(x)
    mean = torch.tensor(data_aug.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(data_aug.IMAGENET_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(y.cpu(), (x.cpu() - mean) / std, rtol=1e-5, atol=1e-5)


def test_full_pipeline_draws_per_image(device):
    torch.manual_seed(0)
    x = _images(device)[:1].repeat(4, 1, 1, 1)  # four identical images
    y = data_aug.build_augment(24, p=1.0)(x)
    assert y.shape == (4, 3, 24, 24) and y.device.type == device
    assert not torch.allclose(y[0], y[1])  # each image gets its own random draw


def test_bad_step_name():
    with pytest.raises(ValueError, match="augmentation step 'sharpen'"):
        data_aug.build_augment(32, only="sharpen")
