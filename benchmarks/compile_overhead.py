"""A compiled training step on the emulated NPU against the same compiled step on the CPU (issue 19).

One process, the emulator enabled first; one small GPT-like model (attention through
``F.scaled_dot_product_attention``) per device, both ``torch.compile``d with the default backend (inductor: CPU
inductor on the CPU, CPU inductor on the npu memory on the emulated NPU), trained by AdamW. After warm-up
(compilation included), rounds alternate the two devices, ``--steps`` steps each; the ratio of the emulated
step time to the CPU's is printed per round, then the median and spread (aim <= 1.3x).

    python benchmarks/compile_overhead.py [--steps 20] [--rounds 7] [--width 128] [--threads 1] [--json FILE]

The figures are the host's: on a machine loaded by other work the spread says how far to trust them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def build(torch, width: int, layers: int, vocab: int, seq: int):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, 4, c // 4).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, 2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Linear(width, vocab)

        def forward(self, idx, targets):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            logits = self.head(self.blocks(x))
            return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    return GPT()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (1: steady on a shared machine)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import ascendify.emulator as emu

    emu.enable()  # before any backward of the process
    import torch

    torch.set_num_threads(a.threads)
    vocab = 256
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=g)
    runs = {}
    for dev in ("cpu", "npu"):
        torch.manual_seed(0)
        model = build(torch, a.width, a.layers, vocab, a.seq).to(dev)
        step_fn = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = data[:, :-1].to(dev), data[:, 1:].to(dev)

        def step(step_fn=step_fn, opt=opt, x=x, y=y):
            loss = step_fn(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        t0 = time.perf_counter()
        first = step().item()
        compile_s = time.perf_counter() - t0
        for _ in range(a.warmup):
            step()
        runs[dev] = {"step": step, "compile_s": compile_s, "first_loss": first, "ms": []}
    assert abs(runs["cpu"]["first_loss"] - runs["npu"]["first_loss"]) <= 1e-4 * abs(runs["cpu"]["first_loss"])

    ratios = []
    for r in range(a.rounds):
        order = ("cpu", "npu") if r % 2 == 0 else ("npu", "cpu")
        for dev in order:
            run = runs[dev]
            t0 = time.perf_counter()
            for _ in range(a.steps):
                loss = run["step"]()
            loss.item()
            run["ms"].append((time.perf_counter() - t0) * 1e3 / a.steps)
        ratios.append(runs["npu"]["ms"][-1] / runs["cpu"]["ms"][-1])
        print(f"round {r}: cpu {runs['cpu']['ms'][-1]:.2f} ms/step, emulated npu {runs['npu']['ms'][-1]:.2f} "
              f"ms/step, ratio {ratios[-1]:.3f}")
    med = statistics.median(ratios)
    print(f"compiled step, emulated npu / cpu: median {med:.3f}x (min {min(ratios):.3f}, max {max(ratios):.3f}, "
          f"{a.rounds} rounds of {a.steps} steps; aim <= 1.3x)")
    print(f"compile (first step): cpu {runs['cpu']['compile_s']:.1f} s, emulated npu {runs['npu']['compile_s']:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ratio_median": med, "ratios": ratios,
                       "cpu_ms": runs["cpu"]["ms"], "npu_ms": runs["npu"]["ms"],
                       "compile_s": {d: runs[d]["compile_s"] for d in runs}, "args": vars(a)}, f, indent=1)


if __name__ == "__main__":
    main()
