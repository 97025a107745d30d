"""``torch.compile`` on the emulated npu: inductor and torch_npu's Dynamo backends.

torch_npu registers three Dynamo backends (``torch._dynamo.register_backend``) and routes inductor to the
NPU: ``"npu"`` (torchair's graph mode), ``"npugraph_ex"`` and ``"npugraphs"`` (the NPU's ``cudagraphs``).
Under emulation:

- the default backend (inductor), ``"npu"`` and ``"npugraph_ex"`` compile with the CPU's inductor *on the CPU
  aliases*: Dynamo and AOTAutograd trace the program on ``npu`` fake tensors as on a device; each graph
  inductor gets after the forward/backward partition is rewritten to the CPU (device arguments, the fake
  values' devices, storage sharing kept) and compiled by CPU inductor; at run time the ``npu`` arguments enter
  as zero-copy CPU aliases and the results that were ``npu`` leave as ``npu`` tensors over the same memory.
  The numbers are the CPU's compiled numbers;
- ``"npugraphs"`` runs the AOTAutograd graphs with the emulator's kernels (``aot_eager``): on the CPU, a graph
  replay is the same kernels again.

Ops inside an inductor-compiled graph run CPU code directly: the eager path's per-op counters and fidelity
checks do not see them per call; the report counts the compiled graphs and the ATen ops in them. Random ops inside a graph draw from
inductor's CPU random stream, as compiled CPU code does, not from the npu generator.

An unknown backend name is Dynamo's ``InvalidBackend`` (what torch_npu's process raises too), listing the
registered backends, the three above included.
"""

from __future__ import annotations

import functools

import torch

from ascendify.emulator import runtime

NPU_BACKENDS = ("npu", "npugraph_ex", "npugraphs")
_CPU = torch.device("cpu")
_state = {"installed": False}


def _npu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "npu"


def _cpu_device(a):
    if isinstance(a, torch.device) and a.type == "npu":
        return _CPU
    return a


def to_cpu_graph(gm: torch.fx.GraphModule, example_inputs=()) -> tuple[list[bool], list]:
    """Rewrite ``gm`` (an ATen graph traced on ``npu`` fake tensors) to the CPU in place: device arguments and
    every fake value's device (views keep sharing their base's storage, so inductor's aliasing analysis sees
    what it saw). Returns, per graph output, whether it was an ``npu`` tensor, and ``example_inputs`` on the CPU
    (their own strides: AOTAutograd restrides a backward's inputs to what the compiled forward produced)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_map

    bases: dict = {}

    def fake(v):
        if not (isinstance(v, FakeTensor) and v.device.type == "npu"):
            return _cpu_device(v)
        with v.fake_mode:
            st = v.untyped_storage()
            key = id(st) if st is None else st._cdata
            base = bases.get(key)
            if base is None:
                base = bases[key] = torch.empty(st.nbytes(), dtype=torch.uint8, device=_CPU)
            if v.dtype.itemsize and v.dtype != torch.bool:
                out = base.view(v.dtype).as_strided(v.size(), v.stride(), v.storage_offset())
            else:
                out = torch.empty_strided(v.size(), v.stride(), dtype=v.dtype, device=_CPU)
        return out

    out = gm.graph.output_node().args[0]
    outputs = [isinstance(o, torch.fx.Node) and _npu(o.meta.get("val"))
               for o in (out if isinstance(out, (list, tuple)) else [out])]
    for n in gm.graph.nodes:
        n.args = tree_map(_cpu_device, n.args)
        n.kwargs = tree_map(_cpu_device, n.kwargs)
        for k in ("val", "example_value"):
            if k in n.meta:
                n.meta[k] = tree_map(fake, n.meta[k])
    gm.recompile()
    return outputs, [fake(e) if isinstance(e, torch.Tensor) else e for e in example_inputs]


def _record_graph(gm) -> None:
    """Count the compiled graph and its ops (once per compile) in the emulator's report."""
    rec = runtime.recorder
    rec.compiled_graphs += 1
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method", "call_module"):
            t = n.target
            rec.graph_ops[t if isinstance(t, (str, torch._ops.OpOverload)) else getattr(t, "__name__", str(t))] += 1


