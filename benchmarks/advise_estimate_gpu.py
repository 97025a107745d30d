"""Validate ``ascendify advise``'s step-time estimate against measured step times on a GPU (or the CPU).

For each of four small models (a GPT-style transformer LM, a larger one, an MLP, a conv net; built here, nothing
downloaded, torch only) at a fixed batch, on ``--device``:

1. **measured**: training steps (forward, loss, backward, AdamW) after a warm-up, each timed between device
   synchronisations; the median of ``--repeats`` steps (p10 and p90 too);
2. **estimated**: the same step traced by advise's tracer (``ascendify.advise.trace.Tracer``, on the same device),
   then ``ascendify.advise.estimate.estimate_step`` with the device's entry in ``data/device_peaks.json`` (matched
   from ``torch.cuda.get_device_name()``) and advise's assumptions (``data/advise_facts.json``), and again with the
   host cost per operator *measured* here (a loop of tiny kernels) instead of the assumed one;
3. **error**: ``estimate / measured - 1`` for both.

    python benchmarks/advise_estimate_gpu.py --device cuda [--json out.json] [--repeats 30] [--dtype bf16]
    python benchmarks/advise_estimate_gpu.py --device cpu        # the CPU path: runs anywhere, checks the script

Needs torch and this repository's ``src/`` (``pip install -e .`` or ``pip install -e . --no-deps``; without an
install the script puts ``../src`` on ``sys.path`` itself). It never needs the emulator or its C++ build. On the CPU
there is no published peak: the CPU's matmul rate and copy bandwidth are measured first and stand in for it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

try:
    import ascendify  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import torch
import torch.nn as nn
import torch.nn.functional as F

# -- the models --------------------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def conv_net():
    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU())
    return nn.Sequential(block(3, 64), block(64, 64), nn.MaxPool2d(2), block(64, 128), block(128, 128),
                         nn.MaxPool2d(2), block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def workloads(small: bool):
    """(name, model factory, batch factory, loss): sizes a GPU step takes milliseconds for; ``small`` (the CPU
    path) divides them so that a CPU step takes tens of milliseconds."""
    if small:
        return [
            ("gpt-small", lambda: LM(2048, 128, 2, 4, 64), lambda d: torch.randint(0, 2048, (4, 64), device=d), "lm"),
            ("gpt-medium", lambda: LM(4096, 256, 2, 4, 128), lambda d: torch.randint(0, 4096, (2, 128), device=d),
             "lm"),
            ("mlp", lambda: nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1000)),
             lambda d: torch.randn(64, 256, device=d), "cls"),
            ("convnet", conv_net, lambda d: torch.randn(2, 3, 32, 32, device=d), "cls"),
        ]
    return [
        ("gpt-small", lambda: LM(8192, 512, 6, 8, 256), lambda d: torch.randint(0, 8192, (16, 256), device=d), "lm"),
        ("gpt-medium", lambda: LM(32768, 1024, 8, 16, 512), lambda d: torch.randint(0, 32768, (8, 512), device=d),
         "lm"),
        ("mlp", lambda: nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                      nn.Linear(4096, 1000)), lambda d: torch.randn(512, 1024, device=d), "cls"),
        ("convnet", conv_net, lambda d: torch.randn(64, 3, 64, 64, device=d), "cls"),
    ]


# -- measuring ---------------------------------------------------------------------------------------------------

def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def make_step(model, x, kind, dtype, dev):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp = dtype is not None

    def step():
        with torch.autocast(dev.type, dtype=dtype, enabled=amp):
            out = model(x)
            if kind == "lm":
                loss = F.cross_entropy(out.float().view(-1, out.size(-1)), x.view(-1))
            else:
                loss = F.cross_entropy(out.float(), torch.zeros(out.shape[0], dtype=torch.long, device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def measure(step, dev, warmup, repeats):
    for _ in range(warmup):
        step()
    sync(dev)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        sync(dev)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"median_ms": statistics.median(times) * 1e3, "p10_ms": times[len(times) // 10] * 1e3,
            "p90_ms": times[(9 * len(times)) // 10] * 1e3}


def dispatch_us(dev, n=3000):
    """The host cost of one small kernel, measured: a loop of in-place adds on a tiny tensor (async on a GPU)."""
    x = torch.zeros(16, device=dev)
    for _ in range(200):
        x.add_(1)
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    host = time.perf_counter() - t0
    sync(dev)
    return host / n * 1e6


def training_dispatch_us(dev, dtype, chip, est, warmup, repeats):
    """The host cost of one launched op in an eager *training* step (forward with autocast, autograd's recording,
    backward, AdamW), measured on a model too small for its device work to count: a tiny GPT's step time, less
    its views' assumed cost, over its launched ops. A model of its own: none of the four validated below."""
    from ascendify.advise.trace import Tracer

    torch.manual_seed(0)
    model = LM(256, 32, 2, 2, 16).to(dev)
    x = torch.randint(0, 256, (2, 16), device=dev)
    step = make_step(model, x, "lm", dtype, dev)
    m = measure(step, dev, warmup, repeats)
    tr = Tracer(root=os.getcwd()).start()
    for _ in range(3):
        step()
    e = est.estimate_step(tr.stop(), chip)
    views = e.ops - e.kernels
    return max(0.0, (m["median_ms"] * 1e-3 - views * chip.view_s)) / max(1, e.kernels) * 1e6


