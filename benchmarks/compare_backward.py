"""Cost of backward lockstep: ``compare_models(..., backward=True)`` against one plain forward + backward.

The model is ``dump_overhead.make_model`` (token embedding, pre-norm transformer blocks, head); golden and
target are the same model (a copy), so nothing is flagged and the cost is that of a clean comparison, the
common case. In one process, one thread, rounds alternate between:

* ``plain``: one forward + backward of the model (loss: mean of the squared outputs), the unit;
* ``forward``: ``compare_models`` without backward (lockstep as before);
* ``backward``: ``compare_models(backward=True)``.

The clock is the process's CPU time (one thread), which other work on a busy machine does not inflate.

Prints, per setting (target fp32 on the CPU, and under CPU bf16 autocast, where low-precision noise makes
more calls go through the local re-run), the median over rounds of each round's ratio to ``plain`` and its range:
what ``backward=True`` adds, from ``compare_models``' own phase timings (goal: <= 3x one plain forward +
backward), and the whole comparison with and without backward (dominated by the forward checks' metrics).

    python benchmarks/compare_backward.py [--batch 8] [--seq 64] [--d-model 256] [--layers 2] [--rounds 5]
                                          [--settings fp32,bf16] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--settings", default="fp32,bf16")
    p.add_argument("--json")
    a = p.parse_args(argv)

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dump_overhead import make_model

    from ascendify.precision import compare_models
    from ascendify.precision.gradients import default_loss

    torch.set_num_threads(1)
    torch.manual_seed(0)
    golden = make_model(torch, d=a.d_model, layers=a.layers)
    target = copy.deepcopy(golden)
    idx = torch.randint(0, 1000, (a.batch, a.seq))
    clock = time.process_time  # CPU time of this process (one thread): steadier than wall time on a busy machine

    def plain():
        golden.zero_grad(set_to_none=True)
        default_loss(golden(idx)).backward()
        golden.zero_grad(set_to_none=True)

    results = {}
    for setting in a.settings.split(","):
        ac = torch.bfloat16 if setting == "bf16" else None
        runs = {
            "plain": plain,
            "forward": lambda ac=ac: compare_models(golden, target, idx, target_autocast=ac),
            "backward": lambda ac=ac: compare_models(golden, target, idx, target_autocast=ac, backward=True),
        }
        for f in runs.values():  # warm-up
            f()
        times: dict[str, list[float]] = {k: [] for k in runs}
        added, last = [], None
        for _ in range(a.rounds):
            got = {}
            for k, f in runs.items():
                t0 = clock()
                got[k] = f()
                times[k].append(clock() - t0)
            # what backward=True adds, from compare_models' own phase timings (meta["timings"], CPU seconds): the
            # forward runs with taps and hooks over the plain forward runs, the two real backwards, and the gradient
            # checks (loss, screening, local re-runs). The forward checks (metrics of every call's output, the same in
            # both) are left out: their run-to-run spread on a busy machine is larger than the backward's whole cost.
            tf, tb = got["forward"].meta["timings"], got["backward"].meta["timings"]
            added.append(tb["runs"] - tf["runs"] + tb["backward_runs"] + tb["backward_checks"])
            last = got["backward"]
        assert last.verdict == "match", [n.name for n in last.flagged]
        rerun = sum(1 for n in last.nodes if n.phase == "backward" and n.kind != "loss" and n.note is None)
        pl = times["plain"]
        ratio_add = [x / p_ for x, p_ in zip(added, pl, strict=True)]
        ratio_b = [b / p_ for b, p_ in zip(times["backward"], pl, strict=True)]
        ratio_f = [f / p_ for f, p_ in zip(times["forward"], pl, strict=True)]
        res = {k: statistics.median(v) for k, v in times.items()}
        res.update(
            backward_added=statistics.median(added),
            backward_added_ratio=statistics.median(ratio_add), backward_added_range=[min(ratio_add), max(ratio_add)],
            backward_total_ratio=statistics.median(ratio_b), backward_total_range=[min(ratio_b), max(ratio_b)],
            forward_ratio=statistics.median(ratio_f),
            backward_calls=sum(1 for n in last.nodes if n.phase == "backward" and n.kind != "loss"),
            backward_calls_rerun=rerun,
        )
        results[setting] = res
        print(f"{setting}: plain fwd+bwd {res['plain'] * 1e3:.1f} ms | backward=True adds {res['backward_added'] * 1e3:.1f} "
              f"ms = {res['backward_added_ratio']:.2f}x one plain fwd+bwd (range {res['backward_added_range'][0]:.2f}-"
              f"{res['backward_added_range'][1]:.2f}; {rerun} of {res['backward_calls']} backward calls re-run) | "
              f"whole lockstep: forward only {res['forward'] * 1e3:.0f} ms ({res['forward_ratio']:.1f}x), with "
              f"backward {res['backward'] * 1e3:.0f} ms ({res['backward_total_ratio']:.1f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
