"""benchmarks/dump_overhead.py --breakdown runs and its parts are consistent (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascendify.precision import stats_kernel

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dump_overhead.py"


@pytest.mark.skipif(stats_kernel.ext() is None, reason="needs the statistics kernel's Python module (a C compiler)")
def test_the_breakdown_worker_reports_every_part_of_the_extra_time():
    p = subprocess.run([sys.executable, str(SCRIPT), "--worker", "breakdown", "--batch", "1", "--seq", "4",
                        "--d-model", "32", "--layers", "1", "--rounds", "3", "--iters", "1"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["variant"] == "breakdown" and r["rounds"] == 3 and r["base_s"] > 0
    assert set(r["parts"]) == {"extra", "kernel", "writer", "mechanism", "python"}
    for k in r["parts"]:
        assert r["parts_q1"][k] <= r["parts"][k] <= r["parts_q3"][k]
    assert r["parts"]["extra"] > 0  # a dump always costs something over the plain forward
