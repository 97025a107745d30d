"""Cost of the emulated ``torch_npu.npu_fusion_attention`` against ``F.scaled_dot_product_attention`` on the CPU.

Prints, for each mask kind (``full``: no mask; ``causal``: sparse_mode 3 with the 2048x2048 mask against SDPA's
``is_causal``; ``mask``: an explicit bool mask against SDPA's ``attn_mask``; ``dropout``: keep_prob 0.9, the
blockwise reference path, against SDPA with dropout_p 0.1, which takes the CPU's unfused math path):

  1. time ratio ``npu_fusion_attention / SDPA`` for forward and forward+backward, median of interleaved rounds and
     the spread (min..max over rounds) — on CPU tensors and on the emulated npu device (aim <= 1.5x);
  2. peak memory of one forward+backward above the inputs, in a fresh process per case after a warm-up run:
     the growth of the resident-set high-water mark (VmHWM, reset through ``/proc/self/clear_refs``; it sees
     every allocation torch makes, scratch buffers included) on the CPU, and the emulated device's own peak of
     allocated storages (``torch.npu.max_memory_allocated``) for both on the npu (aim: no more than SDPA).

    python benchmarks/fused_attention.py [--shape 2,8,1024,64] [--rounds 7] [--threads 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

KINDS = ("full", "causal", "mask", "dropout")


def _setup(torch, shape, kind, device, grad):
    b, n, s, d = shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, n, s, d, generator=g).to(device) for _ in range(3))
    if grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
    mask = None
    if kind == "causal":
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1).to(device)
    elif kind == "mask":
        mask = (torch.rand(s, s, generator=g) > 0.5).to(device)
        mask[:, 0] = False
    return q, k, v, mask


def _runner(torch, side, shape, kind, device, grad):
    """A no-argument callable doing one forward (and backward when ``grad``) of ``side`` ("sdpa" or "fa")."""
    import torch.nn.functional as F

    q, k, v, mask = _setup(torch, shape, kind, device, grad)
    scale = shape[3] ** -0.5
    dy = torch.ones(shape).to(device)
    if side == "sdpa":
        attn = None if kind != "mask" else ~mask

        drop = 0.1 if kind == "dropout" else 0.0

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn, is_causal=kind == "causal", scale=scale,
                                                  dropout_p=drop)
    else:
        import torch_npu

        mode = 3 if kind == "causal" else 0

        keep = 0.9 if kind == "dropout" else 1.0

        def fwd():
            return torch_npu.npu_fusion_attention(q, k, v, shape[1], "BNSD", atten_mask=mask, scale=scale,
                                                  sparse_mode=mode, keep_prob=keep)[0]

    if not grad:
        def run():
            with torch.no_grad():
                fwd()
        return run

    def run_bwd():
        torch.autograd.grad(fwd(), (q, k, v), dy)
    return run_bwd


def _time(fn, reps=2) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def timing(torch, shape, rounds):
    rows = []
    for kind in KINDS:
        for grad in (False, True):
            for device in ("cpu", "npu"):
                base = _runner(torch, "sdpa", shape, kind, "cpu", grad)
                mine = _runner(torch, "fa", shape, kind, device, grad)
                ratios = []
                for _ in range(rounds):  # interleaved: both sides see the same load
                    a = _time(base)
                    ratios.append(_time(mine) / a)
                rows.append({"kind": kind, "pass": "fwd+bwd" if grad else "fwd", "device": device,
                             "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                             "ratio_max": max(ratios), "sdpa_s": a})
    return rows


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def _peak_child(side, shape, kind, device) -> None:
    """In a fresh process, after one warm-up run: the growth of the resident-set high-water mark over one
    forward+backward (Linux: ``clear_refs`` resets VmHWM). With ``side`` "both" (on the emulated npu): the
    device's own peak of allocated storages over one forward+backward of SDPA, then of npu_fusion_attention,
    in one process (``torch.npu.max_memory_allocated``)."""
    import torch

    if side != "sdpa" or device == "npu":  # torch_npu is the emulator's shim
        import ascendify.emulator as emu

        emu.enable()
    out = {}
    if side == "both":
        for s in ("sdpa", "fa"):
            fn = _runner(torch, s, shape, kind, device, True)
            fn()
            gc.collect()
            torch.npu.reset_peak_memory_stats()
            base = torch.npu.memory_allocated()
            fn()
            out[s] = (torch.npu.max_memory_allocated() - base) // 1024
            del fn
            gc.collect()
        print(json.dumps(out))
        return
    fn = _runner(torch, side, shape, kind, device, True)
    fn()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss = _status_kib("VmRSS")
    fn()
    out["rss_kib"] = _status_kib("VmHWM") - rss
    print(json.dumps(out))


def peaks(shape, threads):
    rows = []
    # large blocks straight from mmap and back on free: the resident set then follows what is live
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MALLOC_MMAP_THRESHOLD_="16384", MALLOC_TRIM_THRESHOLD_="0")
    for kind in KINDS:
        got = {}
        for side, device in (("sdpa", "cpu"), ("fa", "cpu"), ("sdpa", "npu"), ("fa", "npu"), ("both", "npu")):
            out = subprocess.run([sys.executable, __file__, "--child", side, device, kind,
                                  "--shape", ",".join(map(str, shape))], capture_output=True, text=True, env=env,
                                 check=True)
            got[(side, device)] = json.loads(out.stdout.strip().splitlines()[-1])
        mib = {f"{s}_{d}": v["rss_kib"] / 1024 for (s, d), v in got.items() if s != "both"}
        acc = got[("both", "npu")]
        rows.append({"kind": kind, **{f"rss_mib_{k}": v for k, v in mib.items()},
                     "rss_ratio_cpu": mib["fa_cpu"] / max(mib["sdpa_cpu"], 1e-9),
                     "rss_ratio_npu": mib["fa_npu"] / max(mib["sdpa_npu"], 1e-9),
                     "npu_mib_sdpa": acc["sdpa"] / 1024, "npu_mib_fa": acc["fa"] / 1024})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="2,8,1024,64", help="B,N,S,D (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=3, metavar=("SIDE", "DEVICE", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.child:
        _peak_child(args.child[0], shape, args.child[2], args.child[1])
        return
    import torch

    torch.set_num_threads(args.threads)
    import ascendify.emulator as emu

    emu.enable()
    print(f"shape (B, N, S, D) = {shape}, float32, {args.threads} thread(s), {args.rounds} interleaved rounds")
    print("time: npu_fusion_attention / F.scaled_dot_product_attention on the CPU (median, min..max)")
    t = timing(torch, shape, args.rounds)
    for r in t:
        print(f"  {r['kind']:6} {r['pass']:7} on {r['device']}: {r['ratio_median']:.2f}x "
              f"({r['ratio_min']:.2f}..{r['ratio_max']:.2f}); SDPA {r['sdpa_s'] * 1e3:.1f} ms")
    print("peak memory of one forward+backward above the inputs (fresh process each, after a warm-up run)")
    p = peaks(shape, args.threads)
    for r in p:
        print(f"  {r['kind']:6} resident-set growth: cpu SDPA {r['rss_mib_sdpa_cpu']:.1f} MiB, "
              f"npu_fusion_attention {r['rss_mib_fa_cpu']:.1f} MiB ({r['rss_ratio_cpu']:.2f}x); "
              f"npu SDPA {r['rss_mib_sdpa_npu']:.1f} MiB, npu_fusion_attention {r['rss_mib_fa_npu']:.1f} MiB "
              f"({r['rss_ratio_npu']:.2f}x); emulated device's allocated peak: SDPA {r['npu_mib_sdpa']:.1f} MiB, "
              f"npu_fusion_attention {r['npu_mib_fa']:.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "threads": args.threads, "timing": t, "peak": p}, f, indent=1)


if __name__ == "__main__":
    main()
