"""Speed of ``ascendify doctor --explain`` on a long log: the streamed scan with its literal-word prefilter against
matching every known-error pattern on every line (what it did before, on the first 200,000 lines only).

Prints, for a log of N progress lines with errors at its end, the median seconds of each (interleaved rounds, with
the spread), lines per second, and the ratio; both sides must find the same matches.

    python benchmarks/explain_speed.py [--lines 100000] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time

from ascendify.doctor import explain


def make_log(n: int) -> str:
    lines = [f"2025-01-01 12:00:{i % 60:02d} INFO step {i} loss {1 / (i + 1):.4f} lr 0.001 tokens/s {1000 + i}"
             for i in range(n)]
    lines += ["EI0006: Getting socket times out", "RuntimeError: NPU function error: call aclnnNonzero failed, "
              "error code:507035"]
    return "\n".join(lines) + "\n"


def every_pattern_on_every_line(text: str) -> list[tuple[str, int]]:
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        for entry, pats in explain._compiled():
            if any(p.search(line) for p in pats):
                hits.append((entry["id"], n))
    return hits


def streamed(text: str) -> list[tuple[str, int]]:
    return [(h["entry"]["id"], h["line_no"]) for h in explain.scan(io.StringIO(text)).hits]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    text = make_log(args.lines)
    explain._compiled(), explain._prefilter()  # compiled once, outside the timing
    times: dict[str, list[float]] = {"every pattern, every line": [], "streamed, prefiltered": []}
    found = {}
    for _ in range(args.rounds):
        for name, fn in (("every pattern, every line", every_pattern_on_every_line),
                         ("streamed, prefiltered", streamed)):
            t0 = time.perf_counter()
            found[name] = fn(text)
            times[name].append(time.perf_counter() - t0)
    a, b = found.values()
    assert a == b, (a, b)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.lines + 2:,} lines, {len(a)} matches, {args.rounds} rounds, load average {load:.1f} "
          f"on {os.cpu_count()} cores")
    out = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        out[name] = {"median_s": med, "min_s": min(ts), "max_s": max(ts), "lines_per_s": (args.lines + 2) / med}
        print(f"  {name:28s} {med:8.3f} s  ({min(ts):.3f}-{max(ts):.3f})  {(args.lines + 2) / med:12,.0f} lines/s")
    ratio = out["every pattern, every line"]["median_s"] / out["streamed, prefiltered"]["median_s"]
    print(f"  speed-up: {ratio:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lines": args.lines + 2, "load": load, "ratio": ratio, **out}, f, indent=2)


if __name__ == "__main__":
    main()
