"""The bench step's headline when one side was not benched: said so, never a speed of 0."""

from __future__ import annotations

import json
from pathlib import Path

from ascendify.port.jobs import Job
from ascendify.port.options import Context
from ascendify.port.stages.bench import read

from .port_support import make_context


def _ctx(tmp_path: Path) -> Context:
    return make_context(tmp_path, tmp_path / "p", tmp_path / "m", ["python", "t.py"], "emulated", "no NPU here")


def _target_bench(tmp_path: Path) -> Job:
    (tmp_path / "bench" / "npu").mkdir(parents=True)
    (tmp_path / "bench" / "npu" / "bench.json").write_text(json.dumps({
        "emulated": True, "device": {"device_name": "emulated npu"},
        "records": [{"status": "ok", "throughput": 1.83, "model": "GPT", "mode": "train"}]}))
    return Job("bench-target", "bench", ["bench", "--device", "npu"], returncode=0)


def test_cpu_bench_skipped_after_failed_golden_run_is_not_zero_samples(tmp_path):
    cpu = Job("bench-cpu", "bench", ["bench", "--device", "cpu"],
              skipped="needs train-golden, which failed (exit 1)")
    res = read(_ctx(tmp_path), [cpu, _target_bench(tmp_path)], {})
    assert "CPU 0 samples/s" not in res.headline
    assert "CPU not measured (needs train-golden, which failed (exit 1))" in res.headline
    assert "1.83 samples/s" in res.headline and "cpu" not in res.facts["best"]


def test_both_sides_benched_gives_both_speeds(tmp_path):
    (tmp_path / "bench" / "cpu").mkdir(parents=True)
    (tmp_path / "bench" / "cpu" / "bench.json").write_text(json.dumps({
        "records": [{"status": "ok", "throughput": 4.5, "model": "GPT", "mode": "train"}]}))
    cpu = Job("bench-cpu", "bench", ["bench", "--device", "cpu"], returncode=0)
    res = read(_ctx(tmp_path), [cpu, _target_bench(tmp_path)], {})
    assert res.headline.startswith("GPT train step: CPU 4.5 samples/s, ") and "1.83 samples/s" in res.headline
