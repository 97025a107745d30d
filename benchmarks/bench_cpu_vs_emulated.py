"""The same ``ascendify bench`` sweep on the CPU and on the emulated NPU, side by side with ratios.

    .venv/bin/python benchmarks/bench_cpu_vs_emulated.py                      # resnet18/50, infer+train, fp32/bf16
    .venv/bin/python benchmarks/bench_cpu_vs_emulated.py --models resnet18 --batch-sizes 2,8 --image-size 64

Each side runs in its own process (``ascendify bench --device cpu`` / ``--device npu`` with no real NPU:
the emulated one), one intra-op thread by default, so the emulator's host-memory tuning does not touch the CPU
side. Prints both tables, the per-configuration ratio (emulated throughput / CPU throughput) and its geometric
mean per mode; ``--json FILE`` keeps everything. Speeds on the emulated NPU are the host's: this measures
the emulator's overhead, never NPU speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def bench(device: str, args, json_path: Path) -> float:
    cmd = [sys.executable, "-m", "ascendify", "bench", "--device", device, "--model", args.models,
           "--mode", args.modes, "--precision", args.precisions, "--batch-size", args.batch_sizes,
           "--image-size", str(args.image_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats), "--threads", str(args.threads), "--json", str(json_path)]
    env = dict(os.environ, COLUMNS=os.environ.get("COLUMNS", "110"))
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--batch-sizes", default="2,8")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    from ascendify import report
    from ascendify.bench import output

    with tempfile.TemporaryDirectory() as tmp:
        cpu_json, npu_json = Path(tmp) / "cpu.json", Path(tmp) / "npu.json"
        t_cpu = bench("cpu", args, cpu_json)
        t_npu = bench("npu", args, npu_json)
        a, b = output.load_records(cpu_json), output.load_records(npu_json)
    rows = output.compare(a, b)
    report.print_table(output.compare_columns("cpu", "emulated npu"), rows,
                       title="A = cpu, B = emulated npu (host speed, not NPU speed): B/A = emulator overhead")
    summary = {}
    for mode in args.modes.split(","):
        ratios = [r["throughput_ratio"] for r in rows if r["mode"] == mode and r["throughput_ratio"]]
        if ratios:
            gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            summary[mode] = {"geomean_emulated_over_cpu": gm, "min": min(ratios), "max": max(ratios),
                             "n": len(ratios)}
            print(f"{mode}: emulated/cpu throughput geometric mean {gm:.3f} (min {min(ratios):.3f}, "
                  f"max {max(ratios):.3f}, {len(ratios)} configurations)")
    print(f"wall: cpu side {t_cpu:.0f} s, emulated side {t_npu:.0f} s; load average {os.getloadavg()[0]:.1f}")
    if args.json:
        report.write_json(args.json, {"cpu": a, "emulated_npu": b, "compare": rows, "summary": summary,
                                      "args": vars(args)})
    json.dumps(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
