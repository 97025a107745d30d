"""``python -m ascendify.port.lockstep_job``: the compare stage's job: lockstep of a model discovered in two
runs, on the batch it received.

The golden is the original program's model (a CPU copy taken at its first call, with the weights it had then),
run on the CPU in float32; the target is the migrated program's model, on the target device under the autocast
policy the migrated run used. Both come from :mod:`ascendify.port.observe`'s files (cloudpickle, the user's
classes by value), so the two ``model.py`` never meet on ``sys.path``.

``compare_models(..., backward=True)`` does the work (the code ``ascendify compare`` uses): the real weights are
compared before anything runs (``precision.weights``): a parameter or buffer that differs is a finding and the
target keeps its own weights; only when *every* randomly initialised parameter differs (two random
initialisations, e.g. a model built on the device with another generator) are the golden weights copied, and the
verdict says so. Then one backward on both sides compares the gradients module by module (``precision.gradients``).
Writes ``compare.json``/``.csv``/``.html`` (as ``ascendify compare``), ``weights.json`` and ``gradients.json``
(``gradients.summary``) into the output folder; exit status 0 match (or not comparable: a model that draws random
numbers in its forward, see :func:`draws_by_module`), 1 divergence, 3 the models or the batch could
not be loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from ascendify.port.observation import Observation, is_factory


def pick_from_runs(runs: str, select: str | None = None) -> tuple[str, str, str, str | None, str] | str:
    """``(golden pickle, target pickle, batch, target autocast dtype, model name)`` for the main model of the two
    observed runs (or the one ``select`` names: see :meth:`Observation.select_model`), or a sentence saying why
    there is none."""
    import os

    sides = {}
    for side in ("golden", "target"):
        found = Observation.load(os.path.join(runs, side, "observe.json"))
        if found is None:
            return f"the {side} run left no observe.json"
        sides[side] = found
    g = sides["golden"].select_model(select)
    if g is None:
        if select:
            names = ", ".join(f"{m.name} ({m.cls})" for m in sides["golden"].models)
            return f"--model {select}: no discovered model has that name or class (discovered: {names or 'none'})"
        return "the original program called no model (no nn.Module with parameters)"
    tms = sides["target"].models
    t = next((m for m in tms if m.index == g.index and m.cls == g.cls), None) or next(
        (m for m in tms if m.cls == g.cls), None)
    if t is None:
        return f"the migrated program never called a {g.cls}"
    for side, m in (("original", g), ("migrated", t)):
        if not m.file and not is_factory(select):
            return (f"the {side} model {m.cls} could not be captured ({m.snapshot_note or 'no file'}): "
                    "name how to build it with --model FILE.py:FACTORY(...)")
    if not g.batch_file:
        return f"the first batch of {g.cls} could not be captured"
    ac = t.first_call.autocast if t.first_call is not None else None
    dtype = ac.dtype if ac is not None and ac.enabled else None
    name = f"{g.label} ({g.cls}, {g.params:,} parameters)"
    if is_factory(select):
        return ("", "", os.path.join(runs, "golden", g.batch_file), dtype,
                f"{select} (built from the spec; batch of the discovered {g.cls})")
    return (os.path.join(runs, "golden", g.file), os.path.join(runs, "target", t.file),
            os.path.join(runs, "golden", g.batch_file), dtype, name)


def _build(spec: str, project: str | None, migrated: str | None) -> tuple[Any, Any]:
    """Both models from ``FILE.py:FACTORY(...)``: FILE in the project, then in the migrated copy, each built after
    the same seed (their weights are then checked like the captured ones)."""
    import torch

    from ascendify.workloads import factory

    if not (project and migrated):
        raise ValueError("--model FILE:FACTORY needs --project and --migrated")
    models = []
    for root in (project, migrated):
        torch.manual_seed(0)
        models.append(factory.load_model(spec, root=root))
    return models[0], models[1]


def _load(path: str) -> Any:
    import cloudpickle

    with open(path, "rb") as f:
        return cloudpickle.load(f)


def nonfinite_tensors(model) -> list[str]:
    """The parameters and buffers of ``model`` that hold NaN or inf (floating ones; meta tensors skipped)."""
    import torch

    out = []
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and t.device.type != "meta" and not bool(torch.isfinite(t.detach()).all()):
            out.append(name)
    return out


@contextlib.contextmanager
def draws_by_module(models):
    """Random draws made inside the models' calls while the block runs (a VAE's reparameterisation draws in
    eval mode too), by the dotted path of the innermost module of ``models`` they were made in: ``{path: {"api",
    "calls", "first_at"}}``. The lockstep re-runs each call on the golden inputs: a call that draws gives other
    numbers every time, on any device, so its difference is no error of the port."""
    import torch

    from ascendify.core.patching import Patches
    from ascendify.port.seen import patch_random_draws

    paths = {id(m): name for model in models for name, m in model.named_modules()}
    stack: list[str] = []
    drew: dict[str, dict[str, Any]] = {}

    def on_draw(api: str, dev: str) -> None:
        if dev == "meta" or not stack:
            return
        e = drew.setdefault(stack[-1], {"api": api, "calls": 0, "first_at": _site()})
        e["calls"] += 1

    def pre(mod, args):
        stack.append(paths.get(id(mod), stack[-1] if stack else None))

    def post(mod, args, out):
        if stack:
            stack.pop()

    patches = Patches()
    handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
               torch.nn.modules.module.register_module_forward_hook(post, always_call=True)]
    patch_random_draws(patches, torch, on_draw)
    try:
        yield drew
    finally:
        patches.restore()
        for h in handles:
            h.remove()
        drew.pop(None, None)  # type: ignore[call-overload]  (a module of neither model: a copy the check made)


def _site() -> str:
    """``file:line`` of the nearest frame outside torch and ascendify (the model's own code; a file of a run's
    tree is named from the tree's root)."""
    import os

    from ascendify.program import frames

    f = frames.user_frame(2)
    if f is None:
        return "?"
    fn = f.f_code.co_filename
    rel = fn.split("/tree/", 1)[1].split("/", 1)[-1] if "/tree/" in fn else os.path.basename(fn)
    return f"{rel}:{f.f_lineno}"


def mark_random_calls(result, drew: dict[str, dict[str, Any]]) -> list[str]:
    """The flagged module calls of a lockstep ``result`` that drew random numbers, or hold a module that did,
    become *not comparable* (their difference is the draws'); returns their names. A call that differs without
    drawing stays flagged: a real divergence is never hidden."""
    def covers(path: str | None) -> str | None:
        for d in drew:
            if path is not None and (d == path or path == "" or d.startswith(path + ".")):
                return d
        return None

    out = []
    for n in result.nodes:
        d = covers(n.module) if n.kind == "module" and n.flagged else None
        if d is None:
            continue
        e = drew[d]
        n.flagged, n.not_comparable = False, True
        n.note = (f"not comparable: {'it' if d == n.module else d or '(root)'} draws random numbers in its forward, "
                  f"in eval mode too ({e['api']} at {e['first_at']}): a re-run draws other numbers")
        out.append(n.name)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ascendify.port.lockstep_job", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", help="the runs folder of ascendify port (golden/ and target/ hold observe.json): "
                                   "the main model and its batch are taken from there")
    p.add_argument("--golden", help="the original's model (observe's model-K.pkl)")
    p.add_argument("--target", help="the migrated copy's model")
    p.add_argument("--batch", help="the batch (observe's batch-K.pt, (args, kwargs))")
    p.add_argument("--target-device", default="npu")
    p.add_argument("--autocast", default="none", choices=("none", "bfloat16", "float16"))
    p.add_argument("--train-mode", action="store_true", help="keep the models' training mode (default: eval)")
    p.add_argument("--model", dest="select", default=None,
                   help="with --runs: the discovered model to compare (its name or class), or FILE.py:FACTORY(...) "
                        "to build in --project and --migrated")
    p.add_argument("--project", help="the original project (for --model FILE:FACTORY)")
    p.add_argument("--migrated", help="the migrated copy (for --model FILE:FACTORY)")
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args(argv)
    model_name = None
    if a.runs:
        picked = pick_from_runs(a.runs, a.select)
        if isinstance(picked, str):
            if picked.startswith("--model"):  # the user's choice names nothing: a usage error, not "nothing"
                print(f"lockstep: {picked}", file=sys.stderr)
                return 2
            print(f"lockstep: nothing to compare: {picked}")
            return 4
        a.golden, a.target, a.batch, autocast, model_name = picked
        if a.autocast == "none" and autocast:
            a.autocast = autocast
    elif not (a.golden and a.target and a.batch):
        p.error("give --runs, or --golden, --target and --batch")

    import torch

    from ascendify.device import placement

    if a.target_device.split(":")[0] == "npu":
        try:
            a.target_device = placement.resolve(a.target_device).device
        except placement.DeviceError as e:
            print(f"lockstep: {e}", file=sys.stderr)
            return 3
    try:
        if is_factory(a.select):
            golden, target = _build(a.select, a.project, a.migrated)
        else:
            golden = _load(a.golden)
            target = _load(a.target)
        batch = torch.load(a.batch, weights_only=False)
        args, kwargs = batch if isinstance(batch, tuple) and len(batch) == 2 else ((batch,), {})
    except Exception as e:  # noqa: BLE001 (whatever the unpickling raised, it is this step's failure)
        print(f"lockstep: cannot load the models or the batch: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    bad = nonfinite_tensors(golden)
    if bad:  # the reference computes NaN before any step (weights never initialised): no comparison can hold
        print(f"lockstep: nothing to compare: the original's model has NaN/inf in {len(bad)} tensor(s) before its "
              f"first step ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}): are they initialised?")
        return 4
    return _compare(a, golden, target, args, kwargs, model_name)


def _compare(a: argparse.Namespace, golden: Any, target: Any, args: tuple, kwargs: dict, model_name: str | None
             ) -> int:
    """The lockstep (forward, then one backward), its outputs written; the exit status."""
    import torch

    from ascendify import report
    from ascendify.precision import compare_render as cr
    from ascendify.precision import gradients
    from ascendify.precision.lockstep import compare_models

    ac = None if a.autocast == "none" else getattr(torch, a.autocast)
    settings = dict(kwargs=kwargs, golden_device="cpu", golden_dtype=torch.float32, target_device=a.target_device,
                    target_autocast=ac, eval_mode=not a.train_mode)
    skipped = None
    with draws_by_module((golden, target)) as drew:
        try:
            result = compare_models(golden, target, *args, backward=True, **settings)
        except gradients.LossError as e:  # an output with nothing to backpropagate: forward only, and say why
            skipped = str(e)
            result = compare_models(golden, target, *args, **settings)
    if mark_random_calls(result, drew):
        result.meta["random_draws"] = [{"module": k or "(root)", **v} for k, v in drew.items()]
    weights = dict(result.weights or {})
    report.write_json(f"{a.out}/weights.json", weights)
    grads = {"skipped": skipped} if skipped else gradients.summary(result)
    if not skipped:  # what the backward calls cover: the model's trainable tensors and their elements
        trainable = [p for p in golden.parameters() if p.requires_grad]
        grads["parameter_tensors"] = len(trainable)
        grads["parameters"] = sum(p.numel() for p in trainable)
    report.write_json(f"{a.out}/gradients.json", grads)
    result.meta["model"] = model_name or type(target).__name__
    cr.write_outputs(result, a.out)
    n = len(result.weight_findings)
    verdict = result.verdict
    print(f"lockstep: {verdict}" + (f"; {n} parameter(s) differ before any step" if n else "")
          + ("; weights copied (every parameter differed)" if weights.get("copied") else "")
          + (f"; gradients: {grads.get('verdict') or grads.get('skipped')}"))
    return 0 if verdict in ("match", "nothing to compare", "not comparable") else 1

if __name__ == "__main__":
    sys.exit(main())
