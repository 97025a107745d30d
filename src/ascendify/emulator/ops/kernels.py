"""The ``npu`` backend's kernels: run the stock CPU kernel on zero-copy CPU aliases.

Every ATen op that reaches the PrivateUse1 dispatch key lands in :func:`_fallback` (one boxed Python kernel)
or, for the hot structured ops, in a kernel registered directly for that op (:func:`register`). Both go
through :func:`_run`, which

1. maps ``npu`` tensors (also inside lists) to CPU aliases, refuses non-scalar CPU tensors mixed in (a real
   device does too), maps ``device=npu`` to the CPU and injects the device's RNG generator;
2. runs the CPU op;
3. returns written arguments (in-place and ``out=``) as the original ``npu`` tensors and adopts fresh
   results as ``npu`` tensors, without copying.

View ops (outputs alias inputs, nothing written) and in-place view ops redispatch straight to the CPU
kernel with the ``npu`` tensors: CPU view kernels only touch metadata. A few ops need their own kernel
(copies across devices, ``resize_``, ``set_``, convolution's "overrideable" pair: :mod:`.special`).

Every per-op decision (own kernel, CPU arguments allowed, no NPU kernel, fast path) comes from the one table,
:mod:`.table`; per-op schema facts (kind, where written outputs come from) from :mod:`.opinfo`, cached.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ascendify.emulator import runtime
from ascendify.emulator.device import rng
from ascendify.emulator.device.tensors import adopt, adopt_fresh, cpu_alias
from ascendify.emulator.ops import cfast, fastpath, fidelity, table
from ascendify.emulator.ops.mismatch import mixed_error as _mixed_error
from ascendify.emulator.ops.mismatch import two_devices as _two_devices
from ascendify.emulator.ops.opinfo import _INFO, OpInfo, info, scalar_overload

_CPU_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CPU = torch.device("cpu")
_F64 = (torch.float64, torch.complex128)
_rec_ops = runtime.recorder.ops
_settings = runtime.settings
_check_index = runtime.check_index
_current = runtime.current_device

# --------------------------------------------------------------------------------------------------------
# argument conversion


class _Conv:
    """Argument conversion state for one call (device seen, CPU tensor seen)."""

    __slots__ = ("index", "cpu_seen", "inputs")

    def __init__(self):
        self.index = -1
        self.cpu_seen = False
        self.inputs: list = []

    def tensor(self, a: Tensor) -> Tensor:
        d = a.get_device()
        if d >= 0:
            if d != self.index:
                if self.index >= 0:
                    raise _two_devices(self.index, d)
                self.index = d
            c = cpu_alias(a)
            self.inputs.append(c)
            return c
        if a.dim() and not a.is_meta:
            self.cpu_seen = True
        return a

    def value(self, a):
        if isinstance(a, Tensor):
            return self.tensor(a)
        if type(a) in (list, tuple) and a:
            if isinstance(a[0], Tensor) or (None in a and any(isinstance(x, Tensor) for x in a)):
                return [self.tensor(x) if isinstance(x, Tensor) else x for x in a]
        return a


def _device_kw(conv: _Conv, kwargs: dict, ckw: dict) -> bool:
    """Map ``device=npu[:i]`` to the CPU; True when the result stays on npu."""
    dev = kwargs.get("device")
    if dev is None:
        return True
    if dev.type != "npu":
        return False
    i = _check_index(dev.index)
    if conv.index >= 0 and conv.index != i:
        raise _two_devices(conv.index, i)
    conv.index = i
    ckw["device"] = _CPU
    return True


def _adopt_result(inf: OpInfo, res, index: int):
    if isinstance(res, Tensor):
        if res.dtype in _F64:
            fidelity.float64(inf.name, res.dtype)
        return adopt(res, index)
    if isinstance(res, tuple | list):
        out = [_adopt_result(inf, r, index) if isinstance(r, Tensor | tuple | list) else r for r in res]
        return tuple(out) if isinstance(res, tuple) else out
    return res


# --------------------------------------------------------------------------------------------------------
# the generic kernel


def _call(inf: OpInfo, cargs, ckw):
    """Run the CPU kernel. A composite ``.Scalar`` overload (``x % 3``) reaches a direct ``.Tensor`` kernel with
    its wrapped-number scalar turned back into a Python number by the boxed call: let the overload packet pick
    the ``.Scalar`` overload again, which wraps it exactly as the CPU does."""
    try:
        return inf.call(*cargs, **ckw)
    except RuntimeError as e:
        if "Expected a value of type 'Tensor'" not in str(e):
            raise
        return scalar_overload(inf, cargs)(*cargs, **ckw)


def _run(inf: OpInfo, args: tuple, kwargs: dict):
    inf.calls += 1
    if inf.flagged:
        fidelity.no_npu_kernel(inf.name)
    if inf.kind == "view":
        return inf.op.redispatch(_CPU_KS, *args, **kwargs)
    conv = _Conv()
    cargs = [conv.value(a) for a in args]
    ckw = {k: conv.value(v) for k, v in kwargs.items()} if kwargs else {}
    stays = _device_kw(conv, kwargs, ckw) if "device" in kwargs else True
    if conv.cpu_seen and not inf.allow_cpu and conv.index >= 0:
        raise _mixed_error(conv.index)
    index = conv.index if conv.index >= 0 else _current[0]
    if inf.gen_kw and ckw.get("generator") is None:
        ckw["generator"] = rng.generator(index)
    check = (_settings.fp16_overflow != "off" and fidelity.all_finite(cargs)
             and fidelity.all_finite(ckw.values()))
    if inf.swap_rng:
        with rng.drawing_from(index):
            if inf.kind == "write":
                return _run_write(inf, args, kwargs, cargs, ckw, index, check)
            res = _call(inf, cargs, ckw)
    elif inf.kind == "write":
        return _run_write(inf, args, kwargs, cargs, ckw, index, check)
    else:
        res = _call(inf, cargs, ckw)
    if not stays:
        return res
    if _settings.overflow_mode == "saturation":
        _saturate(res)
    out = _adopt_result(inf, res, index)
    if check:
        _overflow_check(inf, res)
    return out


def _run_fast(inf: OpInfo, args: tuple, kwargs: dict):
    """:func:`_run` for ops whose tensor arguments are plain ``Tensor``/``Tensor?`` (most ops): the tensor
    positions are known from the schema, so nothing else is inspected."""
    inf.calls += 1
    if inf.flagged:
        fidelity.no_npu_kernel(inf.name)
    cargs = list(args)
    index = -1
    cpu_seen = False
    n = len(args)
    for i in inf.tensor_pos:
        if i >= n:
            break
        a = args[i]
        if not isinstance(a, Tensor):  # None, or a wrapped number that the boxed call turned back into one
            continue
        d = a.get_device()
        if d >= 0:
            if d != index:
                if index >= 0:
                    raise _two_devices(index, d)
                index = d
            cargs[i] = cpu_alias(a)
        elif a.dim():
            cpu_seen = True
    ckw = kwargs
    if kwargs and inf.tensor_kw:
        ckw = dict(kwargs)
        for k in inf.tensor_kw:
            a = kwargs.get(k)
            if not isinstance(a, Tensor):
                continue
            d = a.get_device()
            if d >= 0:
                if d != index:
                    if index >= 0:
                        raise _two_devices(index, d)
                    index = d
                ckw[k] = cpu_alias(a)
            elif a.dim():
                cpu_seen = True
    if cpu_seen and index >= 0 and not inf.allow_cpu:
        raise _mixed_error(index)
    if index < 0:
        index = _current[0]
    if _settings.fp16_overflow != "off":
        check = fidelity.all_finite(cargs) and fidelity.all_finite(ckw.values())
    else:
        check = False
    if inf.kind == "write":
        return _run_write(inf, args, kwargs, cargs, ckw, index, check)
    res = _call(inf, cargs, ckw)
    if _settings.overflow_mode == "saturation":
        _saturate(res)
    if inf.single_tensor:
        if res.dtype in _F64:
            fidelity.float64(inf.name, res.dtype)
        out = adopt_fresh(res, index)
    else:
        out = _adopt_result(inf, res, index)
    if check:
        _overflow_check(inf, res)
    return out


def _written(inf: OpInfo, args, kwargs):
    srcs = inf.write_src
    outs = [None if s is None else (args[s] if isinstance(s, int) else kwargs[s]) for s in srcs]
    return outs


def _run_write(inf: OpInfo, args, kwargs, cargs, ckw, index: int, check: bool = False):
    try:
        res = _call(inf, cargs, ckw)
    except RuntimeError as e:
        if "not resizable" not in str(e) or not inf.out_names:
            raise
        return _run_out_resizing(inf, args, kwargs, cargs, ckw)
    outs = _written(inf, args, kwargs)
    if inf.out_names:  # an out= tensor may have been resized (within its storage) by the CPU kernel
        for name in inf.out_names:
            t, c = kwargs[name], ckw[name]
            if isinstance(t, Tensor) and (t.shape != c.shape or t.stride() != c.stride()):
                _set_metadata(t, c.shape, c.stride())
    if _settings.overflow_mode == "saturation":
        _saturate([cpu_alias(t) for t in outs if isinstance(t, Tensor)] + [r for r in _tensors_of(res)])
    if check:
        _overflow_check(inf, [cpu_alias(t) for t in outs if isinstance(t, Tensor)])
    if len(outs) == 1:
        return outs[0] if outs[0] is not None else _adopt_result(inf, res, index)
    if any(o is None for o in outs):  # mixed returns: written ones as given, fresh ones adopted
        return tuple(o if o is not None else _adopt_result(inf, r, index) for o, r in zip(outs, res, strict=True))
    return tuple(outs)


def _run_out_resizing(inf: OpInfo, args, kwargs, cargs, ckw):
    """out= tensors too small for the result: compute into fresh CPU tensors, resize the npu outs, copy."""
    fresh = {}
    for name in inf.out_names:
        t = kwargs[name]
        if isinstance(t, Tensor):
            fresh[name] = ckw[name] = torch.empty(0, dtype=t.dtype)
        elif isinstance(t, list | tuple):
            fresh[name] = ckw[name] = [torch.empty(0, dtype=x.dtype) for x in t]
    _call(inf, cargs, ckw)
    for name, f in fresh.items():
        t = kwargs[name]
        pairs = [(t, f)] if isinstance(t, Tensor) else list(zip(t, f, strict=True))
        for npu_t, cpu_t in pairs:
            npu_t.resize_(cpu_t.shape)
            if npu_t.stride() != cpu_t.stride():
                if cpu_t.numel():  # room for the CPU result's strides (linalg_lstsq: a 3x3 view of 4x3)
                    npu_t.resize_(1 + sum((n - 1) * st for n, st in zip(cpu_t.shape, cpu_t.stride(), strict=True)))
                _set_metadata(npu_t, cpu_t.shape, cpu_t.stride())
            cpu_alias(npu_t).copy_(cpu_t)
    outs = _written(inf, args, kwargs)
    return outs[0] if len(outs) == 1 else tuple(outs)


_as_strided_ = torch.ops.aten.as_strided_.default


def _set_metadata(t: Tensor, shape, stride) -> None:
    _as_strided_.redispatch(_CPU_KS, t, list(shape), list(stride), t.storage_offset())


def _tensors_of(res) -> list:
    if isinstance(res, Tensor):
        return [res]
    return [r for r in res if isinstance(r, Tensor)] if isinstance(res, (list, tuple)) else []


def _saturate(res) -> None:
    """CANN's saturation mode (``settings.overflow_mode``): in the op's floating results, inf becomes the dtype's
    largest finite value (with its sign) and NaN becomes 0. In place, on the CPU memory the results live in."""
    for t in _tensors_of(res):
        if t.is_floating_point() and t.numel() and t.device.type == "cpu":
            big = torch.finfo(t.dtype).max
            torch.nan_to_num_(t, nan=0.0, posinf=big, neginf=-big)


def _overflow_check(inf: OpInfo, res) -> None:
    """Called when every input was finite: an fp16/bf16 result with inf/nan is an overflow."""
    outs = [res] if isinstance(res, Tensor) else [r for r in (res or ()) if isinstance(r, Tensor)]
    low = [o for o in outs if fidelity.low_precision(o) and o.numel()]
    if low and not fidelity.all_finite(low):
        fidelity.fp16_overflow(inf.name, low[0].dtype)


_PROMOTE_AFTER = 4  # calls through the fallback before an aten op gets its own direct kernel
_promoted: set = set()
_aten_lib: list = []


def _promote(inf: OpInfo) -> None:
    """Register a direct PrivateUse1 kernel for an op that keeps reaching the fallback: later calls skip the
    boxed fallback's per-call lookups (and take :mod:`fastpath` where it applies). Only ops that reach the
    fallback qualify, i.e. ops with no PrivateUse1 or composite kernel, so nothing else changes."""
    _promoted.add(inf.op)
    if not _aten_lib or inf.op.namespace != "aten":
        return
    try:
        _impl(_aten_lib[0], inf, make_kernel(inf.op))
    except RuntimeError:  # already registered elsewhere: keep the fallback
        pass


def _fallback(op, *args, **kwargs):
    inf = _INFO.get(op) or info(op)
    special = inf.policy.kernel
    if special is not None:
        inf.calls += 1
        return special(*args, **kwargs)
    if inf.calls == _PROMOTE_AFTER and op not in _promoted:
        _promote(inf)
    if inf.fast:
        return _run_fast(inf, args, kwargs)
    return _run(inf, args, kwargs)


def _view_kernel(inf: OpInfo):
    """A view op's kernel: the CPU kernel on the npu tensors themselves (it only touches metadata)."""
    redispatch = inf.op._handle.redispatch_boxed
    name = inf.name

    def kernel(*args, **kwargs):
        inf.calls += 1
        if inf.flagged:
            fidelity.no_npu_kernel(name)
        return redispatch(_CPU_KS, *args, **kwargs)

    kernel.__name__ = f"npu_{name}"
    return kernel