def npu_inner_compile(gm, example_inputs, **kwargs):
    """inductor's ``inner_compile`` for a graph traced on ``npu``: compile it on the CPU, run it on aliases."""
    from torch._inductor.compile_fx import compile_fx_inner

    from ascendify.emulator.device.tensors import adopt_fresh, cpu_alias

    _record_graph(gm)
    was_npu, inputs = to_cpu_graph(gm, example_inputs)
    compiled = compile_fx_inner(gm, inputs, **kwargs)

    def run(args: list):
        dev = 0
        conv = []
        for a in args:
            if _npu(a):
                dev = a.get_device()  # the graph's device: its npu arguments share one
                a = cpu_alias(a)
            conv.append(a)
        args.clear()
        outs = compiled(conv)
        return [adopt_fresh(o, dev) if back and isinstance(o, torch.Tensor) else o
                for o, back in zip(outs, was_npu, strict=False)] + list(outs[len(was_npu):])

    run._boxed_call = True
    run.compiled = compiled  # inductor's output code, for whoever inspects it
    return run


def _inputs_on_npu(example_inputs) -> bool:
    return any(_npu(t) for t in example_inputs)


def _compile_fx(orig, model_, example_inputs_, inner_compile=None, *args, **kwargs):
    """inductor's ``compile_fx``: graphs on ``npu`` get :func:`npu_inner_compile` (AOTAutograd's cache is
    bypassed for them: a cached CPU graph would skip the alias wrapping)."""
    from torch._inductor.compile_fx import compile_fx_inner

    if inner_compile is None:
        inner_compile = compile_fx_inner
    if not _inputs_on_npu(example_inputs_) or inner_compile is not compile_fx_inner:
        return orig(model_, example_inputs_, inner_compile, *args, **kwargs)
    with torch._functorch.config.patch(enable_autograd_cache=False):
        return orig(model_, example_inputs_, npu_inner_compile, *args, **kwargs)


def npu_backend(gm, example_inputs, **kwargs):
    """The emulator's ``"npu"``/``"npugraph_ex"`` backend: inductor on the CPU aliases."""
    from torch._inductor import compile_fx as cfx

    return cfx.compile_fx(gm, example_inputs, **kwargs)


def npugraph_ex_backend(gm, example_inputs, **kwargs):
    """The emulator's ``"npugraph_ex"``: as ``"npu"`` (its own function: Dynamo keys its caches on it)."""
    return npu_backend(gm, example_inputs, **kwargs)


def npugraphs_backend(gm, example_inputs, **kwargs):
    """The emulator's ``"npugraphs"``: the AOTAutograd graphs on the emulator's kernels (a replay of a captured
    graph on the CPU is those kernels again)."""
    from torch._dynamo.backends.registry import lookup_backend

    _record_graph(gm)
    return lookup_backend("aot_eager")(gm, example_inputs, **kwargs)


def install() -> None:
    """Register torch_npu's backends and route inductor on ``npu`` graphs; idempotent. Imports Dynamo (about a
    second), so it runs at the first ``torch.compile`` (or ``ascendify run``'s compile redirect), not at
    ``enable()``."""
    if _state["installed"]:
        return
    _state["installed"] = True
    import torch._dynamo
    from torch._dynamo.backends import registry
    from torch._inductor import compile_fx as cfx

    from ascendify.emulator.compile import events

    p = runtime.patches
    for name, fn in (("npu", npu_backend), ("npugraph_ex", npugraph_ex_backend), ("npugraphs", npugraphs_backend)):
        if name not in registry._COMPILER_FNS:
            torch._dynamo.register_backend(fn, name=name)
            p.on_restore(lambda n=name: (registry._COMPILER_FNS.pop(n, None), registry._BACKENDS.pop(n, None)))
    p.set(cfx, "compile_fx", functools.partial(_compile_fx, cfx.compile_fx))
    events.install()
    p.on_restore(lambda: _state.update(installed=False))


def install_on_compile() -> None:
    """Patch ``torch.compile`` so that the first call installs the backends (cheap until then)."""
    orig = torch.compile

    @functools.wraps(orig)
    def compile(*args, **kwargs):
        install()
        return orig(*args, **kwargs)

    runtime.patches.set(torch, "compile", compile)
