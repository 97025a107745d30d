"""The CPU's peak memory in ``bench``: the increase of the process's peak resident memory over a run, never null,
and the record says which measure gave it."""

import sys

import pytest

from ascendify.bench.device import HostPeak, _maxrss_bytes

MIB = 1 << 20


def _touch(n: int) -> bytes:
    return b"\x01" * n  # written, so resident (a calloc'd buffer may not be)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_peak_of_a_run_counts_what_it_made_resident_even_after_a_bigger_earlier_peak():
    earlier = _touch(96 * MIB)
    del earlier  # the process peaked at +96 MiB before this run
    peak = HostPeak()
    peak.start()
    held = _touch(32 * MIB)
    got = peak.peak_bytes()
    del held
    assert "VmHWM" in peak.measure
    assert 30 * MIB <= got < 90 * MIB  # this run's 32 MiB (plus noise), not the earlier 96 MiB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS is Linux's")
def test_without_a_resettable_peak_it_falls_back_to_ru_maxrss(monkeypatch, tmp_path):
    monkeypatch.setattr(HostPeak, "RESET", str(tmp_path / "missing" / "clear_refs"))
    peak = HostPeak()
    peak.start()
    base = peak.peak_bytes()
    headroom = max(_maxrss_bytes() - HostPeak._status_kib("VmRSS") * 1024, 0)
    held = _touch(headroom + 64 * MIB)  # beyond the process's earlier peak: ru_maxrss must grow
    got = peak.peak_bytes()
    del held
    assert "ru_maxrss" in peak.measure and "lower bound" in peak.measure
    assert base >= 0 and got >= 48 * MIB
