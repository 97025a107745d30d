"""How fast is ``ascendify migrate``? Converts a tree end to end (parse, rules, writes, reports) and prints
files/s, lines/s and lines/s per core, with one job and with ``--jobs 2``.

    python benchmarks/migrate_speed.py              # a generated tree: the CUDA examples and test fixtures
                                                    # replicated to >= 100 files
    python benchmarks/migrate_speed.py PATH [--target npu|portable]
    python benchmarks/migrate_speed.py --torch-sources   # PyTorch's own cuda/amp/distributed/nn/utils packages
                                                         # (read from the installed torch, never imported)
    python benchmarks/migrate_speed.py PATH --baseline OLD/src   # this tree's ascendify against another
                                                         # checkout's (e.g. `git archive REV src | tar -x -C OLD`),
                                                         # runs interleaved in the same session: median, spread, ratio

The generated tree mixes CUDA-heavy training scripts with the small helper modules of the examples, as a real
project does. Huawei's tool needs ~4 s for a 50-line file; the goal here is >= 5,000 lines/s per core.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "examples" / "cuda_project", REPO / "tests" / "migrate" / "fixtures"]


def generate(dest: Path, min_files: int = 100) -> Path:
    files = [p for root in SOURCES if root.exists() for p in sorted(root.rglob("*.py"))]
    if not files:
        sys.exit("no example files found to build a tree from")
    copies = -(-min_files // len(files))
    for i in range(copies):
        for p in files:
            target = dest / f"copy{i:03d}" / p.parent.name / p.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
    return dest


def count(tree: Path) -> tuple[int, int]:
    files = [p for p in tree.rglob("*.py")]
    return len(files), sum(p.read_bytes().count(b"\n") for p in files)


def run_once(tree: Path, out: Path, jobs: int, target: str) -> float:
    from ascendify import cli

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out.parent / f"{out.name}_migration_report", ignore_errors=True)
    c0 = os.times()
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["migrate", str(tree), "-o", str(out), "--to", target, "--jobs", str(jobs), "-q"])
    dt = time.perf_counter() - t0
    c1 = os.times()
    if rc not in (0, 3):
        sys.exit(f"migrate failed with exit code {rc}")
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + (
        c1.children_system - c0.children_system)
    return dt, cpu


def child(argv: list[str]) -> int:
    """``--child TREE OUT JOBS TARGET``: one timed run in this process (the parent chose PYTHONPATH)."""
    import json

    tree, out, jobs, target = argv
    run_once(Path(tree), Path(out + "-warm"), 1, target)  # imports, caches
    wall, cpu = run_once(Path(tree), Path(out), int(jobs), target)
    print(json.dumps({"wall": wall, "cpu": cpu}))
    return 0


def compare(tree: Path, tmp: Path, baseline: Path, target: str, repeat: int, n_lines: int) -> None:
    """The same tree converted by the baseline's code and this checkout's, alternately, ``repeat`` times each
    for 1 and 2 jobs; each run in a fresh process after a warm-up run in it (imports and caches loaded)."""
    import json
    import statistics
    import subprocess

    sides = {"baseline": str(baseline), "this": str(REPO / "src")}

    def one(side: str, jobs: int) -> dict:
        env = {**os.environ, "PYTHONPATH": sides[side]}
        code = ("import sys, runpy; sys.argv = ['x', '--child', *sys.argv[1:]]; "
                f"runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__')")
        p = subprocess.run([sys.executable, "-c", code, str(tree), str(tmp / f"o-{side}"), str(jobs), target],
                           env=env, capture_output=True, text=True, check=True)
        return json.loads(p.stdout.strip().splitlines()[-1])

    for jobs in (1, 2):
        runs: dict[str, list[dict]] = {"baseline": [], "this": []}
        for _ in range(repeat):
            for side in runs:
                runs[side].append(one(side, jobs))
        med = {}
        for side, rs in runs.items():
            walls = [r["wall"] for r in rs]
            cpus = [r["cpu"] for r in rs]
            med[side] = statistics.median(walls)
            print(f"jobs={jobs} {side:8}: wall median {med[side]:.2f} s (min {min(walls):.2f}, max {max(walls):.2f})"
                  f"  {n_lines / med[side]:,.0f} lines/s  | CPU median {statistics.median(cpus):.2f} s  "
                  f"{n_lines / statistics.median(cpus):,.0f} lines/s per core")
        print(f"jobs={jobs} speed-up this/baseline (wall medians): {med['baseline'] / med['this']:.2f}x")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, help="tree to convert (default: a generated one)")
    ap.add_argument("--min-files", type=int, default=100)
    ap.add_argument("--torch-sources", action="store_true",
                    help="convert a copy of the installed torch package's cuda, amp, distributed, nn, utils folders")
    ap.add_argument("--target", default="npu", choices=("npu", "portable"))
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    ap.add_argument("--baseline", type=Path, help="another checkout's src/ folder: compare its speed with this one's")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.torch_sources:
            import importlib.util

            spec = importlib.util.find_spec("torch")
            if spec is None:
                sys.exit("torch is not installed")
            root = Path(next(iter(spec.submodule_search_locations)))
            tree = tmp / "torch_sources"
            for sub in ("cuda", "amp", "distributed", "nn", "utils"):
                shutil.copytree(root / sub, tree / sub, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            tree = args.path or generate(tmp / "tree", args.min_files)
        n_files, n_lines = count(tree)
        kind = "torch sources" if args.torch_sources else "given" if args.path else "generated"
        print(f"tree: {n_files} Python files, {n_lines} lines ({kind}); "
              f"target {args.target}; {os.cpu_count()} CPUs")
        if args.baseline:
            compare(tree, tmp, args.baseline.resolve(), args.target, args.repeat, n_lines)
            print(f"load average: {os.getloadavg()[0]:.1f} (other work on the machine slows both sides alike)")
            return 0
        run_once(tree, tmp / "warm", 1, args.target)  # imports, caches
        for jobs in (1, 2):
            runs = [run_once(tree, tmp / f"out{jobs}", jobs, args.target) for _ in range(args.repeat)]
            wall = min(r[0] for r in runs)
            cpu = min(r[1] for r in runs)
            print(f"jobs={jobs}: wall {wall:.2f} s  {n_files / wall:,.0f} files/s  {n_lines / wall:,.0f} lines/s  "
                  f"| CPU {cpu:.2f} s  {n_lines / cpu:,.0f} lines/s per core")
        print(f"load average: {os.getloadavg()[0]:.1f} (wall figures drop on a busy machine; CPU figures do not)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