def make_kernel(op):
    """A kernel for ``op`` alone (skips the composite ``empty`` + ``op.out`` pair of structured ops)."""
    inf = info(op)
    if inf.kind == "view":
        return _view_kernel(inf)
    special = fastpath.kernel_for(inf, _run_fast)
    if special is not None:
        return special
    run = _run_fast if inf.fast else _run

    def kernel(*args, **kwargs):
        return run(inf, args, kwargs)

    kernel.__name__ = f"npu_{inf.name}"
    return kernel


def _overload(name: str):
    """``"add.Tensor"`` -> ``torch.ops.aten.add.Tensor``; ``"relu"`` -> ``torch.ops.aten.relu.default``."""
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _counted(name: str, fn):
    inf = info(_overload(name))

    def kernel(*args, **kwargs):
        inf.calls += 1
        return fn(*args, **kwargs)

    kernel.__name__ = f"npu_{name}"
    return kernel


def register(lib: torch.library.Library) -> int:
    """Install the fallback and the direct kernels on ``lib`` (a ``Library("_", "IMPL")`` and an aten one)."""
    lib_fallback, lib_aten = lib
    lib_fallback.fallback(_fallback, "PrivateUse1")
    _aten_lib[:] = [lib_aten]
    n = 0
    mod = cfast.module()
    for name, pol in table.direct_entries():
        kernel = _counted(name, pol.kernel)
        if mod is not None and pol.cxx_as and not pol.keys:  # the C++ kernel, with this one as its fallback
            nret = len(_overload(name)._schema.returns)
            mod.register_op(name, False, [-1] * nret, kernel, target=pol.cxx_as)
            n += 1
            continue
        for key in ("PrivateUse1", *pol.keys):
            lib_aten.impl(name, kernel, key)
        n += 1
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    flagged = table.no_npu_kernel()
    for qual in torch._C._dispatch_get_all_op_names():
        if not qual.startswith("aten::") or has(qual, "PrivateUse1"):
            continue
        short = qual[len("aten::"):]
        structured = has(qual, "CompositeExplicitAutogradNonFunctional")
        # a CPU kernel next to a device-generic composite one: the composite would take PrivateUse1 and
        # compute differently from the CPU (native_layer_norm...); and ops with no NPU kernel that are
        # composite on PrivateUse1 must reach the kernels to be reported (_foreach_*)
        cpu_shadowed = has(qual, "CPU") and (
            has(qual, "CompositeExplicitAutograd")
            or (has(qual, "CompositeImplicitAutograd") and has(qual, "Autograd"))
        )
        foreach = short.startswith("_foreach_") and has(qual, "CompositeExplicitAutograd")
        reported = short in flagged and has(qual, "CompositeExplicitAutograd")
        if not (structured or cpu_shadowed or foreach or reported):
            continue
        base, _, overload = qual[len("aten::"):].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except AttributeError:
            continue
        inf = info(op)
        if inf.kind == "view" or inf.policy.kernel is not None:
            continue
        _impl(lib_aten, inf, make_kernel(op))
        n += 1
    return n


