"""Overhead of dumping: a forward pass of a small transformer with and without a statistics dump.

Variants: ours at API level and at mix level (statistics mode), ours at mix level in tensor mode (every tensor
saved as a ``.pt`` file), and, when mindstudio-probe is installed, msprobe's
statistics L1 and mix on the same model. Each variant runs in its own process (msprobe's debugger is a process-wide
singleton), and in that process rounds with and without the dump alternate, so the ratio compares like with like
on a busy machine. One thread; the clock is process CPU time (``--clock wall`` for wall time). Each round is
``--iters`` forward passes; the dump is started before and stopped (written) after each pass, one step per pass.

    python benchmarks/dump_overhead.py [--config standard,short] [--rounds N] [--iters N] [--no-grad]
                                       [--variants ours-api,ours-mix,ours-mix-tensors,...] [--json FILE]
    python benchmarks/dump_overhead.py --batch 1 --seq 8 [--d-model 256] [--layers 2] ...   (one custom config)
    python benchmarks/dump_overhead.py --breakdown [--config short]   (where ours-mix's extra time goes)

Configurations (both by default):

* ``standard``: batch 32 x seq 64, a ~100 ms forward on a 2-core EPYC, where reading the tensors is most of the cost;
* ``short``: the same model at batch 8 x seq 64, a 22-30 ms forward, where the fixed cost per recorded call (the same
  69 nodes) weighs four times as much: what a user bisecting a precision problem on a small repro pays.

The model: token embedding, ``--layers`` pre-norm blocks (attention written out with matmul/softmax, GELU MLP of
4 x ``--d-model``), a final LayerNorm and a linear head over a 1,000-token vocabulary.

``--breakdown`` splits ours-mix's extra milliseconds into reading the tensors, writing the step, the mechanism (a
torch-function mode and module hooks that do nothing) and the recording's Python: one process alternates the plain
forward, ours-mix, ours-mix with the statistics kernel's call a no-op (wrong statistics), ours-mix with the writer a
no-op, and the bare mechanism; each part is the median over rounds of a difference within a round. The parts are
estimates: within one process a code path run less often is colder than the default one, so to compare two versions
of the dumper run each in its own processes, alternated (as docs/architecture.md's fifth pass did).

Prints the machine's load (``os.getloadavg``, before and after: the figures are only comparable on an idle machine),
then per configuration a table of median milliseconds per forward without and with the dump, the median over rounds
of each round's ratio to no dump (goal: ours at mix <= 1.2x on both; the issue measured msprobe at 2.4x for L1 and
3.7x for mix) with the middle half (interquartile range) and the whole range of those ratios, and the number of
nodes each dump recorded.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ["ours-api", "ours-mix", "ours-mix-tensors", "msprobe-L1", "msprobe-mix"]

# name -> (batch, seq, d_model, layers, rounds, iters): rounds of similar length in both
CONFIGS = {
    "standard": (32, 64, 256, 2, 9, 3),
    "short": (8, 64, 256, 2, 15, 10),
}


def make_model(torch, vocab=1000, d=256, heads=4, layers=2, ff=None):
    ff = ff or 4 * d
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / (d // heads) ** 0.5)
            att = F.softmax(att, dim=-1)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, ff)
            self.fc2 = nn.Linear(ff, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, idx):
            x = self.emb(idx)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return Transformer()


def _msprobe_config(level: str, out: str) -> str:
    cfg = {
        "task": "statistics", "dump_path": out, "rank": [], "step": [], "level": level, "async_dump": False,
        "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    }  # fmt: skip
    path = os.path.join(out, "config.json")
    os.makedirs(out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def _setup(torch, a) -> tuple:
    """One thread, the seeded model and its input, a dump folder, the clock and the grad mode of a worker."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model(torch, d=a.d_model, layers=a.layers)
    idx = torch.randint(0, 1000, (a.batch, a.seq))
    out = tempfile.mkdtemp(prefix="dump_overhead_")
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    grad = torch.enable_grad() if not a.no_grad else torch.no_grad()
    return model, idx, out, clock, grad


def worker(variant: str, a) -> dict:
    import torch

    model, idx, out, clock, grad = _setup(torch, a)

    if variant.startswith("ours"):
        from ascendify.precision import dump

        level = variant.split("-")[1]
        mode = "tensors" if variant.endswith("-tensors") else "stats"

        def with_dump():
            with dump(model, out, level=level, mode=mode, backward=not a.no_grad):
                model(idx)

    else:
        import logging

        logging.disable(logging.CRITICAL)
        from msprobe.pytorch import PrecisionDebugger

        dbg = PrecisionDebugger(config_path=_msprobe_config(variant.split("-")[1], out))

        def with_dump():
            dbg.start(model)
            model(idx)
            dbg.stop()
            dbg.step()

    def plain():
        model(idx)

    with grad:
        for fn in (plain, with_dump):  # warm-up
            fn()
        base, dumped = [], []
        for _ in range(a.rounds):
            for fn, acc in ((plain, base), (with_dump, dumped)):
                t0 = clock()
                for _ in range(a.iters):
                    fn()
                acc.append((clock() - t0) / a.iters)
    nodes = _count_nodes(out)
    b, d = statistics.median(base), statistics.median(dumped)
    ratios = [y / x for x, y in zip(base, dumped, strict=True)]  # each round's pair ran under the same load
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"variant": variant, "base_s": b, "dump_s": d, "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "ratio_q1": q[0], "ratio_q3": q[2],
            "rounds": len(ratios), "nodes": nodes}


