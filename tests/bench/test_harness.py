"""The harness: correct timing (warm-up excluded), FLOPs/MFU, AMP, peak memory reset per run, OOM-surviving
sweeps and the largest batch, on the CPU and the emulated npu."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from ascendify.bench import EMULATED_LABEL, BenchConfig, find_max_batch, run_one, sweep  # noqa: E402
from ascendify.bench.harness import percentile  # noqa: E402

QUICK = dict(steps=3, warmup=1, repeats=2, image_size=8)


def test_percentile_interpolates():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 90) == pytest.approx(4.6)
    assert percentile([7.0], 99) == 7.0
    assert percentile(list(reversed(xs)), 0) == 1.0


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_cpu_record_and_exact_flops(cpu, tiny_model_file, mode):
    cfg = BenchConfig(model=f"{tiny_model_file}:linear", mode=mode, batch_size=4, num_classes=10, **QUICK)
    rec = run_one(cfg, cpu)
    assert rec.status == "ok", rec.error
    assert rec.model == "tiny_models.py:linear" and rec.model_spec.endswith("tiny_models.py:linear")
    assert rec.device == "cpu" and rec.emulated is False and rec.label is None
    assert rec.throughput > 0 and len(rec.throughput_spread["repeats"]) == 2
    lat = rec.latency_ms
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    # one linear layer 192 -> 10 at batch 4: 2*B*in*out forward; backward adds the weight gradient only (the
    # input needs no gradient)
    fwd = 2 * 4 * 192 * 10
    assert rec.flops_per_step == (fwd if mode == "infer" else 2 * fwd)
    # no allocator statistics on the CPU: the process's peak resident memory increase, and what was measured
    assert isinstance(rec.peak_memory_bytes, int) and rec.peak_memory_bytes >= 0
    assert rec.peak_memory_measure.startswith("process peak RSS increase")
    assert rec.mfu is None and rec.achieved_tflops > 0


def test_warmup_is_timed_apart(cpu, tiny_model_file):
    rec = run_one(BenchConfig(model=f"{tiny_model_file}:slow_first", mode="infer", batch_size=2, **QUICK), cpu)
    assert rec.status == "ok", rec.error
    assert rec.step_ms_warmup[0] >= 400  # the slow first step is in the warm-up...
    assert rec.latency_ms["p99"] < 300  # ...and not in the measured steps


def test_amp_keeps_fp32_weights_and_scales_fp16(cpu, monkeypatch):
    """fp16 = autocast + GradScaler with fp32 master weights (never model.half())."""
    from ascendify.workloads import models

    seen = {}

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3 * 8 * 8, 4)

        def forward(self, x):
            out = self.fc(x.flatten(1))
            seen["param"], seen["out"] = self.fc.weight.dtype, out.dtype
            return out

    made = []

    def fake_build(name, **kw):
        m = Probe()
        m.ascendify_task, m.ascendify_num_classes, m.ascendify_image_size = "image-classification", 4, 8
        made.append(m)
        return m

    monkeypatch.setattr(models, "build_model", fake_build)
    scaled = []
    real_scale = torch.amp.GradScaler.scale
    monkeypatch.setattr(torch.amp.GradScaler, "scale", lambda self, t: scaled.append(1) or real_scale(self, t))
    for prec, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)):
        scaled.clear()
        rec = run_one(BenchConfig(model="resnet18", mode="train", precision=prec, batch_size=2, **QUICK), cpu)
        assert rec.status == "ok", rec.error
        assert seen == {"param": torch.float32, "out": dtype}, prec
        assert bool(scaled) == (prec == "fp16")
        assert made[-1].fc.weight.dtype == torch.float32


def test_emulated_npu_is_labelled_and_has_memory(npu, tiny_model_file):
    rec = run_one(BenchConfig(model=f"{tiny_model_file}:cnn", mode="train", batch_size=4, **QUICK), npu)
    assert rec.status == "ok", rec.error
    assert rec.device == "npu" and rec.emulated and rec.label == EMULATED_LABEL
    assert rec.peak_memory_bytes > 0 and "emulator's count" in rec.peak_memory_measure
    assert rec.mfu is None and any("emulated" in n for n in rec.notes)  # host speed is not NPU utilisation


def test_sweep_survives_oom_and_resets_peak(npu, tiny_model_file):
    import ascendify.emulator as emu

    emu.settings.update(memory_capacity="8M")
    base = BenchConfig(model=f"{tiny_model_file}:cnn", mode="train", batch_size=4, steps=1, warmup=1, repeats=1,
                       image_size=16, count_flops=False)
    recs = sweep([dataclasses.replace(base, batch_size=b) for b in (4, 64, 4096, 4)], npu)
    assert [r.status for r in recs] == ["ok", "ok", "oom", "ok"]
    assert "out of memory" in recs[2].error.lower()
    small, big, _, small_again = (r.peak_memory_bytes for r in recs)
    assert small < big
    assert small_again == pytest.approx(small, rel=0.05)  # the big run's peak did not leak into the next
    assert torch.npu.memory_allocated() < 64 * 1024  # the OOM'd run released what it held


def test_find_max_batch_on_emulated_capacity(npu, tiny_model_file):
    import ascendify.emulator as emu

    emu.settings.update(memory_capacity="1M")
    base = BenchConfig(model=f"{tiny_model_file}:cnn", mode="train", image_size=16)
    best, probes = find_max_batch(base, npu, start=4)
    assert best is not None and best >= 4
    by_batch = {p.batch_size: p.status for p in probes}
    assert by_batch[best] == "ok" and by_batch.get(best + 1) == "oom"  # bisection ends next to an OOM
    assert any(p.status == "oom" for p in probes)
    assert max(p.peak_memory_bytes for p in probes if p.status == "ok") <= 1 << 20


def test_bad_config_raises():
    with pytest.raises(ValueError, match="precision 'fp8'"):
        BenchConfig(precision="fp8").validate()
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        BenchConfig(batch_size=0).validate()


def test_loader_fed_run_reports_data_time(cpu, tiny_model_file):
    rec = run_one(BenchConfig(model=f"{tiny_model_file}:linear", mode="train", batch_size=4, loader_workers=0,
                              **QUICK), cpu)
    assert rec.status == "ok", rec.error
    assert 0 < rec.data_time_fraction < 1 and rec.data_ms["total"] > 0


def test_channels_last_on_npu(npu, tiny_model_file):
    rec = run_one(BenchConfig(model=f"{tiny_model_file}:cnn", mode="train", batch_size=2, channels_last=True,
                              steps=1, warmup=1, repeats=1, image_size=8, count_flops=False), npu)
    assert rec.status == "ok", rec.error
    assert rec.channels_last and not rec.compile


@pytest.mark.parametrize("where", ["cpu", "npu"])
def test_compile_reports_compile_time_apart_and_the_speedup_over_eager(request, tiny_model_file, where):
    from ascendify.bench import render

    dev = request.getfixturevalue(where)
    rec = run_one(BenchConfig(model=f"{tiny_model_file}:linear", mode="train", batch_size=4, compile=True,
                              steps=2, warmup=0, repeats=2, image_size=8, count_flops=False), dev)
    assert rec.status == "ok", rec.error
    assert rec.compile and rec.compile_backend == "inductor"  # the emulated npu compiles with inductor too
    assert len(rec.step_ms_warmup) == 1  # --warmup 0 still compiles outside the timed steps
    assert 0 < rec.compile_ms < rec.step_ms_warmup[0]
    assert rec.eager_throughput > 0 and rec.compile_speedup == pytest.approx(rec.throughput / rec.eager_throughput)
    line = render.compile_line(rec.to_dict())
    assert "compile" in line and "against eager" in line and f"{rec.compile_speedup:.2f}x" in line


def test_mfu_is_flops_rate_over_the_published_peak(tiny_model_file):
    """A device named like an A100 (here the CPU under that name): MFU = FLOPs/step x steps/s / peak."""
    from ascendify.bench import BenchDevice
    from ascendify.core import knowledge

    dev = BenchDevice("cpu", "NVIDIA A100-SXM4-80GB")
    rec = run_one(BenchConfig(model=f"{tiny_model_file}:linear", mode="infer", precision="bf16", batch_size=4,
                              **QUICK), dev)
    peak = knowledge.device_peak("NVIDIA A100-SXM4-80GB", "bf16")
    assert peak and rec.peak_tflops == pytest.approx(peak / 1e12)
    assert rec.mfu == pytest.approx(rec.flops_per_step * rec.throughput / 4 / peak)
    assert 0 < rec.mfu < 1e-3  # a tiny layer on a CPU is nowhere near an A100's peak


def test_a_known_failure_says_what_to_do():
    import torch

    from ascendify.bench import harness

    with pytest.raises(ValueError) as e:  # what a batch of 1 does to a ResNet's last BatchNorm in training
        torch.nn.BatchNorm1d(4).train()(torch.randn(1, 4))
    hint = harness._hint(e.value, BenchConfig(model="resnet18", mode="train", batch_size=1))
    assert "use a batch size of 2 or more, or --mode infer" in hint
    assert harness._hint(RuntimeError("something else"), BenchConfig(model="resnet18")) == ""
