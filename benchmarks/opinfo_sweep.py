"""Sweep PyTorch's OpInfo database on the emulated ``npu`` and compare every result with the CPU.

For every OpInfo entry of ``torch.testing._internal.common_methods_invocations.op_db`` that supports float32
on the CPU, each float32 sample input (made for ``npu``, as PyTorch's device tests make them for ``cuda``) runs
twice: on the CPU, with its ``npu`` tensors copied there, and on ``npu``. Forward
outputs are compared (values, dtypes, shapes; NaNs equal), then, for entries that support autograd, the
gradients of every input that requires grad, for the same random output cotangents. Random ops are compared
under the same seed (``torch.manual_seed`` seeds the emulator's generator too). Outputs of ``empty``-like ops
are uninitialised memory: only their metadata is compared.

An entry is *runnable* when at least one of its samples runs on the CPU; it *agrees* when every runnable
sample gives the same result on ``npu`` (within ``torch.testing.assert_close``'s float32 tolerances; the
summary also counts bit-exact agreement). The issue asks for >= 99% forward and >= 99% backward agreement.

Usage::

    python benchmarks/opinfo_sweep.py                       # full sweep, summary + misses, JSON beside
    python benchmarks/opinfo_sweep.py --ops add mm softmax  # a few entries
    python benchmarks/opinfo_sweep.py --json out/opinfo.json --max-samples 8

Each entry runs in a worker process that reports to this one line by line, so a crash (a segfault in a
kernel) is recorded as a miss of the entry that caused it and the sweep goes on with the next entry.
``tests/emulator/test_opinfo.py`` imports this file and runs a fast subset in the default test run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

SEED = 1234
DEFAULT_MAX_SAMPLES = 16
# outputs are uninitialised memory: compare shape/dtype/device only
UNINITIALISED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}


@dataclass
class PhaseResult:
    """The outcome of one phase (forward or backward) of one OpInfo entry."""

    status: str  # "agree", "miss" or "not_runnable"
    samples: int = 0  # samples that ran on the CPU
    agreed: int = 0
    exact: int = 0  # agreed bit for bit
    reason: str = ""
    sample: str = ""  # summary of the first failing sample


@dataclass
class EntryResult:
    entry: str
    forward: PhaseResult
    backward: PhaseResult | None = None  # None: the entry does not support float32 autograd
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


# --- helpers ----------------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def enable_emulator() -> None:
    import ascendify.emulator

    ascendify.emulator.enable()


def load_op_db():
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def entry_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def float32_entries(op_db, names=None):
    """OpInfo entries with float32 CPU support, optionally only those whose id or name is in ``names``."""
    torch = _torch()
    wanted = set(names) if names else None
    out = []
    for op in op_db:
        if wanted is not None and entry_id(op) not in wanted and op.name not in wanted:
            continue
        if torch.float32 in op.supported_dtypes("cpu"):
            out.append(op)
    return out


def _supports_backward(op) -> bool:
    torch = _torch()
    return bool(op.supports_autograd) and torch.float32 in op.supported_backward_dtypes("cpu")


def _map(sample, fn):
    from torch.utils._pytree import tree_map

    return tree_map(fn, (sample.input, sample.args, sample.kwargs))


def _copy_to(device: str, requires_grad: bool):
    torch = _torch()

    def fn(x):
        if isinstance(x, torch.Tensor):
            # samples are made on npu; a tensor a sample builds on the CPU on purpose stays there
            y = x.detach().to(device, copy=True) if x.device.type == "npu" else x.detach().clone()
            if requires_grad and x.requires_grad:
                y.requires_grad_()
            return y
        return x

    return fn


def _describe(sample) -> str:
    torch = _torch()

    def d(x):
        if isinstance(x, torch.Tensor):
            return f"Tensor{tuple(x.shape)}:{str(x.dtype).removeprefix('torch.')}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(d(v) for v in x) + "]"
        return repr(x)

    kw = ", ".join(f"{k}={d(v)}" for k, v in sample.kwargs.items())
    parts = [d(sample.input)] + [d(a) for a in sample.args] + ([kw] if kw else [])
    return "(" + ", ".join(parts) + ")"


def _run(op, sample, device: str, requires_grad: bool):
    torch = _torch()
    inp, args, kwargs = _map(sample, _copy_to(device, requires_grad))
    torch.manual_seed(SEED)
    if device == "npu":
        torch.npu.manual_seed(SEED)
    return (inp, args, kwargs), op(inp, *args, **kwargs)


def _flat(x):
    from torch.utils._pytree import tree_flatten

    return tree_flatten(x)[0]


def _expects_npu_output(sample) -> bool:
    """Outputs must be on ``npu`` when the sample has an ``npu`` tensor and names no CPU device itself.

    ``to(t, "cpu")`` answers on the CPU; ``arange(2)`` (no tensor, no device) answers on the CPU everywhere.
    """
    torch = _torch()
    values = _flat((sample.input, sample.args, sample.kwargs))
    if any(isinstance(v, (torch.device, str)) and "cpu" in str(v) for v in values):
        return False
    return any(isinstance(v, torch.Tensor) and v.device.type == "npu" for v in values)


class Mismatch(Exception):
    pass


def compare(expected, actual, *, metadata_only=False, npu_outputs=True) -> bool:
    """Raise :class:`Mismatch` unless ``actual`` (npu run) equals ``expected`` (CPU run); True if bit-exact."""
    torch = _torch()
    exp, act = _flat(expected), _flat(actual)
    if len(exp) != len(act):
        raise Mismatch(f"{len(act)} outputs on npu, {len(exp)} on cpu")
    exact = True
    for i, (e, a) in enumerate(zip(exp, act, strict=True)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch(f"output {i}: npu gave {type(a).__name__}, cpu a tensor")
            if npu_outputs and a.device.type != "npu":
                raise Mismatch(f"output {i}: on {a.device}, expected an npu tensor")
            a = a.detach().cpu()
            e = e.detach()
            if (a.dtype, a.shape) != (e.dtype, e.shape):
                raise Mismatch(f"output {i}: {a.dtype}{tuple(a.shape)} on npu vs {e.dtype}{tuple(e.shape)} on cpu")
            if metadata_only:
                continue
            if e.layout is not torch.strided:
                e, a = e.to_dense(), a.to_dense()
            try:
                torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True, check_device=False)
            except AssertionError:
                exact = False
                try:
                    torch.testing.assert_close(a, e, equal_nan=True, check_device=False)
                except AssertionError as err:
                    raise Mismatch(f"output {i}: " + str(err).splitlines()[0] + _diff(e, a)) from None
        elif isinstance(e, float) and isinstance(a, float) and math.isnan(e) and math.isnan(a):
            continue
        elif e != a:
            raise Mismatch(f"output {i}: npu {a!r} != cpu {e!r}")
    return exact


def _diff(e, a) -> str:
    try:
        if e.is_floating_point() or e.is_complex():
            d = (a.double() - e.double()).abs().nan_to_num(0).max().item()
            return f" (max abs diff {d:.3g})"
    except Exception:
        pass
    return ""


def _short(err: BaseException) -> str:
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[0][:300] if msg else ''}"


# --- the two phases ---------------------------------------------------------------------------------------------


def _samples(op, requires_grad: bool, max_samples: int, res: PhaseResult):
    """The entry's float32 samples made for ``npu``; None (and ``res`` filled in) when that fails."""
    torch = _torch()
    try:
        return list(itertools.islice(op.sample_inputs("npu", torch.float32, requires_grad=requires_grad),
                                     max_samples))
    except Exception as e:
        try:  # an OpInfo that cannot make samples on the CPU either is not runnable, not a miss
            list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=requires_grad), 1))
        except Exception:
            res.reason = f"sample generation fails on the CPU too: {_short(e)}"
            return None
        res.status, res.reason = "miss", f"sample generation on npu failed: {_short(e)}"
        return None