def _bare_hooks(torch, model, idx):
    """The mechanism alone: a torch-function mode and forward hooks on every module that do nothing."""
    from torch.overrides import TorchFunctionMode

    class Bare(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def pre(module, args, kwargs):
        return None

    def post(module, args, kwargs, output):
        return None

    def run():
        handles = [m.register_forward_pre_hook(pre, with_kwargs=True) for m in model.modules()]
        handles += [m.register_forward_hook(post, with_kwargs=True, always_call=True) for m in model.modules()]
        with Bare():
            model(idx)
        for h in handles:
            h.remove()

    return run


def breakdown_worker(a) -> dict:
    """--breakdown: in one process, rounds of the plain forward, ours-mix, ours-mix with the statistics kernel's call
    a no-op (wrong statistics), ours-mix with the step's writer a no-op, and the bare mode and hooks; each part is the
    median over rounds of a difference within the round, so load that drifts between rounds cancels."""
    import torch

    from ascendify.precision import dump, dumper, msprobe_io, stats

    model, idx, out, clock, grad = _setup(torch, a)
    stats._kernel(torch.float32)
    dumper._connect_fastrec()  # the C++ recorder where it is built: its kernel call is no_kernel's too
    kernel, write = stats._fx, msprobe_io.write_step
    if kernel is None:
        raise SystemExit("--breakdown: the statistics kernel's Python module is not built here")

    row_bytes = stats.STAT_LEN * 4

    class NoKernel:  # the row zeroed (uninitialised memory could hold a NaN count), the tensor not read
        @staticmethod
        def fill(kind, ptr, shape, stride, pos, k, w, scale, head, out, offs):
            ctypes.memset(out, 0, row_bytes)

    def plain():
        model(idx)

    def mix():
        with dump(model, out, level="mix", mode="stats", backward=not a.no_grad):
            model(idx)

    def no_cfill(t, row, head, plans, pu1, defer_min):  # the C++ recorder's kernel call (fastrec.fill), as NoKernel
        if defer_min and t.numel() >= defer_min:
            return 2  # deferred as before: the table's decisions stay the same, only the reading goes
        ctypes.memset(row, 0, row_bytes)
        return 1

    def no_kernel():
        cfill = stats._cfill
        stats._fx = NoKernel
        stats._cfill = no_cfill if cfill is not None else None
        try:
            mix()
        finally:
            stats._fx, stats._cfill = kernel, cfill

    def no_write():
        msprobe_io.write_step = lambda dumper, recs, rows: dumper.root
        try:
            mix()
        finally:
            msprobe_io.write_step = write

    fns = {"plain": plain, "mix": mix, "no_kernel": no_kernel, "no_write": no_write,
           "bare": _bare_hooks(torch, model, idx)}  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in fns}
    with grad:
        for fn in fns.values():  # warm-up
            fn()
        for _ in range(a.rounds):
            for k, fn in fns.items():
                t0 = clock()
                for _ in range(a.iters):
                    fn()
                times[k].append((clock() - t0) / a.iters)
    rounds = list(zip(*(times[k] for k in fns), strict=True))
    parts = {
        "extra": [m - p for p, m, _, _, _ in rounds],
        "kernel": [m - nk for _, m, nk, _, _ in rounds],
        "writer": [m - nw for _, m, _, nw, _ in rounds],
        "mechanism": [b - p for p, _, _, _, b in rounds],
    }
    parts["python"] = [e - k - w - f for e, k, w, f in
                       zip(parts["extra"], parts["kernel"], parts["writer"], parts["mechanism"], strict=True)]
    med = {k: statistics.median(v) for k, v in parts.items()}
    q = {k: statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3 for k, v in parts.items()}
    return {"variant": "breakdown", "base_s": statistics.median(times["plain"]), "parts": med,
            "parts_q1": {k: v[0] for k, v in q.items()}, "parts_q3": {k: v[2] for k, v in q.items()},
            "rounds": a.rounds}


def _print_breakdown(c: dict) -> None:
    r = c["results"][0]
    base = r["base_s"]
    names = [("extra", "ours-mix over the plain forward"), ("kernel", "reading the tensors (the C kernel)"),
             ("writer", "writing the step (building the JSON, the files)"),
             ("mechanism", "a torch-function mode and module hooks that do nothing"),
             ("python", "the recording's Python (the rest)")]
    print(f"{c['config']}: where ours-mix's time goes, a forward of {base * 1e3:.2f} ms (1.2x allows "
          f"{0.2 * base * 1e3:.2f} ms); median of {r['rounds']} rounds [middle half]")
    for key, name in names:
        print(f"  {r['parts'][key] * 1e3:6.2f} ms [{r['parts_q1'][key] * 1e3:.2f}-{r['parts_q3'][key] * 1e3:.2f}]"
              f"  {name}")


