"""``python -m ascendify.port.bench_job``: the bench stage's job: the speed of a model discovered by ``ascendify port``, at the batch it
received in the real run.

One side of the port (``--side golden``: the original's model, on the CPU; ``--side target``: the migrated model,
on the target) is loaded from :mod:`ascendify.port.observe`'s files and timed: a *training step* (forward under the
autocast policy the run used, a proxy loss, ``backward()``, an optimizer step) when the program trained, else a
forward under ``torch.no_grad()``. The proxy loss is the mean of the first floating tensor of the output: the
program's own loss needs its targets, which the model never sees; its cost is small next to the model's.

The timing is ``ascendify bench``'s own (:func:`ascendify.bench.bench_module`: warm-up steps, then repeats of
timed steps with the device synchronised; latency percentiles, samples/s at the median, peak memory, MFU where
the device's peak is known). Writes ``bench.json`` with that record. Exit status 0 measured, 3 the model could not be loaded or run, 4 nothing to measure.
"""

from __future__ import annotations

import argparse
import os
import sys

from ascendify.port.observation import ModelSeen, Observation, is_factory

UNSTABLE_ABOVE = 1.3  # the fastest timed window over the slowest: above this the figure is "unstable"
MORE_TRIES = 2  # measurements again, with more windows, before an unstable figure is reported as such


def spread(rec: dict) -> float:
    """The fastest timed window's samples/s over the slowest's (1.0: every window alike).

    >>> spread({"throughput_spread": {"min": 100.0, "max": 270.0}}), spread({})
    (2.7, 1.0)
    """
    sp = rec.get("throughput_spread") or {}
    lo, hi = sp.get("min"), sp.get("max")
    return float(hi) / float(lo) if lo and hi else 1.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ascendify.port.bench_job", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="ascendify port's runs folder")
    p.add_argument("--side", choices=("golden", "target"), required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--model", dest="select", default=None,
                   help="the discovered model to time (its name or class), or FILE.py:FACTORY(...) built in --root")
    p.add_argument("--root", help="the side's project folder (for --model FILE:FACTORY)")
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args(argv)

    found = Observation.load(os.path.join(a.runs, a.side, "observe.json"))
    if found is None:
        print(f"bench: nothing to measure: the {a.side} run left no observe.json")
        return 4
    m = found.select_model(a.select)
    factory = is_factory(a.select)
    if m is None and a.select:
        print(f"bench: --model {a.select}: no discovered model of that name or class", file=sys.stderr)
        return 2
    if m is None or not (m.file or factory) or not m.batch_file:
        why = ("no model was called" if not a.select else f"--model {a.select}: no discovered model of that name "
               "or class") if m is None else (m.snapshot_note or "the model was not captured")
        print(f"bench: nothing to measure: {why}")
        return 4
    from ascendify.device import placement

    device, emulated = a.device, False
    if device.split(":")[0] not in ("cpu",):
        try:
            r = placement.resolve(device, purpose="train")
            device, emulated = r.device, r.emulated
        except placement.DeviceError as e:
            print(f"bench: {e}", file=sys.stderr)
            return 3
    try:
        model, args, kwargs = _load(a, m, device)
    except Exception as e:  # noqa: BLE001
        print(f"bench: cannot load the model or its batch: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    # a training step where the program trained this model (its first call may have been an evaluation:
    # nanoGPT's estimate_loss() at iteration 0)
    rec = _measure(a, model, args, kwargs, m, device, train=bool(found.backwards) and bool(m.trained or m.optimizers))
    return _write(a, rec, device, emulated)


def _load(a: argparse.Namespace, m: ModelSeen, device: str):
    """The model (its captured copy, or built from ``--model FILE:FACTORY``) and its batch, on ``device``."""
    import cloudpickle
    import torch
    from torch.utils._pytree import tree_map

    if is_factory(a.select):
        from ascendify.workloads import factory

        torch.manual_seed(0)
        model = factory.load_model(a.select, root=a.root or ".")
    else:
        with open(os.path.join(a.runs, a.side, m.file), "rb") as f:
            model = cloudpickle.load(f)
    args, kwargs = torch.load(os.path.join(a.runs, a.side, m.batch_file), weights_only=False)
    model.to(device)
    args, kwargs = tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, (args, kwargs))
    return model, args, kwargs


def _measure(a: argparse.Namespace, model, args, kwargs, m: ModelSeen, device: str, train: bool) -> dict:
    """``bench``'s record of a step, measured again with more windows while its windows disagree."""
    from ascendify.bench import bench_module

    fc = m.first_call
    ac = fc.autocast if fc is not None else None
    precision = {"bfloat16": "bf16", "float16": "fp16"}.get(ac.dtype, "fp32") if ac is not None and ac.enabled \
        else "fp32"

    def measure(repeats: int) -> dict:
        return bench_module(model, args, kwargs, mode="train" if train else "infer", precision=precision,
                            device=device, batch_size=(fc.batch_size if fc is not None else None) or None,
                            steps=a.steps, warmup=a.warmup, repeats=repeats, name=type(model).__name__)

    rec = measure(a.repeats)
    for _ in range(MORE_TRIES):  # windows that disagree: measure again, longer, before saying it is unstable
        if rec.get("status") != "ok" or spread(rec) <= UNSTABLE_ABOVE:
            break
        rec = measure(2 * a.repeats + 1)
    if rec.get("status") == "ok":
        rec["spread_ratio"] = round(spread(rec), 3)
        rec["stable"] = rec["spread_ratio"] <= UNSTABLE_ABOVE
    return rec


def _write(a: argparse.Namespace, rec: dict, device: str, emulated: bool) -> int:
    import torch

    from ascendify import report

    label = "emulated NPU (host CPU)" if emulated else device
    data = {"schema": "ascendify.port.bench/1", "records": [rec], "emulated": emulated, "label": label,
            "device": {"device_name": rec.get("device_name") or label, "label": label}, "torch": torch.__version__,
            "threads": torch.get_num_threads()}
    report.write_json(os.path.join(a.out, "bench.json"), data)
    if rec.get("status") == "ok":
        lat = rec.get("latency_ms") or {}
        print(f"bench: {rec['model']} {rec['mode']} step at batch {rec['batch_size']} on {label}: "
              f"{lat.get('p50', 0):.3g} ms (p90 {lat.get('p90', 0):.3g} ms), {rec['throughput']:.4g} samples/s"
              + ("" if rec["stable"] else f" (unstable: windows differ {rec['spread_ratio']:.2g}x, machine busy?)"))
        return 0
    print(f"bench: {rec.get('model')} {rec.get('status')} on {label}: {rec.get('error')}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
