"""Cost of the collective check (``ascendify.emulator.distributed.desync``) on a DDP training step.

Starts 2 processes on the emulated ``npu`` (``hccl`` over gloo). Each builds two ``hccl`` groups over the same
ranks, one checked (the default) and one with the check off (``ASCENDIFY_CHECK_COLLECTIVES=0`` while it is
made), and the same small model wrapped in DDP on each; then times training steps alternately on the two (the
machine's load drifts: alternating keeps both sides under the same conditions). Rank 0 prints the median step
time of each side, the spread (min-max over ``--repeats`` blocks of ``--steps`` steps) and the ratio.

``--clock cpu`` (the default) times with the process's CPU time (all its threads: the check's watchdog
included), which a shared, loaded machine disturbs far less than wall time, and which leaves out the time a
rank waits for the other; ``--clock wall`` gives elapsed time.

    .venv/bin/python benchmarks/desync_overhead.py [--steps 30] [--repeats 5] [--batch 8] [--clock cpu|wall]

Target: <= 1.1x.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 16 * 16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
    )


def worker(rank: int, port: str, args) -> None:
    import ascendify.emulator

    ascendify.emulator.enable(self_test=False)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ascendify.emulator.distributed import desync

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    os.environ.pop(desync.ENV, None)
    dist.init_process_group("hccl", rank=rank, world_size=2)
    checked = dist.new_group(backend="hccl")
    os.environ[desync.ENV] = "0"
    unchecked = dist.new_group(backend="hccl")
    os.environ.pop(desync.ENV)
    sides = {}
    for name, group in (("checked", checked), ("unchecked", unchecked)):
        m = DDP(model().npu(), process_group=group)
        sides[name] = (m, torch.optim.SGD(m.parameters(), lr=0.01))
    x = torch.randn(args.batch, 3, 32, 32, device="npu")
    y = torch.randint(0, 10, (args.batch,), device="npu")

    def step(name: str) -> None:
        m, opt = sides[name]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()

    for _ in range(5):
        step("checked")
        step("unchecked")
    times: dict = {"checked": [], "unchecked": []}
    for _ in range(args.repeats):
        for name in ("checked", "unchecked") if _ % 2 == 0 else ("unchecked", "checked"):
            dist.barrier(group=unchecked)
            clock = time.process_time if args.clock == "cpu" else time.perf_counter
            t0 = clock()
            for _ in range(args.steps):
                step(name)
            times[name].append((clock() - t0) / args.steps)
    recorded = sum(len(c.seq) for c in (ref() for ref in desync._checkers) if c is not None)
    dist.barrier(group=unchecked)
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "batch": args.batch, "steps": args.steps, "repeats": args.repeats, "clock": args.clock,
            "step_ms": {k: med[k] * 1e3 for k in med},
            "spread_ms": {k: [min(v) * 1e3, max(v) * 1e3] for k, v in times.items()},
            "ratio": med["checked"] / med["unchecked"], "collectives_recorded_rank0": recorded,
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        }
        for k in ("checked", "unchecked"):
            lo, hi = result["spread_ms"][k]
            print(f"{k:>9}: {result['step_ms'][k]:.2f} ms per DDP step ({args.clock} time, median; blocks "
                  f"{lo:.2f}-{hi:.2f})")
        print(f"    ratio: {result['ratio']:.3f}x  ({recorded} collectives recorded on rank 0; "
              f"load average {result['load_average']})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        worker(args.rank, args.port, args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    base = [sys.executable, __file__, "--steps", str(args.steps), "--repeats", str(args.repeats),
            "--batch", str(args.batch), "--clock", args.clock, "--port", port] + (["--json", args.json] if args.json else [])
    procs = [subprocess.Popen(base + ["--rank", str(r)]) for r in (0, 1)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