def check_forward(op, max_samples: int = DEFAULT_MAX_SAMPLES) -> PhaseResult:
    res = PhaseResult("not_runnable")
    meta = op.name in UNINITIALISED
    samples = _samples(op, False, max_samples, res)
    if samples is None:
        return res
    for sample in samples:
        try:
            _, expected = _run(op, sample, "cpu", False)
        except Exception:
            continue  # not runnable on the CPU: not counted
        res.samples += 1
        try:
            _, actual = _run(op, sample, "npu", False)
            exact = compare(expected, actual, metadata_only=meta, npu_outputs=_expects_npu_output(sample))
        except Mismatch as e:
            _fail(res, f"mismatch: {e}", sample)
            continue
        except Exception as e:
            _fail(res, f"npu error: {_short(e)}", sample, e)
            continue
        res.agreed += 1
        res.exact += int(exact)
    if res.samples:
        res.status = "agree" if res.agreed == res.samples else "miss"
    return res


def _grads(op, sample, device: str, cotangents=None):
    torch = _torch()
    (inp, args, kwargs), out = _run(op, sample, device, True)
    out = sample.output_process_fn_grad(out)
    outs = [t for t in _flat(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    leaves = [t for t in _flat((inp, args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not leaves:
        return None, None
    if cotangents is None:
        g = torch.Generator().manual_seed(SEED)
        cotangents = [torch.randn(t.shape, generator=g, dtype=t.dtype) if t.is_floating_point() else None
                      for t in outs]
    cts = [None if c is None else c.to(o.device) for o, c in zip(outs, cotangents, strict=True)]
    pairs = [(o, c) for o, c in zip(outs, cts, strict=True) if c is not None]
    grads = torch.autograd.grad([o for o, _ in pairs], leaves, [c for _, c in pairs], allow_unused=True)
    return list(grads), cotangents


def check_backward(op, max_samples: int = DEFAULT_MAX_SAMPLES) -> PhaseResult:
    res = PhaseResult("not_runnable")
    samples = _samples(op, True, max_samples, res)
    if samples is None:
        return res
    for sample in samples:
        try:
            expected, cotangents = _grads(op, sample, "cpu")
        except Exception:
            continue
        if expected is None:
            continue
        res.samples += 1
        try:
            actual, _ = _grads(op, sample, "npu", cotangents)
            if actual is None:
                raise Mismatch("no differentiable outputs on npu")
            exact = compare(expected, actual)
        except Mismatch as e:
            _fail(res, f"mismatch: {e}", sample)
            continue
        except Exception as e:
            _fail(res, f"npu error: {_short(e)}", sample, e)
            continue
        res.agreed += 1
        res.exact += int(exact)
    if res.samples:
        res.status = "agree" if res.agreed == res.samples else "miss"
    return res


def _fail(res: PhaseResult, reason: str, sample, err: BaseException | None = None) -> None:
    if res.reason:
        return
    res.reason = reason
    res.sample = _describe(sample)
    if err is not None:
        frames = traceback.extract_tb(err.__traceback__)[-3:]
        res.reason += " | at " + "; ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames)


def check_entry(op, max_samples: int = DEFAULT_MAX_SAMPLES, backward: bool = True) -> EntryResult:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fwd = check_forward(op, max_samples)
        bwd = check_backward(op, max_samples) if backward and _supports_backward(op) else None
    return EntryResult(entry_id(op), fwd, bwd, round(time.perf_counter() - start, 3))


# --- worker / driver ----------------------------------------------------------------------------------------------


def _worker(args) -> int:
    torch = _torch()
    torch.set_num_threads(1)
    enable_emulator()
    op_db = load_op_db()
    ops = float32_entries(op_db, args.ops)
    skip = set(args.skip or ())
    with open(args.worker_out, "a", buffering=1) as log:
        for op in ops:
            eid = entry_id(op)
            if eid in skip:
                continue
            log.write(json.dumps({"event": "start", "entry": eid}) + "\n")
            result = check_entry(op, args.max_samples, not args.no_backward)
            log.write(json.dumps({"event": "result", **asdict(result)}) + "\n")
    return 0


def _read_log(path: Path):
    started, results = [], {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec["event"] == "start":
                started.append(rec["entry"])
            else:
                results[rec["entry"]] = rec
    return started, results


def _crash_result(entry: str, code: int) -> dict:
    phase = asdict(PhaseResult("miss", 1, 0, 0, f"the process died (exit code {code}) running this entry"))
    return {"event": "result", "entry": entry, "forward": phase, "backward": None, "seconds": 0.0, "extra": {}}


def sweep(args) -> list[dict]:
    """Run the workers until every entry has a result; returns the results in order."""
    log = Path(args.json).with_suffix(".log.jsonl")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    crashed: dict[str, dict] = {}
    while True:
        _, done = _read_log(log)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker-out", str(log),
               "--max-samples", str(args.max_samples)]
        if args.no_backward:
            cmd.append("--no-backward")
        if args.ops:
            cmd += ["--ops", *args.ops]
        skip = sorted(set(done) | set(crashed))
        if skip:
            cmd += ["--skip", *skip]
        proc = subprocess.run(cmd, stdout=sys.stderr)
        started, done = _read_log(log)
        if proc.returncode == 0:
            break
        unfinished = [e for e in started if e not in done and e not in crashed]
        if not unfinished:
            raise SystemExit(f"worker failed (exit code {proc.returncode}) before starting any entry")
        crashed[unfinished[-1]] = _crash_result(unfinished[-1], proc.returncode)
        print(f"[sweep] worker died in {unfinished[-1]} (exit {proc.returncode}); continuing", file=sys.stderr)
    started, done = _read_log(log)
    done.update(crashed)
    order = list(dict.fromkeys(started))
    return [done[e] for e in order if e in done]


def summarise(results: list[dict]) -> dict:
    def phase(name):
        rows = [r for r in results if r.get(name)]
        runnable = [r for r in rows if r[name]["status"] != "not_runnable"]
        agreed = [r for r in runnable if r[name]["status"] == "agree"]
        exact = [r for r in agreed if r[name]["exact"] == r[name]["samples"]]
        samples = sum(r[name]["samples"] for r in runnable)
        samples_agreed = sum(r[name]["agreed"] for r in runnable)
        return {
            "entries_checked": len(rows),
            "runnable": len(runnable),
            "agreed": len(agreed),
            "percent": round(100.0 * len(agreed) / len(runnable), 2) if runnable else 0.0,
            "bit_exact_entries": len(exact),
            "samples": samples,
            "samples_agreed": samples_agreed,
        }

    misses = [
        {"entry": r["entry"], "phase": name, "reason": r[name]["reason"], "sample": r[name]["sample"]}
        for r in results
        for name in ("forward", "backward")
        if r.get(name) and r[name]["status"] == "miss"
    ]
    return {"forward": phase("forward"), "backward": phase("backward"), "misses": misses}


def _print(summary: dict, meta: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"OpInfo sweep on the emulated npu (torch {meta['torch']}, float32)")
    for col in ("phase", "runnable entries", "agreed", "percent", "bit-exact", "samples agreed"):
        table.add_column(col)
    for name in ("forward", "backward"):
        p = summary[name]
        table.add_row(name, str(p["runnable"]), str(p["agreed"]), f"{p['percent']:.2f}%",
                      str(p["bit_exact_entries"]), f"{p['samples_agreed']}/{p['samples']}")
    console.print(table)
    if summary["misses"]:
        miss = Table(title=f"{len(summary['misses'])} misses")
        for col in ("entry", "phase", "reason", "first failing sample"):
            miss.add_column(col, overflow="fold")
        for m in summary["misses"]:
            miss.add_row(m["entry"], m["phase"], m["reason"], m["sample"])
        console.print(miss)
    console.print(f"JSON: {meta['json']}  ({meta['seconds']:.0f} s)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", help="only these entries (OpInfo name or name.variant)")
    ap.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES, help="samples per entry and phase")
    ap.add_argument("--no-backward", action="store_true", help="forward only")
    ap.add_argument("--json", default=str(Path("out") / "opinfo_sweep.json"), help="where to write the results")
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--skip", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker_out:
        return _worker(args)
    start = time.perf_counter()
    results = sweep(args)
    summary = summarise(results)
    torch = _torch()
    meta = {"torch": torch.__version__, "json": args.json, "seconds": time.perf_counter() - start,
            "max_samples": args.max_samples}
    Path(args.json).write_text(json.dumps({**meta, **summary, "entries": results}, indent=1))
    _print(summary, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
