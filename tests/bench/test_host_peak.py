"""The CPU's peak memory in ``bench``: the increase of the process's peak resident memory over a run, never null,
and the record says which measure gave it."""

import sys

import pytest

MIB = 1 << 20


def _fresh(body: str) -> None:
    """Run ``body`` in a fresh interpreter: a peak measured in the test process would depend on what earlier tests
    made resident there (a heap that already holds freed pages takes a new buffer without growing)."""
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        from ascendify.bench.device import HostPeak, _maxrss_bytes
        MIB = 1 << 20
        def _touch(n):
            return b"\\x01" * n  # written, so resident (a calloc'd buffer may not be)
        """) + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_peak_of_a_run_counts_what_it_made_resident_even_after_a_bigger_earlier_peak():
    _fresh("""
        earlier = _touch(96 * MIB)
        del earlier  # the process peaked at +96 MiB before this run
        peak = HostPeak()
        peak.start()
        held = _touch(32 * MIB)
        got = peak.peak_bytes()
        del held
        assert "VmHWM" in peak.measure, peak.measure
        assert 30 * MIB <= got < 90 * MIB, got  # this run's 32 MiB (plus noise), not the earlier 96 MiB
        """)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS is Linux's")
def test_without_a_resettable_peak_it_falls_back_to_ru_maxrss(tmp_path):
    _fresh(f"""
        HostPeak.RESET = {str(tmp_path / "missing" / "clear_refs")!r}
        peak = HostPeak()
        peak.start()
        base = peak.peak_bytes()
        headroom = max(_maxrss_bytes() - HostPeak._status_kib("VmRSS") * 1024, 0)
        held = _touch(headroom + 64 * MIB)  # beyond the process's earlier peak: ru_maxrss must grow
        got = peak.peak_bytes()
        del held
        assert "ru_maxrss" in peak.measure and "lower bound" in peak.measure, peak.measure
        assert base >= 0 and got >= 48 * MIB, (base, got)
        """)


# a fresh process: the first training step of a process grows it by some 80 MiB that stays resident (thread pools,
# the autograd engine, library kernels); a run's figure must not carry it, nor the process's whole peak
_FRESH = """
import json, torch.nn as nn
from ascendify.bench import device, harness
dev = device.BenchDevice.open("cpu")
cfg = harness.BenchConfig(model=%r + ":mlp", mode="train", batch_size=8, steps=2, warmup=1, repeats=1,
                          count_flops=False)
first, second = (harness.run_one(cfg, dev) for _ in range(2))
import torch
rec = harness.bench_module(nn.Linear(16, 4), (torch.randn(8, 16),), device="cpu", steps=2, warmup=1, repeats=1,
                           count_flops=False)
print(json.dumps({"runs": [r.peak_memory_bytes for r in (first, second)], "module": rec["peak_memory_bytes"],
                  "measure": rec["peak_memory_measure"], "warmed": sorted(map(str, device._HOST_WARMED))}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_the_first_run_of_a_process_carries_no_one_off_growth(tmp_path):
    import json
    import subprocess

    (tmp_path / "mlp_models.py").write_text(
        "import torch.nn as nn\n\ndef mlp(num_classes=10, image_size=8):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, 64), nn.ReLU(),\n"
        "                         nn.Linear(64, num_classes))\n"
    )
    code = _FRESH % str(tmp_path / "mlp_models.py")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    first, second = out["runs"]
    # the model, its gradients and momentum are well under 1 MiB: both runs a few MiB at most, alike
    assert first < 16 * MIB and second < 16 * MIB, out
    assert abs(first - second) < 12 * MIB, out
    # bench_module measures its own run too (it took the process's whole peak RSS, some 300 MiB)
    assert out["measure"].startswith("process peak RSS increase") and out["module"] < 16 * MIB, out
    assert out["warmed"] == ["None"]  # once per process and autocast dtype
