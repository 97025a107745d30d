"""``ascendify compare``: prove a migrated model computes what the original computed, or say where it first goes wrong.

Three forms (see docs/precision.md):

* ``ascendify compare GOLDEN TARGET -o OUT``: two dumps (``ascendify dump``'s or msprobe's);
* ``ascendify compare --model FILE:FACTORY [--golden-model FILE:FACTORY] [--golden cpu:fp32] [--target npu:bf16]
  [--inputs FILE:FUNC | SPEC] -o OUT``: lockstep, both models in this process with the same weights;
* ``ascendify compare --curves A B [--tolerance 0.05] -o OUT``: two training histories.

Exit codes: 0 match, 1 divergence found or not comparable, 2 usage error, 3 bad input (a dump, history or model
file that cannot be read; the message names the file).
"""

from __future__ import annotations

import argparse
import sys

HELP = "compare two dumps, two models in lockstep, or two training curves; name the first divergence"
DESCRIPTION = """Compare a target against a golden reference and name the first divergence.

  # two dumps (ours or msprobe's)
  ascendify compare GOLDEN_DUMP TARGET_DUMP -o OUT
  # lockstep: both models in one process
  ascendify compare --model FILE:FACTORY --inputs SPEC -o OUT
      [--golden-model FILE:FACTORY] [--golden cpu:fp32] [--target npu:bf16]
      [--backward [--loss FILE:FUNC]] [--copy-weights]
  # training histories (JSON, CSV, TensorBoard, a training log)
  ascendify compare --curves A B [--tolerance 0.05] [--pattern REGEX] -o OUT

FACTORY is a name in FILE (a class or function called with no arguments) or a call expression evaluated in
FILE's namespace, e.g. 'examples/npu_project/models.py:GPT(vocab_size=64, seq_len=16, d_model=32)'.
--inputs is FILE:FUNC (returns a tensor, a tuple of inputs, or a dict of keyword inputs) or shapes:
'4x16:int64:64' (random ids below 64), '2x3x32x32' (standard normal float32), several separated by ',', nested
in (tuples), [lists] and {name=dicts}, keyword inputs as name=...: an LSTM's (x, (h, c)) is
'5x2:int64:40, (1x2x16, 1x2x16)'.
--golden/--target are DEVICE:PRECISION with PRECISION fp32 (no autocast), bf16 or fp16 (autocast in that dtype);
npu is the real NPU where there is one, else the emulated NPU.
Lockstep compares the weights first: a parameter or buffer that differs is a finding (the target keeps its
own) unless --copy-weights, or every parameter differs (two random initialisations: copied, and said).

Exit codes: 0 match, 1 divergence found or not comparable (a random call drew differently), 2 usage
error, 3 bad input."""

