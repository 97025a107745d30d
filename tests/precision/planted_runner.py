"""Run the planted-defect suite in one setting and report, per twin, what lockstep and dump+compare name.

    python planted_runner.py SETTING OUT_DIR [GOLDEN_DUMP]

SETTING: ``cpu`` (target fp32 on the CPU), ``aten_default`` (the same, meant to run with
``ATEN_CPU_CAPABILITY=default`` in the environment: non-vectorised kernels, harmless rounding differences) or
``npu_bf16`` (target on the emulated NPU under ``torch.autocast("npu", dtype=torch.bfloat16)``; golden fp32 on
the CPU). Dumps are statistics-mode, ``mix`` level, forward only. The backward twins run in lockstep with
``backward=True`` in the same setting (``backward`` in the output). The golden dump is made here unless
GOLDEN_DUMP names one (the ATEN test passes the one made with vectorised kernels). Prints one JSON object.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _models():
    name = "ascendify_planted_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "models.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _dump(model, x, path: Path, autocast_dtype=None, device="cpu"):
    from ascendify.precision import dump

    model = model.to(device).eval()
    x = x.to(device)
    ctx = torch.autocast(device, dtype=autocast_dtype) if autocast_dtype else torch.autocast("cpu", enabled=False)
    with torch.no_grad(), dump(model, path, level="mix", mode="stats", backward=False), ctx:
        model(x)


def golden_dump(path: Path) -> Path:
    M = _models()
    _dump(M.reference(), M.inputs(), path)
    return path


def run_suite(setting: str, out: Path, golden: Path | None = None, cases=None) -> dict:
    from ascendify.precision import compare_dumps, compare_models
    from ascendify.precision.lockstep import copy_weights

    M = _models()
    torch.set_num_threads(1)
    kw, device, ac = {}, "cpu", None
    if setting == "npu_bf16":
        import ascendify.emulator as emu

        emu.enable()
        device, ac = "npu", torch.bfloat16
        kw = {"target_device": "npu", "target_autocast": torch.bfloat16}
    out.mkdir(parents=True, exist_ok=True)
    golden = golden or golden_dump(out / "golden")
    results = {}
    for name in cases or M.TWINS:
        planted = M.TWINS[name][1]
        # the twins rebuild the module they change (fresh weights there): their defects are in the code
        lock = compare_models(M.reference(), M.twin(name), M.inputs(), copy_weights=True, **kw)
        fd = lock.first_divergence
        twin = M.twin(name)
        copy_weights(M.reference(), twin)
        _dump(twin, M.inputs(), out / name, ac, device)
        dres = compare_dumps(golden, out / name)
        dfd = dres.first_divergence
        results[name] = {
            "planted": planted,
            "end_to_end_cosine": lock.end_to_end["cosine"],
            "lockstep": {"first": fd.module if fd else None, "api": fd.api if fd else None,
                         "flagged": len(lock.flagged), "reasons": fd.reasons if fd else []},
            "dump": {"first": dfd.module if dfd else None, "api": dfd.api if dfd else None,
                     "flagged": len(dres.flagged), "reasons": dfd.reasons if dfd else []},
        }
    return {"setting": setting, "capability": torch.backends.cpu.get_cpu_capability(), "cases": results,
            "backward": backward_suite(kw)}


def backward_suite(kw: dict) -> dict:
    """Lockstep with ``backward=True`` on every backward twin (``models.BACKWARD_TWINS``), in the setting ``kw``."""
    import ascendify.emulator as emu
    from ascendify.precision import compare_models
    from ascendify.precision.gradients import default_loss

    # the "cpu" suite runs in the pytest process: the emulated NPU, which later tests enable in this process, must
    # exist before the first backward() (autograd sizes its device queues then)
    emu.enable()
    M = _models()
    out = {}
    for name, (_g, _t, planted, scale) in M.BACKWARD_TWINS.items():
        golden, target = M.backward_pair(name)
        loss = None if scale is None else (default_loss, lambda o, s=scale: default_loss(o) * s)
        r = compare_models(golden, target, M.inputs(), backward=True, loss_fn=loss, **kw)
        fd = r.first_divergence
        out[name] = {"planted": planted, "first": (fd.name if fd.name == "(loss)" else fd.module) if fd else None,
                     "phase": fd.phase if fd else None, "flagged": len(r.flagged), "verdict": r.verdict,
                     "reasons": fd.reasons if fd else []}
    return out


if __name__ == "__main__":
    setting, out = sys.argv[1], Path(sys.argv[2])
    golden = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    print(json.dumps(run_suite(setting, out, golden)))
