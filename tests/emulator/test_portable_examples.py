"""Device-agnostic code runs unchanged under ``ascendify emulate`` and computes what it computes on the CPU.

The hand-written ``examples/portable_project`` and the ``ascendify migrate --to portable`` output of
``examples/cuda_project`` call ``torch.accelerator.synchronize()``, ``torch.accelerator.memory_allocated()``,
``reset_peak_memory_stats()``, ``empty_cache()``, ``torch.get_device_module()``: each run on the emulated npu
must finish and give the CPU's numbers (tiny flags, one thread; the CPU reference is the hand-written port
run with ``--device cpu``, which tests/migrate shows equal to the converted code on the CPU). And the
``--unsafe`` DataParallel-to-DDP rewrite must give code that runs on several emulated devices.

Runs start in the background (two at a time: most of a tiny run is importing torch) when the module starts.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from example_runs import EXAMPLES, SCRIPTS, TINY, clean_env, summary_of

from ascendify import cli

pytestmark = pytest.mark.slow

RUN_FLAGS = {**TINY, "train_imagenet.py": [*TINY["train_imagenet.py"], "--checkpoint", ""]}
EMULATE = (sys.executable, "-m", "ascendify", "emulate", "-q")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=400, env=clean_env())


def _comparable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "latency_ms"}  # a timing


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this module, started at once: {key: Future of CompletedProcess}."""
    base = tmp_path_factory.mktemp("portable-emulated")
    portable = base / "converted"
    assert cli.main(["migrate", str(EXAMPLES / "cuda_project"), "-o", str(portable), "--to", "portable", "-q"]) == 0
    unsafe = base / "unsafe-npu"
    assert cli.main(["migrate", str(EXAMPLES / "cuda_project"), "-o", str(unsafe), "--to", "npu", "--unsafe",
                     "-q"]) == 0
    hand = EXAMPLES / "portable_project"
    jobs: dict[tuple, tuple[list[str], Path]] = {}
    for name in SCRIPTS:
        flags = RUN_FLAGS[name]
        for key, argv in ((("cpu", name), [sys.executable, str(hand / name), *flags, "--device", "cpu"]),
                          (("hand", name), [*EMULATE, "--", "python", str(hand / name), *flags]),
                          # one device: the original's nn.DataParallel branch stays in (unsafe fix, see below)
                          (("converted", name), [*EMULATE, "--devices", "1", "--", "python", str(portable / name),
                                                 *flags])):
            where = base / "-".join(key)
            where.mkdir()
            jobs[key] = (argv, where)
    where = base / "unsafe-run"
    where.mkdir()
    # two emulated devices: the original's `elif torch.cuda.device_count() > 1: nn.DataParallel(model)` branch
    jobs[("unsafe", "train_imagenet.py")] = (
        [*EMULATE, "--devices", "2", "--", "python", str(unsafe / "train_imagenet.py"),
         *RUN_FLAGS["train_imagenet.py"]], where)
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {key: pool.submit(_run, argv, cwd) for key, (argv, cwd) in jobs.items()}
    yield {"futures": futures, "unsafe_tree": unsafe}
    for f in futures.values():
        f.cancel()
    pool.shutdown(wait=True)


@pytest.mark.parametrize("name", SCRIPTS)
def test_hand_written_portable_code_on_the_emulator_matches_the_cpu(runs, name):
    cpu = summary_of(runs["futures"][("cpu", name)].result())
    emulated = runs["futures"][("hand", name)].result()
    assert _comparable(summary_of(emulated)) == _comparable(cpu)


@pytest.mark.parametrize("name", SCRIPTS)
def test_migrated_portable_code_on_the_emulator_matches_the_cpu(runs, name):
    cpu = summary_of(runs["futures"][("cpu", name)].result())
    proc = runs["futures"][("converted", name)].result()
    assert _comparable(summary_of(proc)) == _comparable(cpu)
    if name == "train_imagenet.py":  # device memory statistics came from the emulated allocator
        peaks = [line for line in proc.stdout.splitlines() if "peak" in line and "MiB" in line]
        assert peaks and not any("peak GPU memory 0.0 MiB" in line or "peak device memory 0.0 MiB" in line
                                 for line in peaks), peaks


def test_unsafe_data_parallel_rewrite_runs_on_several_emulated_devices(runs):
    source = (runs["unsafe_tree"] / "train_imagenet.py").read_text()
    assert "nn.DataParallel(model)" not in source and "is_initialized() else model" in source
    proc = runs["futures"][("unsafe", "train_imagenet.py")].result()
    assert "using nn.DataParallel over 2" in proc.stdout  # the branch ran
    summary = summary_of(proc)
    assert summary["steps"] == 6
    cpu = summary_of(runs["futures"][("cpu", "train_imagenet.py")].result())
    assert _comparable(summary) == _comparable(cpu)  # one process: the model itself, on npu:0