PRECISIONS = ("fp32", "bf16", "fp16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("golden", nargs="?", help="golden dump (root, step or rank folder)")
    p.add_argument("target", nargs="?", help="target dump")
    p.add_argument("-o", "--out", default="compare-report", help="output folder (default: %(default)s)")
    p.add_argument("--model", metavar="FILE:FACTORY", help="lockstep: the target model (and the golden one, "
                   "unless --golden-model)")
    p.add_argument("--golden-model", metavar="FILE:FACTORY", help="lockstep: a different golden model (the original "
                   "code of a migrated copy)")
    p.add_argument("--golden", dest="golden_spec", default="cpu:fp32", metavar="DEVICE:PRECISION",
                   help="lockstep golden setting (default: %(default)s)")
    p.add_argument("--target", dest="target_spec", default="npu:bf16", metavar="DEVICE:PRECISION",
                   help="lockstep target setting (default: %(default)s)")
    p.add_argument("--inputs", metavar="FILE:FUNC|SHAPES", help="lockstep inputs (see above)")
    p.add_argument("--level", choices=("module", "mix"), default="module",
                   help="lockstep: module calls only, or module and torch API calls (default: %(default)s)")
    p.add_argument("--copy-weights", action="store_true",
                   help="lockstep: copy the golden weights into the target before comparing (default: compare the "
                   "weights, each differing one is a finding; copied only when every parameter differs)")
    p.add_argument("--backward", action="store_true",
                   help="lockstep: also run one backward on both sides (loss: mean of the squared outputs, or "
                   "--loss) and compare gradients module by module")
    p.add_argument("--loss", metavar="FILE:FUNC", help="lockstep --backward: the loss, FUNC(outputs) -> scalar tensor")
    p.add_argument("--seed", type=int, default=0, help="seed for model construction and random inputs")
    p.add_argument("--curves", nargs=2, metavar=("A", "B"), help="compare two training histories")
    p.add_argument("--tolerance", type=float, default=None,
                   help="curves: relative band (default 0.05); dumps and lockstep: factor on every limit (default 1)")
    p.add_argument("--series", action="append", help="curves: only this series (repeatable)")
    p.add_argument("--pattern", metavar="REGEX", help="curves: read A and B as training logs with this regex (named "
                   "groups are series, 'step' the x value; one unnamed group is 'loss'); without it a log is read "
                   "for the common 'loss X' forms")
    p.add_argument("--step", type=int, default=None, help="dumps: which step (default: the first)")
    p.add_argument("--rank", type=int, default=None, help="dumps: which rank (default: every rank of the golden)")
    p.add_argument("--json", action="store_true", help="print the JSON result on stdout instead of the summary")
    p.add_argument("--overflow", action="store_true",
                   help="lockstep: also run the target once (forward and backward) watching for the first inf/NaN")


def _err(msg: str, code: int) -> int:
    print(f"ascendify compare: {msg}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    forms = sum(bool(x) for x in (args.curves, args.model, args.golden or args.target))
    if forms != 1:
        return _err("give two dumps, or --model FILE:FACTORY, or --curves A B (exactly one of them)", 2)
    if args.tolerance is not None and not 0 < args.tolerance < float("inf"):  # nan or inf would pass everything
        return _err(f"--tolerance must be a positive finite number, not {args.tolerance}", 2)
    if getattr(args, "overflow", False) and not args.model:
        return _err("--overflow runs the target model: it needs --model (for a program, ascendify dump --overflow)", 2)
    from ascendify.core import fileio

    if problem := fileio.folder_problem(args.out):  # before any model is built or dump read
        return _err(f"-o {args.out}: {problem}", 2)
    if not (args.curves or args.model) and not (args.golden and args.target):
        return _err("two dumps are needed: GOLDEN TARGET", 2)
    # one comparison at a time into a folder, never over a user's files (a compare.csv of theirs); an earlier
    # report of ours is replaced whole when the new one is written (a bad input leaves it as it was)
    try:
        with fileio.output_lock(args.out, "ascendify compare"):
            if problem := fileio.foreign_output(args.out, MARKER, "ascendify compare", ours=_earlier_report):
                return _err(problem, 2)
            args.replace_pending = True
            if args.curves:
                return _run_curves(args)
            if args.model:
                return _run_model(args)
            return _run_dumps(args)
    except fileio.OutputLocked as e:
        return _err(str(e), 2)
    except OSError as e:  # the folder (made for the lock) cannot be made
        return _err(f"-o {args.out}: {e.strerror or e}", 2)


# written into the report folder: a later comparison recognises its own earlier report and replaces it
MARKER = ".ascendify-compare.json"
_REPORT_FILES = {f"{stem}.{ext}" for stem in ("compare", "curves") for ext in ("json", "csv", "html")}


def _own_entry(p) -> bool:
    """What a comparison writes at the top of its folder: the report files, ``rank<R>/`` and the marker."""
    import re

    return p.name in _REPORT_FILES or p.name == MARKER or (p.is_dir() and re.fullmatch(r"rank\d+", p.name))


def _earlier_report(folder) -> bool:
    """A report written before the marker existed: only our entries, and a compare.json or curves.json with a
    verdict among them (a user's own compare.csv is not one)."""
    import json

    from ascendify.core.fileio import LOCK_NAME

    entries = [p for p in folder.iterdir() if p.name != LOCK_NAME]
    if not entries or not all(_own_entry(p) for p in entries):
        return False
    for p in entries:
        for f in ([p / "compare.json"] if p.is_dir() else [p]):
            if f.name in ("compare.json", "curves.json") and f.is_file():
                try:
                    return "verdict" in json.loads(f.read_text(encoding="utf-8"))
                except (OSError, ValueError, TypeError):
                    return False
    return False


def _replace_earlier(args) -> None:
    """Before the first report file is written: remove the earlier report of ours, write the marker."""
    if not getattr(args, "replace_pending", False):
        return
    from ascendify.core import fileio

    root = getattr(args, "out_root", None) or args.out
    fileio.remove_entries(root, _own_entry)
    fileio.write_marker(root, MARKER, "ascendify compare")
    args.replace_pending = False


def _emit(result, args, *, curves: bool = False) -> int:
    from ascendify import report
    from ascendify.precision import compare_render as cr

    try:
        _replace_earlier(args)
        if curves:
            written = cr.write_curves_outputs(result, args.out)
        else:
            written = cr.write_outputs(result, args.out)
    except OSError as e:
        return _err(f"cannot write the report to {args.out}: {e}", 3)
    if args.json:
        print(report.dumps_json(result.to_dict()))
    elif curves:
        cr.print_curves(result, written=written)
    else:
        cr.print_summary(result, written=written)
    return 0 if result.verdict in ("match", "nothing to compare") else 1


def _run_curves(args) -> int:
    from ascendify.precision.curves import CurveError, compare_curves

    try:
        res = compare_curves(args.curves[0], args.curves[1], tolerance=args.tolerance or 0.05, series=args.series,
                             pattern=args.pattern)
    except CurveError as e:
        return _err(str(e), 3)
    return _emit(res, args, curves=True)


def _run_dumps(args) -> int:
    from pathlib import Path

    from ascendify.precision.model import DumpError
    from ascendify.precision.msprobe_io import list_steps_ranks

    try:
        from ascendify.precision.dumpcompare import compare_dumps
    except ImportError as e:  # torch-free install
        return _err(f"comparing dumps needs PyTorch ({e})", 3)
    g, t = Path(args.golden), Path(args.target)
    try:
        warned: set = set()
        for p in (g, t):
            if not p.exists():
                raise DumpError(p, "no such file or folder")
            _warn_if_unfinished(p, warned)
        gsr, tsr = _steps_ranks(g, list_steps_ranks), _steps_ranks(t, list_steps_ranks)
        if gsr is None or tsr is None:  # a step or rank folder, or a dump.json: one pair
            return _emit(compare_dumps(g, t, step=args.step, rank=args.rank, tolerance=args.tolerance or 1.0), args)
        step = args.step if args.step is not None else min(s for s, _ in gsr)
        granks = sorted({r for s, r in gsr if s == step})
        tranks = sorted({r for s, r in tsr if s == step})
        if not granks:
            raise DumpError(g, f"no step {step} in the golden dump (has steps {sorted({s for s, _ in gsr})})")
        if not tranks:
            raise DumpError(t, f"no step {step} in the target dump (has steps {sorted({s for s, _ in tsr})})")
        ranks = [args.rank] if args.rank is not None else granks
        for r in ranks:
            if r not in tranks:
                raise DumpError(t / f"step{step}" / f"rank{r}",
                                f"rank {r} is missing from the target dump (it has ranks {tranks}; golden {granks})")
            if r not in granks:
                raise DumpError(g / f"step{step}" / f"rank{r}", f"rank {r} is missing from the golden dump")
        results = [compare_dumps(g, t, step=step, rank=r, tolerance=args.tolerance or 1.0) for r in ranks]
    except DumpError as e:
        return _err(str(e), 3)
    if len(results) == 1:
        return _emit(results[0], args)
    worst = 0
    out = args.out_root = args.out
    for r, res in zip(ranks, results, strict=True):
        args.out = str(Path(out) / f"rank{r}")
        print(f"rank {r}:")
        worst = max(worst, _emit(res, args))
    args.out = out
    return worst


def _warn_if_unfinished(path, warned: set) -> None:
    """Say when ``path`` belongs to an ``ascendify dump`` that has not finished (interrupted, or still running):
    its last step may be missing or partial, though the folder looks like a complete run."""
    from ascendify.core.fileio import read_marker
    from ascendify.precision.msprobe_io import DUMP_MARKER

    for root in [path, *list(path.resolve().parents)[:3]]:
        marker = read_marker(root, DUMP_MARKER)
        if marker is not None:
            if marker.get("finished") is False and root.resolve() not in warned:
                warned.add(root.resolve())
                print(f"ascendify compare: warning: {root} is from a dump that did not finish ({marker.get('program')}"
                      f", started {marker.get('time')}): interrupted, or still running; its last step may be "
                      "missing", file=sys.stderr)
            return


def _steps_ranks(path, lister):
    """``(step, rank)`` pairs of a dump root, or None for a step/rank folder or a dump.json."""
    from ascendify.precision.model import DumpError

    if path.is_file() or (path / "dump.json").is_file():
        return None
    if path.name.startswith("step") and not any(path.glob("step*")):
        return None
    try:
        pairs = lister(path)
    except DumpError:
        raise
    if not pairs:
        raise DumpError(path, "no step*/rank*/dump.json inside: not a dump folder")
    return pairs


# -------------------------------------------------------------------------------------------------------------
# lockstep


class SettingError(ValueError):
    """A bad ``--golden``/``--target`` setting: a usage error (exit 2)."""

    usage = True


def _parse_setting(spec: str, what: str) -> tuple[str, str]:
    parts = spec.strip().split(":")
    prec = "fp32"
    last = parts[-1].lower()
    if last in PRECISIONS:
        prec = parts.pop().lower()
    elif len(parts) > 1 and not last.isdigit():
        raise SettingError(f"{what} {spec}: unknown precision {parts[-1]!r}: use {', '.join(PRECISIONS)}")
    device = ":".join(parts) or "cpu"
    return device, prec


def run_model_compare(args):
    """Build the models and inputs, run ``compare_models``; returns the result (raises ValueError/OSError on bad
    input)."""
    import torch

    from ascendify.device import placement
    from ascendify.precision import loading
    from ascendify.precision.lockstep import compare_models
    from ascendify.workloads import factory

    gdev, gprec = _parse_setting(args.golden_spec, "--golden")
    tdev, tprec = _parse_setting(args.target_spec, "--target")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    resolved = {}
    for dev, what in ((gdev, f"--golden {args.golden_spec}"), (tdev, f"--target {args.target_spec}")):
        try:
            resolved[dev] = placement.resolve(dev).device if dev.split(":")[0] != "cpu" else dev
        except placement.DeviceSpecError as e:
            raise SettingError(f"{what}: {e}") from None
        except placement.DeviceError as e:  # a device this machine does not have: exit 3, as in train and bench
            raise ValueError(f"{what}: {e}") from None
    torch.manual_seed(args.seed)
    target = factory.load_model(args.model)
    if args.golden_model:
        torch.manual_seed(args.seed)
        golden = factory.load_model(args.golden_model)
    else:
        golden = target
    inputs, kwargs = loading.batch(args.inputs, target, seed=args.seed)
    loss_fn = None
    if getattr(args, "loss", None):
        if not getattr(args, "backward", False):
            raise SettingError("--loss needs --backward")
        loss_fn = factory.load_function(args.loss)
    return compare_models(
        golden,
        target,
        *inputs,
        kwargs=kwargs,
        golden_device=resolved[gdev],
        golden_dtype=dtypes[gprec] if gprec != "fp16" and gprec != "bf16" else torch.float32,
        target_device=resolved[tdev],
        target_autocast=None if tprec == "fp32" else dtypes[tprec],
        level=args.level,
        tolerance=args.tolerance or 1.0,
        copy_weights=True if getattr(args, "copy_weights", False) else None,
        backward=bool(getattr(args, "backward", False)),
        loss_fn=loss_fn,
    )


def _overflow_run(args, result) -> None:
    """``--overflow``: the target model (built again with the same seed) run once on the target setting under the
    overflow watch; the finding goes in the result (``meta["overflow"]``) and on stderr."""
    import torch

    from ascendify.device import placement
    from ascendify.precision import loading, overflow
    from ascendify.workloads import factory

    tdev, tprec = _parse_setting(args.target_spec, "--target")
    device = placement.resolve(tdev).device if tdev.split(":")[0] != "cpu" else tdev
    torch.manual_seed(args.seed)
    target = factory.load_model(args.model)
    inputs, kwargs = loading.batch(args.inputs, target, seed=args.seed)
    ac = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[tprec]
    s = overflow.target_run(target, inputs, kwargs, device, ac)
    result.meta["overflow"] = s
    if not args.json:
        overflow.print_summary(s, title="ascendify compare --overflow")


def _run_model(args) -> int:
    try:
        result = run_model_compare(args)
        if getattr(args, "overflow", False):
            _overflow_run(args, result)
    except ImportError as e:
        return _err(f"lockstep comparison needs PyTorch ({e})", 3)
    except (ValueError, OSError, SyntaxError, AttributeError, TypeError) as e:
        return _err(str(e), 2 if getattr(e, "usage", False) else 3)
    return _emit(result, args)
