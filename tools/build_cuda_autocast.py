"""Write ``src/ascendify/data/cuda_autocast.json``: PyTorch's CUDA autocast op lists, by cast policy.

PyTorch registers its CUDA autocast kernels (``aten/src/ATen/autocast_mode.cpp``, dispatch key ``AutocastCUDA``) in
every build, CPU-only included, so the op set is read from the running dispatcher
(``torch._C._dispatch_get_registrations_for_dispatch_key``). The policy of each op:

- ops torch_npu also lists (its ``AutoCastOps.cpp`` copies CUDA's lists; ``data/npu_kernels.json``): the same
  policy, spot-checked here by replaying a call on fake CUDA tensors under CUDA autocast;
- ops only CUDA lists: classified by such a replay (float32 in, float16 out: ``lower_precision_fp``; float16 in,
  float32 out: ``fp32``; float16 with float16 stays float16 but float16 with float32 gives float32: ``promote``).

Exit 1 when an op of the dispatcher's set is neither in torch_npu's lists nor classified here, or a spot check
disagrees.

    python tools/build_cuda_autocast.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def _cases():
    import torch
    import torch.nn.functional as F

    h = torch.empty(2, 3, 8, 8, dtype=torch.float16)
    h1 = torch.empty(2, 3, 8, dtype=torch.float16)
    h3 = torch.empty(1, 2, 4, 4, 4, dtype=torch.float16)
    v16, v32 = torch.empty(5, dtype=torch.float16), torch.empty(5)

    def up(x, mode, **kw):
        return (F.interpolate, (x,), dict(scale_factor=2, mode=mode, **kw))

    # op -> (fn, fp16 args, kwargs[, fp32 args for lower-precision checks][, mixed args for promote checks])
    return {
        "upsample_nearest1d": up(h1, "nearest"), "_upsample_nearest_exact1d": up(h1, "nearest-exact"),
        "upsample_nearest2d": up(h, "nearest"), "_upsample_nearest_exact2d": up(h, "nearest-exact"),
        "upsample_nearest3d": up(h3, "nearest"), "_upsample_nearest_exact3d": up(h3, "nearest-exact"),
        "upsample_linear1d": up(h1, "linear"), "upsample_bilinear2d": up(h, "bilinear"),
        "_upsample_bilinear2d_aa": up(h, "bilinear", antialias=True), "upsample_bicubic2d": up(h, "bicubic"),
        "_upsample_bicubic2d_aa": up(h, "bicubic", antialias=True), "upsample_trilinear3d": up(h3, "trilinear"),
        "rms_norm": (F.rms_norm, (h, (8,)), {}),
        "linalg_vecdot": (torch.linalg.vecdot, (v16, v16), {}, (v32, v32)),
        "vdot": (torch.vdot, (v16, v16), {}, None, (v16, v32)),
        # spot checks of ops shared with torch_npu's lists
        "softmax": (F.softmax, (h, -1), {}), "layer_norm": (F.layer_norm, (h, (8,)), {}),
        "linear": (F.linear, (h, h[0, 0]), {}, (h.float(), h[0, 0].float())),
        "exp": (torch.exp, (h,), {}), "sum": (torch.sum, (h,), {}), "log_softmax": (F.log_softmax, (h, -1), {}),
        "group_norm": (F.group_norm, (h, 3), {}), "mm": (torch.mm, (h[0, 0], h[0, 0]), {}, (h[0, 0].float(),) * 2),
        "addcmul": (torch.addcmul, (h, h, h), {}, None, (h, h.float(), h)),
    }  # fmt: skip


def classify(case, replay) -> str:
    import torch

    fn, a16, kw, a32, mixed = (*case, None, None)[:5]
    half = torch.float16
    if a32 is not None and replay(fn, a32, kw, half) == "float16":
        return "lower_precision_fp"
    same = replay(fn, a16, kw, half)
    if mixed is not None and same == "float16" and replay(fn, mixed, kw, half) == "float32":
        return "promote"
    if same == "float32":
        return "fp32"
    return "none"


def main() -> int:
    import torch

    from ascendify.core import knowledge
    from ascendify.precision.autocast_policy import replay_dtype

    ops = sorted(o.removeprefix("aten::") for o in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    npu = knowledge.npu_autocast_lists()
    pol: dict[str, str] = {}
    for p in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote", "banned"):
        for o in npu[p]:
            pol[o] = p
    for o in npu["fp32_append_dtype"]:
        pol[o] = "fp32_append_dtype"
    cases = _cases()
    out = {p: [] for p in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote", "banned")}
    append: dict[str, str] = {}
    bad = []
    for op in ops:
        base = op.split(".")[0]
        if op in pol:
            p = pol[op]
            if base in cases:
                got = classify(cases[base], replay_dtype)
                want = {"fp32_set_opt_dtype": "fp32", "fp32_append_dtype": "fp32"}.get(p, p)
                if got != want:
                    bad.append(f"{op}: torch_npu lists it as {p}, the replay says {got}")
        elif base in cases:
            p = classify(cases[base], replay_dtype)
        else:
            bad.append(f"{op}: only CUDA lists it and no replay case classifies it")
            continue
        if p == "fp32_append_dtype":
            append[op] = npu["fp32_append_dtype"][op]
        elif p in out:
            out[p].append(op)
        else:
            bad.append(f"{op}: policy {p}")
    for b in bad:
        print(b, file=sys.stderr)
    doc = {
        "_about": "PyTorch's CUDA autocast op lists by cast policy (what torch.autocast('cuda') casts), used by "
                  "ascendify.precision.autocast_policy to name the rule behind a dtype difference between a CUDA "
                  "model and its NPU port. Op names as 'name' (default overload) or 'name.overload'.",
        "provenance": {
            "source": "PyTorch aten/src/ATen/autocast_mode.cpp, the AutocastCUDA registrations, read from the "
                      f"running dispatcher of torch {torch.__version__}; policies of the ops torch_npu also lists "
                      "taken from its lists (data/npu_kernels.json) and spot-checked, the others classified, by "
                      "replaying calls on fake CUDA tensors under CUDA autocast (tools/build_cuda_autocast.py)",
            "torch": torch.__version__,
            "ops": len(ops),
        },
        "dispatch_key": "AutocastCUDA",
        **out,
        "fp32_append_dtype": append,
    }
    path = ROOT / "src" / "ascendify" / "data" / "cuda_autocast.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {len(ops)} ops")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
