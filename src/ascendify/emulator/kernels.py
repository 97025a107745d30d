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
(copies across devices, ``resize_``, ``set_``, convolution's "overrideable" pair); see ``_SPECIAL``.

Per-op facts (kind, where written outputs come from, fidelity verdict) are computed once and cached.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ascendify import knowledge
from ascendify.emulator import attention, fidelity, fused_rnn, rng, runtime
from ascendify.emulator.record import op_name
from ascendify.emulator.tensors import adopt, adopt_fresh, cpu_alias

_CPU_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CPU = torch.device("cpu")
_F64 = (torch.float64, torch.complex128)
_rec_ops = runtime.recorder.ops
_settings = runtime.settings
_check_index = runtime.check_index
_current = runtime.current_device

# ops that legitimately take CPU tensors next to device tensors (as on CUDA)
_CPU_ARGS_OK = frozenset(
    {"index.Tensor", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index.Tensor", "_unsafe_index_put",
     "index.Tensor_out", "index_put.out", "_index_put_impl.out", "equal"}
)


class OpInfo:
    """What the kernels need to know about one op overload, computed once."""

    __slots__ = ("op", "call", "name", "kind", "write_src", "out_names", "gen_kw", "flagged", "allow_cpu",
                 "has_tensor_lists", "fast", "tensor_pos", "tensor_kw", "single_tensor", "calls", "swap_rng")

    def __init__(self, op):
        schema = op._schema
        self.op = op
        self.calls = 0  # counted in place on the hot path; the recorder names and sums them
        runtime.recorder.infos.append(self)
        self.call = op._op
        self.name = op_name(op)
        self.gen_kw = any(a.name == "generator" for a in schema.arguments)
        # random with no generator argument (native_dropout): draws from the device generator (rng.drawing_from)
        self.swap_rng = torch.Tag.nondeterministic_seeded in op.tags and not self.gen_kw
        self.flagged = self.name in _no_kernel()
        self.allow_cpu = self.name in _CPU_ARGS_OK
        self.has_tensor_lists = any("Tensor" in str(a.type) and "[]" in str(a.type) for a in schema.arguments)
        self.write_src: list = []  # per return: index/name of the written argument
        self.out_names: list[str] = []
        view = False
        for r in schema.returns:
            ai = r.alias_info
            if ai is None:
                self.write_src.append(None)
                continue
            if not ai.is_write:
                view = True
                self.write_src.append(None)
                continue
            src = None
            for j, a in enumerate(schema.arguments):
                if a.alias_info is not None and a.alias_info.is_write and a.alias_info.before_set == ai.before_set:
                    src = a.name if a.kwarg_only else j
                    if a.is_out:
                        self.out_names.append(a.name)
                    break
            self.write_src.append(src)
        if torch.Tag.inplace_view in op.tags or (view and not any(s is not None for s in self.write_src)):
            self.kind = "view"
        elif any(s is not None for s in self.write_src):
            self.kind = "write"
        else:
            self.kind = "functional"
        # the fast path (_run_fast): plain Tensor / Tensor? arguments, nothing device- or RNG-related
        types = [str(a.type) for a in schema.arguments]
        self.tensor_pos = tuple(j for j, (a, t) in enumerate(zip(schema.arguments, types, strict=True))
                                if t in ("Tensor", "Optional[Tensor]") and not a.kwarg_only)
        self.tensor_kw = tuple(a.name for a, t in zip(schema.arguments, types, strict=True)
                               if t in ("Tensor", "Optional[Tensor]") and a.kwarg_only)
        plain = all(("Tensor" not in t or t in ("Tensor", "Optional[Tensor]")) for t in types)
        self.single_tensor = len(schema.returns) == 1 and str(schema.returns[0].type) == "Tensor"
        self.fast = (plain and not self.gen_kw and not self.swap_rng and self.kind != "view"
                     and not any(a.name == "device" for a in schema.arguments))


_no_kernel_cache: list = []


def _no_kernel() -> frozenset[str]:
    if not _no_kernel_cache:
        _no_kernel_cache.append(knowledge.overloads_without_npu_kernel())
    return _no_kernel_cache[0]


_INFO: dict = {}


def info(op) -> OpInfo:
    i = _INFO.get(op)
    if i is None:
        i = _INFO[op] = OpInfo(op)
    return i


# --------------------------------------------------------------------------------------------------------
# argument conversion


def _mixed_error(index: int) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, npu:{index} and cpu! "
        "(a CPU tensor was passed to an operator on the emulated NPU; move it with .npu()/.to(device))"
    )


def _two_devices(a: int, b: int) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, npu:{a} and npu:{b}!"
    )


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


_SCALAR_ALT: dict = {}