def cpu_chip(est, threads):
    """The CPU as a chip: its measured matmul rate and copy bandwidth (no datasheet to read)."""
    a = torch.randn(1024, 1024)
    for _ in range(2):
        a @ a
    t0 = time.perf_counter()
    for _ in range(5):
        a @ a
    flops = 5 * 2 * 1024 ** 3 / (time.perf_counter() - t0)
    big = torch.randn(32 * 1024 * 1024 // 4)
    t0 = time.perf_counter()
    for _ in range(5):
        big.clone()
    bw = 5 * 2 * big.numel() * 4 / (time.perf_counter() - t0)
    return est.Chip(name=f"this CPU ({threads} threads, measured)", kind="cpu",
                    peaks={"fp32": flops, "tf32": flops, "hf32": flops, "bf16": flops / 2, "fp16": flops / 2},
                    bandwidth=bw, host_link=bw, dispatch_s=4e-6, view_s=1e-6, floor_s=0.5e-6, sync_s=1e-6,
                    eff_compute=1.0, eff_memory=1.0,
                    notes=[f"measured here: {flops / 1e9:.1f} GFLOP/s fp32 matmul, {bw / 1e9:.1f} GB/s copy"],
                    entry_id="cpu-measured")


def estimate(trace, chip, est):
    e = est.estimate_step(trace, chip)
    return {"step_ms": e.total_s * 1e3, "compute_ms": e.compute_s * 1e3, "memory_ms": e.memory_s * 1e3,
            "host_ms": e.host_s * 1e3, "device_ms": e.device_s * 1e3, "ops": e.ops, "kernels": e.kernels}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="bf16", help="autocast dtype (fp32: none)")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--only", help="comma-separated workload names")
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args()
    from ascendify.advise import estimate as est
    from ascendify.advise.trace import Tracer

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: use --device cpu", file=sys.stderr)
        return 2
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    if dev.type == "cpu":
        dtype = None if a.dtype == "fp32" else torch.bfloat16
        name = "cpu"
        chip = cpu_chip(est, torch.get_num_threads())
    else:
        name = torch.cuda.get_device_name(dev)
        try:
            chip = est.chip(name)
        except ValueError as e:
            print(f"{e}: add it to data/device_peaks.json", file=sys.stderr)
            return 2
    loop_dispatch = dispatch_us(dev)
    measured_dispatch = training_dispatch_us(dev, dtype, chip, est, a.warmup, a.repeats)
    calibrated = est.Chip(**{**chip.__dict__, "dispatch_s": measured_dispatch * 1e-6,
                             "notes": chip.notes + ["host cost per op measured here"]})
    settings = {"float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cuda_matmul_allow_tf32": bool(getattr(torch.backends.cuda.matmul, "allow_tf32", False)),
                "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}
    out = {"device": name, "chip": chip.to_dict(), "torch": torch.__version__, "dtype": a.dtype,
           "dispatch_us": {"assumed": chip.dispatch_s * 1e6, "measured": measured_dispatch,
                           "kernel_loop": loop_dispatch}, "settings": settings,
           "workloads": []}
    print(f"{name}: peaks from {chip.entry_id}; host cost per op: assumed {chip.dispatch_s * 1e6:.1f} us, "
          f"measured {measured_dispatch:.1f} us in a tiny model's training step ({loop_dispatch:.1f} us in a loop "
          "of bare kernels)")
    only = set(a.only.split(",")) if a.only else None
    for wname, make, batch, kind in workloads(dev.type == "cpu"):
        if only and wname not in only:
            continue
        torch.manual_seed(0)
        model = make().to(dev)
        x = batch(dev)
        step = make_step(model, x, kind, dtype, dev)
        m = measure(step, dev, a.warmup, a.repeats)
        tr = Tracer(root=os.getcwd()).start()
        for _ in range(3):
            step()
        trace = tr.stop()
        trace.settings.update(settings)
        e1, e2 = estimate(trace, chip, est), estimate(trace, calibrated, est)
        row = {"workload": wname, "params": sum(p.numel() for p in model.parameters()), "batch": list(x.shape),
               "measured": m, "estimate": e1, "estimate_measured_dispatch": e2,
               "error": e1["step_ms"] / m["median_ms"] - 1, "error_measured_dispatch": e2["step_ms"] / m["median_ms"] - 1}
        out["workloads"].append(row)
        print(f"  {wname:<11} measured {m['median_ms']:8.2f} ms (p10 {m['p10_ms']:.2f}, p90 {m['p90_ms']:.2f})  "
              f"estimate {e1['step_ms']:8.2f} ms ({row['error']:+.0%})  with measured dispatch "
              f"{e2['step_ms']:8.2f} ms ({row['error_measured_dispatch']:+.0%})  "
              f"[compute {e1['compute_ms']:.2f}, memory {e1['memory_ms']:.2f}, host {e1['host_ms']:.2f}; "
              f"{e1['ops']} ops]", flush=True)
        del model, step
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    errs = [abs(r["error"]) for r in out["workloads"]]
    errs2 = [abs(r["error_measured_dispatch"]) for r in out["workloads"]]
    if errs:
        out["summary"] = {"median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
                          "median_abs_error_measured_dispatch": statistics.median(errs2),
                          "max_abs_error_measured_dispatch": max(errs2)}
        print(f"median |error| {statistics.median(errs):.0%} (max {max(errs):.0%}); with the measured host cost "
              f"{statistics.median(errs2):.0%} (max {max(errs2):.0%})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"written {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
