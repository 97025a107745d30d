"""Overhead of the emulated npu device against plain CPU PyTorch.

Prints, for a small CNN, the time of one training step (forward, backward, SGD step) on ``npu`` divided by
the same step on ``cpu`` at batch 8, 32 and 128, and the emulator's cost per op (small tensors, where the
kernel itself is negligible). Intra-op threads are pinned to 1 for stable numbers (``--threads``).

    .venv/bin/python benchmarks/emulator_overhead.py [--steps 20] [--threads 1] [--clock cpu|wall] [--json out.json]

``--clock cpu`` (the default) times with the process's CPU time, which a shared, loaded machine disturbs far
less than wall time (the backward of an ``npu`` step runs on autograd's device thread, so a per-thread clock
would miss it); ``--clock wall`` gives elapsed time.

Targets: <= 1.2x at batch 8, <= 15 us of emulator cost per op in a training step (issue 16); earlier rounds:
<= 1.3x at batch 32, <= 1.1x at batch 128, <= 10 us per op on tiny tensors. The first line says which kernels
served (the C++ kernels of ``ascendify/emulator/ops/cfast.cpp``, or the Python ones with the reason);
``ASCENDIFY_EMULATE_CKERNELS=0`` times the Python kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from torch import nn

import ascendify.emulator as emu

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10),
    )


class Trainer:
    """One model + optimizer + batch on a device; :meth:`step` times one training step."""

    def __init__(self, device: str, batch: int):
        torch.manual_seed(0)
        self.model = small_cnn().to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(batch, 3, 32, 32).to(device)
        self.y = torch.randint(0, 10, (batch,)).to(device)

    def step(self) -> float:
        t0 = clock()
        loss = nn.functional.cross_entropy(self.model(self.x), self.y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        loss.item()
        return clock() - t0


def step_times(batch: int, steps: int) -> tuple[float, float]:
    """Median seconds of one training step on cpu and on npu, measured alternately (the machine's load
    drifts; alternating keeps both sides under the same conditions)."""
    cpu, npu = Trainer("cpu", batch), Trainer("npu", batch)
    for _ in range(3):
        cpu.step()
        npu.step()
    tc, tn = [], []
    for _ in range(steps):
        tc.append(cpu.step())
        tn.append(npu.step())
    return statistics.median(tc), statistics.median(tn)


def ops_per_step(batch: int) -> int:
    """Ops that reach the emulated device in one training step."""
    t = Trainer("npu", batch)
    t.step()
    emu.reset_report()
    t.step()
    return emu.report()["ops_run"]


def _cases(device: str) -> dict:
    a = torch.randn(4, 4, device=device)
    b = torch.randn(4, 4, device=device)
    return {
        "add (functional)": lambda: torch.add(a, b),
        "mul_ (in-place)": lambda: a.mul_(1.0),
        "relu": lambda: torch.relu(a),
        "view": lambda: a.view(16),
        "sum": lambda: a.sum(),
        "mm": lambda: torch.mm(a, b),
    }


def per_op_us(n: int = 2000, rounds: int = 5) -> tuple[dict[str, float], dict[str, float]]:
    """Microseconds per call of a few ops on tiny tensors (best of ``rounds``, cpu and npu alternately)."""
    cases = {"cpu": _cases("cpu"), "npu": _cases("npu")}
    best: dict = {"cpu": {}, "npu": {}}
    for _ in range(rounds):
        for name in cases["cpu"]:
            for dev in ("cpu", "npu"):
                fn = cases[dev][name]
                for _ in range(50):
                    fn()
                t0 = clock()
                for _ in range(n):
                    fn()
                us = (clock() - t0) / n * 1e6
                best[dev][name] = min(best[dev].get(name, us), us)
    return best["cpu"], best["npu"]


def _load() -> str:
    """The 1-minute load average (the machine may be shared: numbers under load are rough)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", default="8,32,128")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                   help="cpu: the process's CPU time (default, robust to load); wall: elapsed time")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    emu.enable()
    print(f"torch {torch.__version__}, intra-op threads: {torch.get_num_threads()}, steps: {args.steps}, "
          f"clock: {args.clock}, load average: {_load()}, kernels: {emu.report()['kernels']}")
    result: dict = {"threads": torch.get_num_threads(), "steps": args.steps, "clock": args.clock, "step": [],
                    "per_op_us": {}, "load_average_start": _load(),
                    "kernels": emu.report()["kernels"]}
    print(f"{'batch':>6} {'cpu ms':>9} {'npu ms':>9} {'ratio':>7} {'ops/step':>9} {'extra/op us':>12}")
    for batch in (int(b) for b in args.batches.split(",")):
        cpu, npu = step_times(batch, args.steps)
        nops = ops_per_step(batch)
        extra = (npu - cpu) / max(nops, 1) * 1e6
        result["step"].append({"batch": batch, "cpu_s": cpu, "npu_s": npu, "ratio": npu / cpu,
                               "ops_per_step": nops, "extra_us_per_op": extra})
        print(f"{batch:>6} {cpu * 1e3:>9.2f} {npu * 1e3:>9.2f} {npu / cpu:>6.2f}x {nops:>9} {extra:>12.1f}")
    cpu_ops, npu_ops = per_op_us()
    print(f"\n{'op (4x4)':<18} {'cpu us':>8} {'npu us':>8} {'extra us':>9}")
    for name in cpu_ops:
        extra = npu_ops[name] - cpu_ops[name]
        result["per_op_us"][name] = {"cpu": cpu_ops[name], "npu": npu_ops[name], "extra": extra}
        print(f"{name:<18} {cpu_ops[name]:>8.1f} {npu_ops[name]:>8.1f} {extra:>9.1f}")
    mean_extra = statistics.mean(v["extra"] for v in result["per_op_us"].values())
    result["mean_extra_us_per_op"] = mean_extra
    print(f"\nmean emulator cost per op: {mean_extra:.1f} us (load average at the end: {_load()})")
    result["load_average_end"] = _load()
    if args.json:
        from ascendify.core.fileio import write_atomic

        write_atomic(args.json, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