# --------------------------------------------------------------------------------------------------------
# the C++ kernels (cfast.cpp): the same work without a Python frame, where the op allows it

_NOT_STRIDED = ("sparse", "mkldnn", "quantize", "nested", "padded", "_to_dense", "to_dense")


def cxx_returns(inf: OpInfo) -> list[int] | None:
    """What the C++ kernel needs to serve ``inf``'s op (per return: the argument index it writes, or -1), or
    None where the op keeps its Python kernel: ops with a special kernel, no NPU kernel (reported), random
    numbers, a device argument, ``out=`` arguments, non-strided layouts."""
    pol = inf.policy
    if inf.flagged or pol.kernel is not None or any(w in inf.name for w in _NOT_STRIDED):
        return None
    if inf.kind == "view":
        return []
    if inf.gen_kw or inf.swap_rng or not pol.fast_path or inf.out_names or pol.cpu_args_ok:
        return None
    args = inf.op._schema.arguments
    if any(a.name == "device" for a in args):
        return None
    if any(s is not None and not isinstance(s, int) for s in inf.write_src):
        return None
    return [-1 if s is None else s for s in inf.write_src]


def _impl(lib, inf: OpInfo, kernel) -> None:
    """Register ``inf``'s PrivateUse1 kernel: the C++ one (with ``kernel`` as its fallback) where it can serve,
    else the Python ``kernel``."""
    mod = cfast.module()
    ret = cxx_returns(inf) if mod is not None else None
    if ret is None:
        lib.impl(inf.name, kernel, "PrivateUse1")
        return
    mod.register_op(inf.name, inf.kind == "view", ret, kernel)
