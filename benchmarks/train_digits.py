"""The trainer's accuracy target, and the emulated NPU's curve against the CPU's.

Runs ``ascendify train --model resnet18 --data digits --epochs 5`` on the CPU and on the emulated NPU (two
processes, side by side, one thread each), then ``compare --curves`` on their histories. Prints the validation
accuracy per epoch, the wall time of each run and the curve verdict. Target: >= 95% validation accuracy within
5 epochs, and the same curve on both devices.

    python benchmarks/train_digits.py [--out DIR] [--epochs 5] [--model resnet18]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--amp", default="off")
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="train_digits."))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs, started = {}, time.perf_counter()
    for device in ("cpu", "npu"):
        cmd = [sys.executable, "-m", "ascendify", "train", "--model", a.model, "--data", "digits", "--epochs",
               str(a.epochs), "--device", device, "--amp", a.amp, "--out", str(out / device / "run"), "-q"]
        (out / device).mkdir(parents=True, exist_ok=True)
        log = open(out / f"{device}.log", "w")  # noqa: SIM115 - closed when the process ends
        procs[device] = (subprocess.Popen(cmd, env=env, stderr=log, stdout=log), time.perf_counter())
    walls = {}
    for device, (p, t0) in procs.items():
        if p.wait() != 0:
            tail = (out / f"{device}.log").read_text()[-3000:]
            print(f"{device} run failed (exit {p.returncode}):\n{tail}")
            return 1
        walls[device] = time.perf_counter() - t0
    from ascendify.precision.curves import compare_curves

    hist = {d: json.loads((out / d / "run" / "history.json").read_text()) for d in procs}
    print(f"resnet18 on digits, {a.epochs} epochs, amp {a.amp} (outputs in {out})")
    print("epoch  val_acc cpu  val_acc emulated-npu")
    for c, n in zip(hist["cpu"], hist["npu"], strict=True):
        print(f"{c['epoch']:>5}  {100 * c['val_acc']:>10.2f}%  {100 * n['val_acc']:>10.2f}%")
    r = compare_curves(out / "cpu" / "run" / "history.json", out / "npu" / "run" / "history.json",
                       tolerance=0.01)
    print(f"wall time: cpu {walls['cpu']:.0f}s, emulated npu {walls['npu']:.0f}s "
          f"(ratio {walls['npu'] / walls['cpu']:.2f}x; both in {time.perf_counter() - started:.0f}s)")
    print(f"curves (tolerance 1%): {r.verdict}" + (f", first outside: {r.first}" if r.first else ""))
    best = max(h["val_acc"] for h in hist["cpu"])
    print(f"target >= 95% validation accuracy: {'met' if best >= 0.95 else 'NOT met'} ({100 * best:.2f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
