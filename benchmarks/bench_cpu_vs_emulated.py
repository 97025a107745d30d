"""The same bench configurations on the CPU and on the emulated NPU, alternated, side by side with ratios.

    .venv/bin/python benchmarks/bench_cpu_vs_emulated.py                      # resnet18/50, infer+train, fp32/bf16
    .venv/bin/python benchmarks/bench_cpu_vs_emulated.py --models resnet18 --batch-sizes 2,8 --image-size 64

One process, one intra-op thread by default: the emulated NPU is enabled first (it must precede any
backward), then every configuration runs on the CPU and right after on the emulated NPU, so a change in the
machine's load hits both sides alike (on a shared machine, two sequential sweeps can differ by 5x from load
alone). Both sides see the emulator's host-memory tuning (glibc thresholds), so the ratio is the emulator's
per-op cost. Prints both results, the ratio emulated/CPU per configuration and its geometric mean per mode;
``--json FILE`` keeps everything. Speeds on the emulated NPU are the host's: this measures the emulator's
overhead, never NPU speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time


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
    from ascendify.bench import BenchConfig, render, resolve, run_one
    from ascendify.bench.device import set_threads

    npu = resolve("npu")  # before any backward
    cpu = resolve("cpu")
    set_threads(args.threads)
    a, b = [], []
    t0 = time.perf_counter()
    loads = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            for prec in args.precisions.split(","):
                for bs in (int(x) for x in args.batch_sizes.split(",")):
                    cfg = BenchConfig(model=model, mode=mode, precision=prec, batch_size=bs,
                                      image_size=args.image_size, steps=args.steps, warmup=args.warmup,
                                      repeats=args.repeats)
                    ra = run_one(cfg, cpu).to_dict()
                    rb = run_one(dataclasses.replace(cfg), npu).to_dict()
                    a.append(ra)
                    b.append(rb)
                    loads.append(os.getloadavg()[0])
                    print(f"{model} {mode} {prec} b{bs}: cpu {ra['throughput'] or 0:.3g}/s, emulated npu "
                          f"{rb['throughput'] or 0:.3g}/s, ratio "
                          f"{(rb['throughput'] or 0) / (ra['throughput'] or float('nan')):.3f}", flush=True)
    rows = render.compare(a, b)
    report.print_table(render.compare_columns("A", "B"), rows,
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
    print(f"wall {time.perf_counter() - t0:.0f} s; load average during the runs {min(loads):.1f}-{max(loads):.1f}"
          f" on {os.cpu_count()} cores, {args.threads} thread(s)")
    if args.json:
        report.write_json(args.json, {"cpu": a, "emulated_npu": b, "compare": rows, "summary": summary,
                                      "args": vars(args), "load_average": loads})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
