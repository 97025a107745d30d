"""How fast is ``ascendify migrate``? Converts a tree end to end (parse, rules, writes, reports) and prints
files/s, lines/s and lines/s per core, with one job and with ``--jobs 2``.

    python benchmarks/migrate_speed.py              # a generated tree: the CUDA examples and test fixtures
                                                    # replicated to >= 100 files
    python benchmarks/migrate_speed.py PATH [--target npu|portable]
    python benchmarks/migrate_speed.py --torch-sources   # PyTorch's own cuda/amp/distributed/nn/utils packages
                                                         # (read from the installed torch, never imported)

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, help="tree to convert (default: a generated one)")
    ap.add_argument("--min-files", type=int, default=100)
    ap.add_argument("--torch-sources", action="store_true",
                    help="convert a copy of the installed torch package's cuda, amp, distributed, nn, utils folders")
    ap.add_argument("--target", default="npu", choices=("npu", "portable"))
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
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
