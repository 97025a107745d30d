"""What ``ascendify advise`` costs over a plain emulated run of the same steps.

Prints two ratios of CPU time (less disturbed by other work on the machine than wall time, which is printed
too), each from paired, interleaved rounds (median, min, max):

  1. **the whole command**: ``ascendify advise --steps N -q -- python train_gpt.py ... --steps BIG`` against
     ``ascendify run --to npu -- python train_gpt.py ... --steps N`` (the bundled example GPT on the emulated NPU):
     both run N training steps from a fresh process (start-up, imports, the emulator, the model, the steps);
     advise adds its tracer, the analysis and its outputs;
  2. **the steps alone**: in one process on the emulated NPU, a training step of the same GPT timed with and
     without the tracer recording it (what the tracer adds per op).

    python benchmarks/advise_overhead.py [--rounds 5] [--steps 6] [--d-model 128] [--json FILE]

The target is <= 1.3x for (1). Say how loaded the machine was (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "cuda_project")


def gpt_args(a, steps: int) -> list[str]:
    return ["--steps", str(steps), "--batch-size", str(a.batch), "--seq-len", str(a.seq), "--vocab-size", "512",
            "--d-model", str(a.d_model), "--n-layers", str(a.layers), "--n-heads", "4", "--dataset-tokens", "65536",
            "--precision", "fp32", "--log-interval", "1000"]


def timed(cmd: list[str], cwd: str) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of a child process; CPU time is what a loaded machine disturbs least."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=dict(os.environ, COLUMNS="80"))
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu


def whole_command(a, tmp: str) -> list[float]:
    exe = [sys.executable, "-m", "ascendify"]
    script = os.path.join(EXAMPLE, "train_gpt.py")
    plain = [*exe, "run", "--to", "npu", "-q", "--", "python", script, *gpt_args(a, a.steps)]
    advise = [*exe, "advise", "--steps", str(a.steps), "-q", "--json", os.path.join(tmp, "a.json"), "--",
              "python", script, *gpt_args(a, 100000)]
    timed(plain, tmp)  # warm: caches, the C++ kernels' build
    ratios, walls = [], []
    for r in range(a.rounds):
        pair = [("plain", plain), ("advise", advise)]
        if r % 2:
            pair.reverse()
        t = {k: timed(c, tmp) for k, c in pair}
        ratios.append(t["advise"][1] / t["plain"][1])
        walls.append(t["advise"][0] / t["plain"][0])
        print(f"  round {r + 1}: CPU plain {t['plain'][1]:.2f} s, advise {t['advise'][1]:.2f} s, ratio "
              f"{ratios[-1]:.3f}  (wall {t['plain'][0]:.1f} / {t['advise'][0]:.1f} s, {walls[-1]:.3f})", flush=True)
    print(f"  wall-clock ratio: median {statistics.median(walls):.3f} (min {min(walls):.3f}, max {max(walls):.3f})")
    return ratios


def steps_alone(a) -> list[float]:
    import ascendify.emulator as emu

    emu.enable()
    import torch

    torch.set_num_threads(a.threads)  # one intra-op thread: the other work on the machine disturbs it less
    sys.path.insert(0, EXAMPLE)
    from models import GPT  # the bundled example's model

    from ascendify.advise.trace import Tracer

    torch.manual_seed(0)
    model = GPT(vocab_size=512, seq_len=a.seq, d_model=a.d_model, n_layers=a.layers, n_heads=4).to("npu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 512, (a.batch, a.seq), device="npu")

    def step():
        _, loss = model(x, x)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    ratios = []
    for r in range(a.rounds):
        t = {}
        for side in (("plain", "traced") if r % 2 == 0 else ("traced", "plain")):
            tr = Tracer().start() if side == "traced" else None
            t0 = time.process_time()
            for _ in range(a.steps):
                step()
            t[side] = (time.process_time() - t0) / a.steps
            if tr is not None:
                n = len(tr.stop().ops) / a.steps
        ratios.append(t["traced"] / t["plain"])
        print(f"  round {r + 1}: CPU plain {t['plain'] * 1e3:.1f} ms/step, traced {t['traced'] * 1e3:.1f} ms/step "
              f"({n:,.0f} ops/step), ratio {ratios[-1]:.3f}", flush=True)
    return ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--part", choices=("both", "command", "steps"), default="both")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads for the steps part (default 1)")
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args()
    import tempfile

    out = {"config": vars(a), "load_before": os.getloadavg()}
    print(f"load average {out['load_before'][0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for part, fn in (("command", lambda: whole_command(a, tmp)), ("steps", lambda: steps_alone(a))):
            if a.part not in ("both", part):
                continue
            print(f"{part}: advise / plain emulated run ({a.steps} steps, GPT d={a.d_model} L={a.layers} "
                  f"T={a.seq} B={a.batch})")
            rs = fn()
            out[part] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "ratios": rs}
            print(f"  {part}: median {statistics.median(rs):.3f}x (min {min(rs):.3f}, max {max(rs):.3f}, "
                  f"{len(rs)} rounds)")
    out["load_after"] = os.getloadavg()
    print(f"load average {out['load_after'][0]:.2f} after")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
