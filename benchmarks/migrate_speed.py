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

The figures issue 30 and issue 26 ask for, each a whole `ascendify migrate` command as a user runs it (a fresh
process: start, imports, worker processes, conversion, output tree, reports, the summary), wall clock, median
of --repeat runs, with the CPU time of the process and its workers beside it:

    python benchmarks/migrate_speed.py --targets --corpus CORPUS --large-tree MEGATRON [--baseline OLD/src]
        corpus      a 123-file tree of real projects: <= 1.2 s wall on 2 cores, >= 250x msFmkTransplt (292 s)
        large tree  a ~500k-line tree (NVIDIA Megatron-LM): >= 35,000 lines/s
        large file  one generated file of CUDA lines at 0.5, 1, 2 and 5 MB: 5 MB <= 30 s, time linear in size
    python benchmarks/migrate_speed.py --make-corpus DEST ROOT...   # the 123-file corpus from project folders

--make-corpus takes 123 Python files spread evenly over the sorted Python files of the ROOTs (each a checkout
of a public project, outside this repository). The held-out corpus of the issue is not public; the stand-in
used for the figures in docs/migrate.md is ROOTs karpathy/nanoGPT, jzhang38/TinyLlama, pytorch/examples,
huggingface/pytorch-image-models and NVIDIA/Megatron-LM, in that order: 123 files, ~42k lines.
With --baseline each figure is measured for both checkouts, alternately, in the same session.

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


# -- the figures: whole commands in fresh processes -------------------------------------------------
MSFMKTRANSPLT_SECONDS = 292.0  # Huawei's tool on the 123-file held-out corpus, on the 2-core machine (issue 30)
CORPUS_FILES = 123

# statements of real CUDA code (devices, streams, memory, AMP, distributed), repeated with fresh names
BLOCK = """\
x{i} = torch.zeros(8, device="cuda")
y{i} = x{i}.cuda(non_blocking=True)
torch.cuda.synchronize()
if torch.cuda.is_available():
    torch.cuda.empty_cache()
z{i} = torch.randn(4, 4).to("cuda") @ torch.ones(4, 4, device=torch.device("cuda:0"))
mem{i} = torch.cuda.max_memory_allocated() / 2**20
with torch.cuda.amp.autocast():
    w{i} = model(x{i}.cuda())
print(torch.cuda.get_device_name(torch.cuda.current_device()), y{i}.is_cuda)
d{i} = torch.device("cuda", rank)
total{i} = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
if not y{i}.is_cuda:
    y{i} = y{i}.to(d{i})
dev{i} = "cuda" if torch.cuda.is_available() else "cpu"
"""


def large_file(path: Path, megabytes: float) -> Path:
    """One generated Python file of ``megabytes`` MB of CUDA lines."""
    head = ("import torch\nimport torch.distributed as dist\nrank = 0\nmodel = torch.nn.Linear(8, 8).cuda()\n"
            'dist.init_process_group("nccl")\n')
    size = int(megabytes * 1_000_000)
    parts, n, i = [head], len(head), 0
    while n < size:
        block = BLOCK.format(i=i)
        parts.append(block)
        n += len(block)
        i += 1
    path.write_text("".join(parts))
    return path