def scalar_overload(inf: OpInfo, cargs):
    """The CPU callable for ``inf``'s op when Python numbers sit where its schema has ``Tensor`` arguments (a
    wrapped-number scalar that the boxed call turned back into a number: ``x * 2`` reaches ``mul.Tensor``).

    It is the sibling overload taking ``Scalar`` there (``mul.Scalar``, ``pow.Tensor_Scalar``...), which wraps
    the number exactly as the CPU does; cached per op and positions. Without one: the overload packet."""
    n = len(cargs)
    pos = tuple(i for i in inf.tensor_pos if i < n and cargs[i] is not None and not isinstance(cargs[i], Tensor))
    key = (inf.op, pos)
    fn = _SCALAR_ALT.get(key)
    if fn is None:
        fn = _SCALAR_ALT[key] = _find_scalar_overload(inf.op, pos)
    return fn


def _find_scalar_overload(op, pos):
    args = op._schema.arguments
    want = [str(a.type) for a in args]
    for i in pos:
        want[i] = "Scalar"
    names = [a.name for a in args]
    packet = op.overloadpacket
    for name in packet.overloads():
        other = getattr(packet, name)
        o_args = other._schema.arguments
        if [a.name for a in o_args] == names and [str(a.type) for a in o_args] == want:
            return other._op
    return packet


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
    if not _aten_lib or inf.op.namespace != "aten" or inf.kind == "view":
        return
    try:
        _aten_lib[0].impl(inf.name, make_kernel(inf.op), "PrivateUse1")
    except RuntimeError:  # already registered elsewhere: keep the fallback
        pass


def _fallback(op, *args, **kwargs):
    inf = _INFO.get(op) or info(op)
    special = _SPECIAL.get(inf.name)
    if special is not None:
        inf.calls += 1
        return special(*args, **kwargs)
    if inf.calls == _PROMOTE_AFTER and op not in _promoted:
        _promote(inf)
    if inf.fast:
        return _run_fast(inf, args, kwargs)
    return _run(inf, args, kwargs)


def make_kernel(op):
    """A kernel for ``op`` alone (skips the composite ``empty`` + ``op.out`` pair of structured ops)."""
    inf = info(op)
    from ascendify.emulator import fastpath

    special = fastpath.kernel_for(inf)
    if special is not None:
        return special
    run = _run_fast if inf.fast else _run

    def kernel(*args, **kwargs):
        return run(inf, args, kwargs)

    kernel.__name__ = f"npu_{inf.name}"
    return kernel


# --------------------------------------------------------------------------------------------------------
# special ops


def _index_of(t: Tensor) -> int:
    d = t.get_device()
    return d if d >= 0 else _current[0]


def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    index = _check_index(device.index if device is not None else None)
    if pin_memory:
        raise RuntimeError("pin_memory=True only applies to CPU tensors (asked for an npu tensor)")
    if layout not in (None, torch.strided):
        raise RuntimeError(f"the emulated npu device supports strided tensors only, not {layout}")
    dtype = dtype or torch.get_default_dtype()
    n = 1
    for s in size:
        n *= int(s)
    runtime.memory.check(n * _itemsize(dtype), index)
    if dtype in _F64:
        fidelity.float64("empty", dtype)
    return adopt(torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format), index)


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    index = _check_index(device.index if device is not None else None)
    if pin_memory:
        raise RuntimeError("pin_memory=True only applies to CPU tensors (asked for an npu tensor)")
    dtype = dtype or torch.get_default_dtype()
    if dtype in _F64:
        fidelity.float64("empty_strided", dtype)
    return adopt(torch.empty_strided(size, stride, dtype=dtype), index)


_ITEMSIZE: dict = {}


def _itemsize(dtype) -> int:
    s = _ITEMSIZE.get(dtype)
    if s is None:
        s = _ITEMSIZE[dtype] = torch.empty(0, dtype=dtype).element_size()
    return s


def _copy_(self, src, non_blocking=False):
    dst = cpu_alias(self) if self.get_device() >= 0 else self
    if isinstance(src, Tensor) and src.get_device() >= 0:
        src = cpu_alias(src)
    dst.copy_(src)
    if self.get_device() >= 0 and self.dtype in _F64 and src.dtype not in _F64:
        fidelity.float64("copy_", self.dtype)
    return self


def _copy_from(self, dst, non_blocking=False):
    _copy_(dst, self)
    return dst


def _copy_from_and_resize(self, dst):
    dst.resize_(self.shape)
    _copy_(dst, self)
    return dst


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    on_npu = self.get_device() >= 0
    src = cpu_alias(self) if on_npu else self
    if device is None or device.type == "npu":
        index = _check_index(device.index) if device is not None and device.index is not None else _index_of(self)
        if not on_npu:
            runtime.memory.check(self.numel() * _itemsize(dtype or self.dtype), index)
        res = torch.ops.aten._to_copy.default(src, dtype=dtype, layout=layout, memory_format=memory_format)
        if res.dtype in _F64 and (not on_npu or self.dtype not in _F64):
            fidelity.float64("_to_copy", res.dtype)
        return adopt(res, index)
    # to another device (cpu, meta): a real copy; pinned host memory has no meaning here
    return torch.ops.aten._to_copy.default(
        src, dtype=dtype, layout=layout, device=device, memory_format=memory_format
    )


