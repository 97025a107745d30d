"""The data-pipeline bench: settings grid, measuring real decode work, recommendation, feed verdict,
CPU-side vs device-side augmentation."""

import pytest

torch = pytest.importorskip("torch")

from ascendify.bench import loader as L  # noqa: E402


def test_grid_varies_prefetch_and_persistence_only_with_workers():
    g = L.grid(workers=[0, 2], pin_memory=[False, True], prefetch=[2, 4], persistent=[False, True],
               batch_sizes=[8])
    zero = [s for s in g if s.num_workers == 0]
    assert len(zero) == 2 and all(s.prefetch_factor is None and not s.persistent_workers for s in zero)
    assert len([s for s in g if s.num_workers == 2]) == 2 * 2 * 2
    assert "prefetch_factor" not in zero[0].loader_kwargs()
    assert L.LoaderSetting(2, True, 4, True, 8).label() == "workers=2 batch=8 pin prefetch=4 persistent"


def test_recommend_prefers_fewer_workers_within_tolerance():
    rows = [
        {"status": "ok", "samples_per_s": 100.0, "label": "w0", "setting": {"num_workers": 0, "pin_memory": False}},
        {"status": "ok", "samples_per_s": 400.0, "label": "w2", "setting": {"num_workers": 2, "pin_memory": False}},
        {"status": "ok", "samples_per_s": 410.0, "label": "w4", "setting": {"num_workers": 4, "pin_memory": False}},
        {"status": "error", "samples_per_s": None, "label": "w8", "setting": {"num_workers": 8, "pin_memory": False}},
    ]
    rec = L.recommend(rows)
    assert rec["label"] == "w2" and rec["best_samples_per_s"] == 410.0 and "fewer workers" in rec["why"]
    assert L.recommend(rows, tolerance=0.0)["label"] == "w4"
    assert L.recommend([rows[3]]) is None


def test_feeds_verdicts():
    assert L.feeds(300, 100)["status"] == "ok"
    assert L.feeds(105, 100)["status"] == "warn"
    starve = L.feeds(50, 100)
    assert starve["status"] == "fail" and starve["ratio"] == 0.5 and "starves" in starve["verdict"]
    assert L.feeds(50, None) is None


def test_synthetic_jpegs_decode_and_augment():
    ds = L.SyntheticJpegs(4, source_size=48, image_size=24, augment="cpu")
    x, y = ds[0]
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32 and 0 <= y < 10
    raw = L.SyntheticJpegs(4, source_size=48, image_size=24, augment="device")
    xr, _ = raw[0]
    assert xr.dtype == torch.uint8 and xr.shape == (3, 27, 27)  # decoded and resized, not augmented
    assert len(ds._jpegs[0]) > 500  # really JPEG bytes to decode


def test_measure_and_sweep_on_cpu():
    ds = L.SyntheticJpegs(12, source_size=40, image_size=24, augment="none")
    rows = L.loader_sweep(ds, L.grid(workers=[0], batch_sizes=[4]), batches=3, epochs=2)
    assert rows[0]["status"] == "ok" and rows[0]["samples_per_s"] > 0
    assert rows[0]["samples"] == 4 * 3 * 2 - 4  # every batch after the first one counted
    bad = L.loader_sweep(ds, [L.LoaderSetting(batch_size=64)], batches=2)
    assert bad[0]["status"] == "error" and "fewer than one batch" in bad[0]["error"]


def test_image_folder(tmp_path):
    from PIL import Image

    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(2):
            Image.new("RGB", (20, 16), (i * 100, 50, 200)).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    ds = L.ImageFolder(tmp_path, image_size=16, augment="none")
    assert len(ds) == 4 and ds.classes == ["cat", "dog"] and ds[3][1] == 1
    assert ds[0][0].shape == (3, 18, 18)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no images found"):
        L.ImageFolder(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="not a folder"):
        L.ImageFolder(tmp_path / "missing")


def test_augmentation_compare_on_emulated_npu(npu):
    out = L.compare_augmentation(
        lambda augment: L.SyntheticJpegs(8, source_size=40, image_size=24, augment=augment),
        L.LoaderSetting(0, False, None, False, 4), device=npu, image_size=24, batches=2, epochs=1)
    assert out["cpu"]["samples_per_s"] > 0 and out["device"]["samples_per_s"] > 0
    assert out["speedup_device_over_cpu"] == pytest.approx(
        out["device"]["samples_per_s"] / out["cpu"]["samples_per_s"])
