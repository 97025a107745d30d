"""The ``--to portable`` output of the example project runs unchanged on the CPU and computes exactly what the
hand-written portable port (``examples/portable_project``) computes, with the same flags and one thread.

The original uses CUDA streams, timing events, ``record_stream``, NVTX ranges, memory statistics and
``torch.cuda.amp.autocast()`` (float16 on CUDA, while ``torch.autocast("cpu")`` defaults to bfloat16): each of
those must come out as code that works on the CPU with the CUDA semantics.
"""

from __future__ import annotations

import math

import pytest
from migrate_run_support import (
    EXAMPLES,
    SCRIPTS,
    comparable,
    hand_port_summary,
    run_script,
    selected_params,
    start,
    start_hand_port,
    summary_of,
)

from ascendify import cli

CUDA_PROJECT = EXAMPLES / "cuda_project"

# (script, extra flags): the tiny default runs, and the AMP path of the ImageNet trainer (float16 autocast
# + GradScaler: the converted autocast must keep CUDA's float16 rather than the CPU's bfloat16 default).
CASES = [(s, ()) for s in SCRIPTS] + [("train_imagenet.py", ("--amp",))]


@pytest.fixture(scope="module")
def portable_tree(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("portable") / "project"
    assert cli.main(["migrate", str(CUDA_PROJECT), "-o", str(out), "--to", "portable", "-q"]) == 0
    started = []
    wanted = selected_params(request, "case")
    for script, extra in [c for c in CASES if c in wanted]:  # start the runs now: they overlap in the background
        cwd = tmp_path_factory.mktemp("run")
        started.append(start(("portable-output", str(out), script, extra),
                             lambda s=script, e=extra, c=cwd: run_script(out, s, e, cwd=c)))
        started.append(start_hand_port("portable_project", script, ("--device", "cpu", *extra)))
    yield out
    for future in started:  # runs no test asked for (deselected) do not start
        future.cancel()


@pytest.mark.parametrize("case", CASES, ids=[" ".join((s, *e)) for s, e in CASES])
def test_portable_output_runs_on_cpu_and_matches_the_hand_port(portable_tree, case):
    script, extra = case
    converted = (portable_tree / script).read_text()
    assert "torch.cuda." not in converted  # every torch.cuda use is mapped, guarded or turned into a `with`
    proc = start(("portable-output", str(portable_tree), script, extra)).result()
    got = summary_of(proc)
    for k, v in got.items():
        assert isinstance(v, (int, float)) and math.isfinite(v), (k, got)
    want = hand_port_summary("portable_project", script, ("--device", "cpu", *extra))
    assert comparable(got) == comparable(want)
    if script == "infer.py":
        assert got["iters"] == 3 and got["latency_ms"] > 0  # timed with the host-clock stand-in for events


def test_portable_infer_keeps_the_accelerator_path(portable_tree):
    """On an accelerator the converted infer.py still uses device streams, timing events and record_stream."""
    text = (portable_tree / "infer.py").read_text()
    assert "torch.Stream() if torch.accelerator.is_available() else torch.cpu.Stream()" in text
    assert "torch.Event(enable_timing=True) if torch.accelerator.is_available() else HostEvent()" in text
    assert "x.record_stream(torch.get_device_module().current_stream())" in text
    assert "with torch.autograd.profiler.record_function(f\"iter{it}\"):" in text
    assert text.count("class HostEvent:") == 1