def make_corpus(dest: Path, roots: list[Path], n: int = CORPUS_FILES) -> tuple[int, int]:
    """``n`` Python files spread evenly over the sorted Python files of ``roots`` (each root in turn), copied
    to ``dest/<root name>/<path>``; returns (files, lines)."""
    files = []
    for root in roots:
        files += [(root, p) for p in sorted(root.rglob("*.py")) if ".git" not in p.parts and p.is_file()]
    if len(files) < n:
        sys.exit(f"only {len(files)} Python files under {', '.join(map(str, roots))}: {n} needed")
    lines = 0
    for k in range(n):
        root, p = files[k * len(files) // n]
        target = dest / root.name / p.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
        lines += p.read_bytes().count(b"\n")
    return n, lines


def command(src: str, path: Path, out: Path, pycache: Path) -> tuple[float, float]:
    """One ``ascendify migrate PATH -o OUT`` in a fresh process, as a user runs it (the summary printed to a
    pipe); returns (wall seconds, CPU seconds of the process and its workers). Bytecode is cached, as after
    ``pip install`` (PYTHONDONTWRITEBYTECODE would add the compiling of every module to each run)."""
    import resource
    import subprocess

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out.parent / f"{out.name}_migration_report", ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=src, PYTHONPYCACHEPREFIX=str(pycache), COLUMNS="100")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ascendify", "migrate", str(path), "-o", str(out)], env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 3):
        sys.exit(f"migrate failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(sides: dict[str, str], path: Path, tmp: Path, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """Each side ``repeat`` times, alternating (paired: load changes hit both alike), after one warm-up each."""
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    for side, src in sides.items():
        command(src, path, tmp / f"warm-{side}", tmp / f"pyc-{side}")
    for _ in range(repeat):
        for side, src in sides.items():
            runs[side].append(command(src, path, tmp / f"out-{side}", tmp / f"pyc-{side}"))
    return runs


def _stats(values: list[float]) -> str:
    import statistics

    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


def targets(args, tmp: Path) -> None:
    import statistics

    sides = {"this": str(REPO / "src")}
    if args.baseline:
        sides = {"baseline": str(args.baseline.resolve()), **sides}
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start "
          "(wall figures are for an idle machine only when this is well under the CPU count)")
    med: dict[str, dict[str, float]] = {side: {} for side in sides}
    if args.corpus:
        n_files, n_lines = count(args.corpus)
        print(f"\ncorpus {args.corpus}: {n_files} Python files, {n_lines:,} lines; {args.repeat} runs each, "
              "median (min, max); target <= 1.2 s wall on 2 cores, >= 250x msFmkTransplt (292 s)")
        runs = measure(sides, args.corpus, tmp, args.repeat)
        for side, rs in runs.items():
            wall = statistics.median(r[0] for r in rs)
            med[side]["corpus"] = wall
            print(f"  {side:8}: wall {_stats([r[0] for r in rs])} = {MSFMKTRANSPLT_SECONDS / wall:,.0f}x "
                  f"msFmkTransplt, {n_lines / wall:,.0f} lines/s | CPU {_stats([r[1] for r in rs])}")
    if args.large_tree:
        n_files, n_lines = count(args.large_tree)
        print(f"\nlarge tree {args.large_tree}: {n_files} Python files, {n_lines:,} lines; "
              f"{args.repeat} runs each; target >= 35,000 lines/s")
        runs = measure(sides, args.large_tree, tmp, args.repeat)
        for side, rs in runs.items():
            wall = statistics.median(r[0] for r in rs)
            med[side]["tree"] = wall
            print(f"  {side:8}: wall {_stats([r[0] for r in rs])} = {n_lines / wall:,.0f} lines/s | "
                  f"CPU {_stats([r[1] for r in rs])} = {n_lines / statistics.median(r[1] for r in rs):,.0f} "
                  "lines/s per core")
    if args.large_file:
        sizes = [float(x) for x in args.large_file.split(",")]
        print(f"\none generated file of CUDA lines, {', '.join(f'{x:g}' for x in sizes)} MB (one run each size; "
              "target: 5 MB <= 30 s, time linear in size)")
        lf_sides = sides if args.baseline_large_file else {"this": sides["this"]}
        if args.baseline and not args.baseline_large_file:
            print("  (the baseline is not run on these: before issue 26 its time grew with the square of the size, "
                  "250 KB 27 s, 500 KB 95 s, 1 MB > 300 s; --baseline-large-file runs it)")
        for mb in sizes:
            f = large_file(tmp / f"big_{mb:g}MB.py", mb)
            lines = f.read_bytes().count(b"\n")
            for side, src in lf_sides.items():
                wall, cpu = command(src, f, tmp / f"big-out-{side}", tmp / f"pyc-{side}")
                print(f"  {mb:4g} MB ({lines:,} lines) {side:8}: wall {wall:6.2f} s ({wall / mb:5.2f} s/MB) | "
                      f"CPU {cpu:6.2f} s ({cpu / mb:5.2f} s/MB)")
    if args.baseline:
        for key, name in (("corpus", "corpus"), ("tree", "large tree")):
            if key in med["this"]:
                print(f"speed-up this/baseline, {name} (wall medians): "
                      f"{med['baseline'][key] / med['this'][key]:.2f}x")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    if argv[:1] == ["--make-corpus"]:
        if len(argv) < 3:
            sys.exit("usage: migrate_speed.py --make-corpus DEST ROOT...")
        dest = Path(argv[1])
        if dest.exists() and any(dest.iterdir()):
            sys.exit(f"{dest} is not empty")
        n, lines = make_corpus(dest, [Path(r) for r in argv[2:]])
        print(f"{dest}: {n} Python files, {lines:,} lines")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, help="tree to convert (default: a generated one)")
    ap.add_argument("--min-files", type=int, default=100)
    ap.add_argument("--torch-sources", action="store_true",
                    help="convert a copy of the installed torch package's cuda, amp, distributed, nn, utils folders")
    ap.add_argument("--target", default="npu", choices=("npu", "portable"))
    ap.add_argument("--repeat", type=int, default=3, help="runs of each (best of N; --targets: median of N)")
    ap.add_argument("--baseline", type=Path, help="another checkout's src/ folder: compare its speed with this one's")
    ap.add_argument("--targets", action="store_true",
                    help="the issue's figures (whole commands): --corpus, --large-tree, --large-file")
    ap.add_argument("--corpus", type=Path, help="with --targets: the 123-file corpus (see --make-corpus)")
    ap.add_argument("--large-tree", type=Path, help="with --targets: a ~500k-line tree (NVIDIA Megatron-LM)")
    ap.add_argument("--large-file", default="0.5,1,2,5", metavar="MB,...",
                    help="with --targets: sizes of the generated file (default 0.5,1,2,5; '' for none)")
    ap.add_argument("--baseline-large-file", action="store_true",
                    help="with --targets --baseline: run the baseline on the generated files too")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.targets:
            targets(args, tmp)
            return 0
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