def _resize_(self, size, memory_format=None):
    n = 1
    for s in size:
        n *= int(s)
    needed = (self.storage_offset() + n) * self.element_size()
    st = self.untyped_storage()
    if needed > st.nbytes():
        index = _index_of(self)
        new = adopt(torch.empty(needed, dtype=torch.uint8), index)
        old = st.nbytes()
        if old:
            cpu_alias(new)[:old].copy_(cpu_alias(_bytes_view(self)))
        _set_storage.redispatch(_CPU_KS, self, new.untyped_storage(), self.storage_offset(), list(size), [])
        if memory_format is None:
            return self
    return torch.ops.aten.resize_.default.redispatch(_CPU_KS, self, size, memory_format=memory_format)


_set_storage = torch.ops.aten.set_.source_Storage_storage_offset


def _bytes_view(t: Tensor) -> Tensor:
    """An ``npu`` uint8 tensor over the whole storage of ``t``."""
    st = t.untyped_storage()
    b = torch.empty(0, dtype=torch.uint8, device=t.device)
    _set_storage.redispatch(_CPU_KS, b, st, 0, [st.nbytes()], [1])
    return b


def _set_empty(self):
    new = adopt(torch.empty(0, dtype=self.dtype), _index_of(self))
    return _set_storage.redispatch(_CPU_KS, self, new.untyped_storage(), 0, [0], [])


def _record_stream(self, stream):
    return None


def _efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    index = _check_index(device.index if device is not None else None)
    return adopt(torch.zeros(size, dtype=dtype), index)


def _conv_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    _check_same(input, weight, bias)
    res = torch.ops.aten.convolution.default(
        cpu_alias(input), cpu_alias(weight), None if bias is None else cpu_alias(bias),
        stride, padding, dilation, transposed, output_padding, groups,
    )
    return adopt(res, _index_of(input))


def _conv_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                output_padding, groups, output_mask):
    _check_same(grad_output, input, weight)
    bias_sizes = [weight.size(1) * groups] if transposed else [weight.size(0)]
    gi, gw, gb = torch.ops.aten.convolution_backward.default(
        cpu_alias(grad_output), cpu_alias(input), cpu_alias(weight), bias_sizes,
        stride, padding, dilation, transposed, output_padding, groups, output_mask,
    )
    index = _index_of(input)
    return tuple(None if t is None else adopt(t, index) for t in (gi, gw, gb))


def _check_same(*tensors) -> None:
    index = -1
    for t in tensors:
        if t is None:
            continue
        d = t.get_device()
        if d < 0:
            raise _mixed_error(max(index, 0))
        if index >= 0 and d != index:
            raise _two_devices(index, d)
        index = d


def _redispatch_cpu(op):
    def kernel(*args, **kwargs):
        return op.redispatch(_CPU_KS, *args, **kwargs)

    return kernel


_SPECIAL = {
    "empty.memory_format": _empty,
    "empty_strided": _empty_strided,
    "copy_": _copy_,
    "_copy_from": _copy_from,
    "_copy_from_and_resize": _copy_from_and_resize,
    "_to_copy": _to_copy,
    "resize_": _resize_,
    "set_": _set_empty,
    "set_.source_Storage": _redispatch_cpu(torch.ops.aten.set_.source_Storage),
    "set_.source_Storage_storage_offset": _redispatch_cpu(_set_storage),
    "set_.source_Tensor": _redispatch_cpu(torch.ops.aten.set_.source_Tensor),
    "set_.source_Tensor_storage_offset": _redispatch_cpu(torch.ops.aten.set_.source_Tensor_storage_offset),
    "record_stream": _record_stream,
    "_efficientzerotensor": _efficientzerotensor,
    "convolution_overrideable": _conv_overrideable,
    "convolution_backward_overrideable": _conv_backward_overrideable,
}
_SPECIAL.update(fused_rnn.KERNELS)

# ops registered directly on PrivateUse1 (beyond the fallback): the special ones above, plus every op with a
# CompositeExplicitAutogradNonFunctional kernel (functional and in-place structured ops), which would
# otherwise arrive as two Python calls.
_DIRECT_SPECIAL = ("empty.memory_format", "empty_strided", "copy_", "_to_copy", "resize_",
                   "convolution_overrideable", "convolution_backward_overrideable")


def _counted(name: str, fn):
    base, _, overload = name.partition(".")
    inf = info(getattr(getattr(torch.ops.aten, base), overload or "default"))

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
    for name in _DIRECT_SPECIAL:
        lib_aten.impl(name, _counted(name, _SPECIAL[name]), "PrivateUse1")
        n += 1
    attention.register(lib_aten)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    flagged = _no_kernel()
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
        if inf.kind == "view" or inf.name in _SPECIAL:
            continue
        lib_aten.impl(inf.name, make_kernel(op), "PrivateUse1")
        n += 1
    return n