def _count_nodes(out: str) -> int | None:
    for root, _dirs, files in os.walk(out):
        if "dump.json" in files:
            with open(os.path.join(root, "dump.json")) as f:
                return len(json.load(f)["data"])
    return None


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def _run_config(name: str, cfg: tuple, a, env: dict, have_msprobe: bool) -> dict:
    batch, seq, d_model, layers, rounds, iters = cfg
    results = []
    for v in a.variants.split(","):
        if v.startswith("msprobe") and not have_msprobe:
            print(f"{v}: skipped (mindstudio-probe is not installed)", file=sys.stderr)
            continue
        args = [sys.executable, __file__, "--worker", v, "--batch", str(batch), "--seq", str(seq),
                "--rounds", str(rounds), "--iters", str(iters), "--clock", a.clock,
                "--d-model", str(d_model), "--layers", str(layers)]  # fmt: skip
        if a.no_grad:
            args.append("--no-grad")
        print(f"{name}: running {v} ...", file=sys.stderr, flush=True)
        r = subprocess.run(args, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print(f"{v}: failed\n{r.stderr[-2000:]}", file=sys.stderr)
            continue
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return {"config": name, "batch": batch, "seq": seq, "d_model": d_model, "layers": layers, "rounds": rounds,
            "iters": iters, "results": results}


def _print_config(c: dict, mode: str) -> None:
    from ascendify import report

    cols = [
        report.Column("variant"),
        report.Column("base_ms", "plain ms", kind="number"),
        report.Column("dump_ms", "dump ms", kind="number"),
        report.Column("ratio", "ratio", kind="number"),
        report.Column("iqr", "mid half"),
        report.Column("range", "range"),
        report.Column("nodes", "nodes", kind="number"),
    ]
    rows = [{"variant": r["variant"], "base_ms": round(r["base_s"] * 1e3, 2), "dump_ms": round(r["dump_s"] * 1e3, 2),
             "ratio": f"{r['ratio']:.2f}x", "iqr": f"{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}",
             "range": f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}", "nodes": r["nodes"]}
            for r in c["results"]]  # fmt: skip
    title = (f"{c['config']}: batch {c['batch']} x {c['seq']}, d {c['d_model']} x {c['layers']} layers, {mode}, "
             f"{c['rounds']} paired rounds of {c['iters']}")
    report.print_table(cols, rows, title=title)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="standard,short", help="standard, short or both (comma-separated)")
    p.add_argument("--batch", type=int, help="a custom configuration (with --seq, --d-model, --layers)")
    p.add_argument("--seq", type=int)
    p.add_argument("--d-model", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--rounds", type=int, help="paired rounds (default: the configuration's)")
    p.add_argument("--iters", type=int, help="forward passes a round (default: the configuration's)")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--no-grad", action="store_true", help="time an inference forward (no backward hooks)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--breakdown", action="store_true",
                   help="where ours-mix's time goes (the kernel, the writer, the mechanism, the Python)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        a.batch, a.seq, a.d_model, a.layers = a.batch or 32, a.seq or 64, a.d_model or 256, a.layers or 2
        a.rounds, a.iters = a.rounds or 7, a.iters or 3
        print(json.dumps(breakdown_worker(a) if a.worker == "breakdown" else worker(a.worker, a)))
        return 0
    if any(x is not None for x in (a.batch, a.seq, a.d_model, a.layers)):
        std = CONFIGS["standard"]
        configs = {"custom": (a.batch or std[0], a.seq or std[1], a.d_model or std[2], a.layers or std[3],
                              std[4], std[5])}  # fmt: skip
    else:
        names = [n.strip() for n in a.config.split(",") if n.strip()]
        bad = [n for n in names if n not in CONFIGS]
        if bad or not names:
            p.error(f"--config: {', '.join(bad) or 'empty'}; choose from {', '.join(CONFIGS)}")
        configs = {n: CONFIGS[n] for n in names}
    configs = {n: (*c[:4], a.rounds or c[4], a.iters or c[5]) for n, c in configs.items()}
    if a.breakdown:
        a.variants = "breakdown"
    try:
        import msprobe  # noqa: F401

        have_msprobe = True
    except Exception:
        have_msprobe = False
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    load_before = _load()
    done = [_run_config(n, c, a, env, have_msprobe) for n, c in configs.items()]
    load_after = _load()
    mode = "no_grad" if a.no_grad else "autograd"
    print(f"dump overhead: ratio = median of paired rounds ({a.clock} time, 1 thread)\n"
          f"load (1, 5, 15 min): {load_before} before; {load_after} after; {os.cpu_count()} CPUs")
    for c in done:
        if a.breakdown:
            _print_breakdown(c)
        else:
            _print_config(c, mode)
    if a.json:
        from ascendify import report

        report.write_json(a.json, {"no_grad": a.no_grad, "clock": a.clock, "load_before": load_before,
                                   "load_after": load_after, "cpus": os.cpu_count(), "configs": done})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
