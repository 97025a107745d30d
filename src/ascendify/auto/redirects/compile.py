"""``torch.compile`` settings that name CUDA graphs.

``backend="cudagraphs"`` becomes the target's graph backend where it has one (``"npugraphs"``, registered by
torch_npu on a real NPU and by the emulator on the emulated one); elsewhere (the CPU) it compiles with
``"aot_eager"``, which is the cudagraphs backend without the graph capture. ``mode="reduce-overhead"`` (inductor
plus CUDA graphs) keeps its meaning on a real NPU (torch_npu's inductor) and becomes the default mode
elsewhere; inductor's ``options={"triton.cudagraphs": ...}`` is dropped where there are no CUDA graphs. Each
change is recorded in run's report: a redirect where the target has the equivalent, *no effect* with the reason
where it runs without graphs. On the emulated NPU inductor compiles with the CPU's code generator on the npu
memory (:mod:`ascendify.emulator.compile.backends`), recorded as a redirect. Everything else passes through
unchanged.
"""

from __future__ import annotations

import functools
from typing import Any


def _has_backend(name: str) -> bool:
    try:
        from torch._dynamo import list_backends

        return name in list_backends(exclude_tags=())
    except Exception:
        return False


def install(s) -> None:
    import torch

    rec, t = s.rec, s.target
    real_npu = t.device_type == "npu" and t.kind != "emulated"
    emulated = t.device_type == "npu" and t.kind == "emulated"
    orig = torch.compile

    @functools.wraps(orig)
    def compile(*args: Any, **kwargs: Any):
        backend = kwargs.get("backend")
        if emulated:
            from ascendify.emulator.compile import backends

            backends.install()  # torch_npu's backend names, as an NPU process has them
        if backend == "cudagraphs":
            if (real_npu or emulated) and _has_backend("npugraphs"):
                kwargs["backend"] = "npugraphs"
                rec.hit("torch.compile(backend='cudagraphs')", "backend 'npugraphs'")
            else:
                kwargs["backend"] = "aot_eager"
                rec.noop("torch.compile(backend='cudagraphs')",
                         f"no CUDA graphs on {t.name}: compiled with backend 'aot_eager' (the same graph, "
                         "without graph capture)")
        if kwargs.get("mode") == "reduce-overhead" and not real_npu:
            kwargs["mode"] = None
            rec.noop("torch.compile(mode='reduce-overhead')",
                     f"no CUDA graphs on {t.name}: compiled with the default mode")
        opts = kwargs.get("options")
        if isinstance(opts, dict) and "triton.cudagraphs" in opts and not real_npu:
            kwargs["options"] = {k: v for k, v in opts.items() if k != "triton.cudagraphs"}
            rec.noop("torch.compile(options={'triton.cudagraphs'})",
                     f"no CUDA graphs on {t.name}: option dropped")
        if emulated and kwargs.get("backend", "inductor") == "inductor":
            rec.hit("torch.compile(backend='inductor')",
                    "the emulated npu's inductor: the CPU's code generator on the npu memory")
        return orig(*args, **kwargs)

    s.patches.set(torch, "compile", compile)
