"""Lockstep comparison: run the golden and the target model in one process with the same weights, and measure
each target call's *own* error by feeding it the golden inputs.

``compare_models(golden, target, *inputs, **settings)`` (the settings: :class:`LockstepSettings`) does, in order:

1. **weights**: copy the golden weights into the target (by ``state_dict`` name; when names differ, a renamed
   or wrapped class, by parameter order and shape);
2. **golden run**: golden on ``golden_device``/``golden_dtype``; hooks record every module call's (and with
   ``level="mix"`` every torch API call's) inputs and outputs (cloned: later in-place ops cannot change them);
3. **target run**: target on ``target_device``/``target_dtype`` under ``target_autocast``, recorded the same way;
4. **matching**: golden calls to target calls by module path, call order, class and shapes (``matching``);
5. **local error** (the *device check*): every matched target call is run again, hooks off, on the golden
   inputs (moved to the target device, cast to the dtypes the target call really received, under the same
   autocast) and compared with the golden output, against the limit for the dtype it computed in
   (``thresholds``): the error it adds itself, without what it inherited;
6. **code check**: a copy of the target model in the *golden* setting (golden device and dtype, no autocast) is
   fed the same golden inputs: a difference there is a difference in the code (an activation approximation,
   an epsilon, a scale, a permutation, an explicit cast), measured at fp32 precision even when the target runs
   in bf16, where rounding would hide it;
7. **first divergence**: the first flagged call in execution order with no flagged descendant (``divergence``).

Modules with state (BatchNorm running statistics) keep it: both models run in ``eval()`` mode by default and
buffers are restored after each re-run. Memory is O(activations): lockstep keeps every call's inputs and
outputs, so give it one small batch.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ascendify.precision import matching, metrics, thresholds
from ascendify.precision.divergence import ComparisonResult, NodeResult
from ascendify.precision.weights import compare_weights, copy_weights  # noqa: F401 (copy_weights: public here too)
from ascendify.program import frames

LEVELS = ("module", "mix")

_TORCH_DIR = os.path.dirname(torch.__file__)

# torch functions never recorded at API level: metadata, no arithmetic
_SKIP_API = {
    "size",
    "dim",
    "numel",
    "is_floating_point",
    "is_complex",
    "element_size",
    "stride",
    "storage_offset",
    "is_contiguous",
    "data_ptr",
    "__len__",
    "__iter__",
    "__format__",
    "__repr__",
    "__bool__",
    "__index__",
    "__int__",
    "__float__",
    "__hash__",
    "__eq__",
    "item",
    "tolist",
    "__get__",
    "__set__",
    "requires_grad_",
    "has_names",
    "get_device",
    "detach",
    "clone",
    "contiguous",
}


@dataclass
class _Call:
    kind: str  # "module" | "api"
    path: str  # module path, or API name
    owner: str | None  # enclosing module path (api calls)
    class_name: str | None
    depth: int
    parent: int | None
    call_index: int
    module: Any = None  # nn.Module, or the API callable
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    out: Any = None
    source: str | None = None
    defined_at: str | None = None
    end: int = 0  # when the call finished (forward hooks' order): the reverse is the backward order
    tapped: list = field(default_factory=list)  # backward: positions of the inputs that carry a gradient
    gin: dict = field(default_factory=dict)  # backward: position -> gradient the call gave that input
    gout: dict = field(default_factory=dict)  # backward: position -> gradient its output received

    def key(self) -> matching.CallKey:
        own = ()
        if self.kind == "module":
            own = tuple(tuple(p.shape) for p in self.module.parameters(recurse=False))
        return matching.CallKey(
            path=self.path,
            kind=self.kind,
            class_name=self.class_name,
            in_shapes=_shapes((self.args, self.kwargs)),
            out_shapes=_shapes(self.out),
            own_params=own,
            call_index=self.call_index,
            owner=self.owner,
            depth=self.depth,
        )

    @property
    def display(self) -> str:
        if self.kind == "module":
            return f"{self.path or '(root)'} ({self.class_name})" + (f" #{self.call_index}" if self.call_index else "")
        return f"{self.path} in {self.owner or '(root)'}" + f" #{self.call_index}"


def _tensors(obj) -> list[torch.Tensor]:
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def _shapes(obj) -> tuple:
    return tuple(tuple(t.shape) for t in _tensors(obj))


def _clone(obj):
    return tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, obj)


_PLAIN = (int, float, bool, str, bytes, complex, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format, slice, type(Ellipsis))


def _snap(x):
    """A copy of a non-tensor argument that a call may change (a key/value cache appended to by every
    attention call): each re-run must see it as the recorded call saw it. Plain values, modules and callables
    are shared; tensors with autograd history inside the object are cloned detached (deepcopy refuses them);
    an object that cannot be copied is shared."""
    if isinstance(x, _PLAIN) or isinstance(x, torch.nn.Module) or callable(x) or isinstance(x, type):
        return x
    memo: dict = {}

    def seed(o, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(o, torch.Tensor):
            memo[id(o)] = o.detach().clone()
        elif isinstance(o, (list, tuple)):
            for e in o:
                seed(e, depth + 1)
        elif isinstance(o, dict):
            for e in o.values():
                seed(e, depth + 1)
        elif hasattr(o, "__dict__") and not isinstance(o, _PLAIN):
            for e in vars(o).values():
                seed(e, depth + 1)

    seed(x, 0)
    try:
        return copy.deepcopy(x, memo)
    except Exception:  # noqa: BLE001 (whatever refuses to copy is shared, as before)
        return x


def _record(obj):
    """A call's arguments as recorded: tensors cloned, objects it may change (a cache) copied."""
    return tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else _snap(x), obj)


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


def _call_site() -> str | None:
    """``file:line`` of the first frame outside torch and ascendify (the user's call)."""
    f = frames.user_frame(2)
    return None if f is None else f"{_short(f.f_code.co_filename)}:{f.f_lineno}"


def _defined_at(module) -> str | None:
    fwd = getattr(type(module), "forward", None)
    code = getattr(fwd, "__code__", None)
    if code is None or code.co_filename.startswith(_TORCH_DIR):
        return None
    return f"{_short(code.co_filename)}:{code.co_firstlineno}"


def _api_name(func) -> str:
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", name)
    if mod.startswith("torch.nn.functional") or mod == "torch._C._nn":
        return f"torch.nn.functional.{name}"
    if qual.startswith("TensorBase.") or qual.startswith("Tensor."):
        return "Tensor." + qual.split(".", 1)[1]
    if mod in ("torch", "torch._C._VariableFunctions", "") or mod.startswith("torch._C"):
        return f"torch.{name}"
    return f"{mod}.{name}"


class _Recorder:
    """Hooks that record every module call (and, at ``mix`` level, every torch API call) of one run."""

    def __init__(self, model: torch.nn.Module, level: str, grads: bool = False):
        self.model = model
        self.level = level
        self.grads = grads  # backward: tap inputs and hook outputs (see gradients.py)
        self.ended = 0
        self.calls: list[_Call] = []
        self.stack: list[int] = []
        self.counts: dict[str, int] = {}
        self.paths = {m: n for n, m in model.named_modules(remove_duplicate=False)}
        self.handles: list = []

    def _pre(self, module, args, kwargs):
        path = self.paths.get(module, "?")
        n = self.counts.get(path, 0)
        self.counts[path] = n + 1
        parent = self.stack[-1] if self.stack else None
        self.calls.append(
            _Call(
                kind="module",
                path=path,
                owner=self.calls[parent].path if parent is not None else None,
                class_name=type(module).__name__,
                depth=len(self.stack),
                parent=parent,
                call_index=n,
                module=module,
                args=_record(args),
                kwargs=_record(kwargs),
                source=_call_site(),
                defined_at=_defined_at(module),
            )
        )
        self.stack.append(len(self.calls) - 1)
        if self.grads and torch.is_grad_enabled():
            from ascendify.precision.gradients import tap_inputs

            call = self.calls[-1]
            a, k, call.tapped = tap_inputs(args, kwargs, call.gin)
            if call.tapped:
                return a, k
        return None

    def _post(self, module, args, kwargs, output):
        if self.stack:
            call = self.calls[self.stack.pop()]
            call.out = _clone(output)
            call.end = self.ended
            self.ended += 1
            if self.grads and torch.is_grad_enabled():
                from ascendify.precision.gradients import tap_outputs

                return tap_outputs(output, call.gout)
        return None

    def record_api(self, func, args, kwargs, out):
        name = _api_name(func)
        owner_i = self.stack[-1] if self.stack else None
        owner = self.calls[owner_i].path if owner_i is not None else None
        key = f"{owner}|{name}"
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        self.calls.append(
            _Call(
                kind="api",
                path=name,
                owner=owner,
                class_name=None,
                depth=len(self.stack),
                parent=owner_i,
                call_index=n,
                module=func,
                args=_record(args),
                kwargs=_record(kwargs),
                out=_clone(out),
                source=_call_site(),
                end=self.ended,
            )
        )
        self.ended += 1

    @contextlib.contextmanager
    def active(self):
        seen = set()
        for m in self.paths:
            if id(m) in seen:
                continue
            seen.add(id(m))
            self.handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(m.register_forward_hook(self._post, with_kwargs=True))
        mode = _ApiMode(self) if self.level == "mix" else contextlib.nullcontext()
        try:
            with mode:
                yield self
        finally:
            for h in self.handles:
                h.remove()
            self.handles.clear()


class _ApiMode(torch.overrides.TorchFunctionMode):
    """Records torch API calls that produce floating tensors (nested calls inside one are not recorded)."""

    def __init__(self, recorder: _Recorder):
        super().__init__()
        self.rec = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in _SKIP_API or not self.rec.stack:
            return out
        if not any(t.is_floating_point() for t in _tensors(out)):
            return out
        if not any(isinstance(t, torch.Tensor) for t in tree_flatten((args, kwargs))[0]):
            return out  # factories (torch.arange, torch.ones): nothing to feed golden inputs to
        self.rec.record_api(func, args, kwargs, out)
        return out


def _reduction_length(module) -> int | None:
    """Longest dot product inside a module: the largest fan-in of any weight of two or more dimensions."""
    k = 0
    for p in module.parameters():
        if p.dim() >= 2:
            k = max(k, p[0].numel())
    return k or None


def _float_dtypes(obj) -> list[str]:
    return [str(t.dtype) for t in _tensors(obj) if t.is_floating_point()]


def _move(obj, device, dtype):
    """A copy of ``obj`` (any nesting of tuples, lists and dicts) with its tensors on ``device``, the floating ones
    cast to ``dtype`` (None: kept)."""

    def one(x):
        if not isinstance(x, torch.Tensor):
            return x
        dt = dtype if dtype is not None and x.is_floating_point() else None
        return x.detach().clone().to(device=device, dtype=dt) if dt else x.detach().clone().to(device)

    return tree_map(one, obj)


def _convert_like(golden_obj, like_obj, device, default_dtype):
    """Golden inputs moved to ``device``; floating tensors cast to the dtype of the target's tensor at the same
    position (the dtype the target call really received), or ``default_dtype``."""
    like = _tensors(like_obj)
    flat, spec = tree_flatten(golden_obj)
    it = iter(like)
    same_count = len(_tensors(golden_obj)) == len(like)
    out = []
    for x in flat:
        if isinstance(x, torch.Tensor):
            ref = next(it, None) if same_count else None
            dt = None
            if x.is_floating_point():
                dt = ref.dtype if ref is not None and ref.is_floating_point() else default_dtype
            x = x.detach().clone().to(device=device, dtype=dt) if dt else x.detach().clone().to(device)
        out.append(x)
    from torch.utils._pytree import tree_unflatten

    return tree_unflatten(out, spec)


def _golden_tensors_in(target_obj, golden_obj):
    """The target call's arguments with each tensor replaced by the golden tensor at the same position (the
    target's own non-tensor arguments kept: an ``approximate="tanh"`` or an ``eps`` is part of the target's
    computation). Falls back to the golden arguments when the tensor counts differ."""
    from torch.utils._pytree import tree_unflatten

    g = _tensors(golden_obj)
    flat, spec = tree_flatten(target_obj)
    if sum(isinstance(x, torch.Tensor) for x in flat) != len(g):
        return _record(golden_obj)
    it = iter(g)
    # non-tensor arguments copied again: the re-run may change them (a cache) and the next re-run needs them intact
    return tree_unflatten([next(it).detach().clone() if isinstance(x, torch.Tensor) else _snap(x) for x in flat],
                          spec)


def _rerun(call: _Call, module, args, kwargs, ctx):
    """Run one module (or API) again, hooks off, with its buffers restored afterwards."""
    if call.kind == "api":
        with torch.no_grad(), ctx:
            return call.module(*args, **kwargs)
    bufs = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        with torch.no_grad(), ctx:
            return module(*args, **kwargs)
    finally:
        with torch.no_grad():
            for b, saved in bufs:
                b.copy_(saved)


def _compare_outputs(actual, expected, dtype: str | None) -> dict[str, Any]:
    """Metrics of the worst-matching output tensor (largest relative L2), with the output count."""
    a, e = _tensors(actual), _tensors(expected)
    if len(a) != len(e):
        return {"output_count_mismatch": [len(a), len(e)], "rel_l2": float("inf"), "cosine": 0.0}
    worst: dict[str, Any] | None = None
    for x, y in zip(a, e, strict=False):
        m = metrics.tensor_metrics(x, y, dtype)
        if m.get("shape_mismatch"):
            return m
        if worst is None or m.get("rel_l2", 0.0) > worst.get("rel_l2", 0.0):
            worst = m
    out = worst or {"rel_l2": 0.0, "cosine": 1.0}
    out["outputs"] = len(a)
    return out


def _device_type(device) -> str:
    return torch.device(device).type


def _module_at(model: torch.nn.Module, path: str):
    try:
        return model.get_submodule(path) if path else model
    except AttributeError:
        return None


@dataclass(frozen=True)
class LockstepSettings:
    """How :func:`compare_models` runs the two models (every field is also a keyword of ``compare_models``).

    ``target_device`` defaults to ``golden_device``; ``target_dtype`` casts the target's floating parameters and
    inputs (default: as golden); ``target_autocast`` (``torch.bfloat16``/``torch.float16``) runs the target
    under ``torch.autocast(target device type, dtype)``; ``level`` is ``"module"`` (module calls) or ``"mix"``
    (module calls and the torch API calls inside them); ``kwargs`` are keyword inputs of both models.
    ``tolerance`` multiplies every limit. ``code_check``: also run the target's code in the golden setting.
    ``eval_mode``: both models run in eval mode (their training flags are restored).

    Weights are compared first (``weights.compare_weights``): a differing parameter or buffer is a finding and
    the target keeps its own; ``copy_weights=True`` copies the golden's into the target, ``False`` never copies,
    None (default) copies only when every floating tensor differs (two random initialisations; the verdict line
    says so). ``copy_golden_weights`` is the old name of ``copy_weights`` (deprecated).

    ``backward=True`` also runs one backward on both sides and compares gradients module call by module call
    (``gradients``); ``loss_fn(outputs)`` must return a scalar tensor (default: the mean of the squared float
    outputs), or give a pair ``(golden loss, target loss)``.
    """

    golden_device: str | torch.device = "cpu"
    golden_dtype: torch.dtype = torch.float32
    target_device: str | torch.device | None = None
    target_dtype: torch.dtype | None = None
    target_autocast: torch.dtype | None = None
    level: str = "module"
    kwargs: dict | None = None
    copy_weights: bool | None = None
    code_check: bool = True
    eval_mode: bool = True
    tolerance: float = 1.0
    backward: bool = False
    loss_fn: Any = None
    copy_golden_weights: bool | None = None

    @property
    def device(self) -> str | torch.device:
        """The target's device."""
        return self.target_device if self.target_device is not None else self.golden_device

    def autocast(self):
        """The context the target runs in: its autocast, or nothing."""
        if self.target_autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=_device_type(self.device), dtype=self.target_autocast)


def compare_models(golden: torch.nn.Module, target: torch.nn.Module, *inputs,
                   settings: LockstepSettings | None = None, **options) -> ComparisonResult:
    """Compare ``target`` against ``golden`` call by call on ``inputs`` (see the module docstring); ``settings``
    and the keyword ``options`` (fields of :class:`LockstepSettings`, over ``settings``) say how. The models
    are moved to their devices; ``golden`` and ``target`` may be the same object (the target is then a copy).
    Returns a ``ComparisonResult``."""
    s = dataclasses.replace(settings or LockstepSettings(), **options)
    if s.level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {s.level!r}")
    if s.copy_golden_weights is not None:
        import warnings

        warnings.warn("compare_models(copy_golden_weights=...) is deprecated: use copy_weights=", DeprecationWarning,
                      stacklevel=2)
        if s.copy_weights is None:
            s = dataclasses.replace(s, copy_weights=s.copy_golden_weights)
    loss_fns = None
    if s.backward:
        from ascendify.precision import gradients

        loss_fns = gradients.loss_fns(s.loss_fn)
    if target is golden:
        target = copy.deepcopy(golden)
    modes = (golden.training, target.training)
    try:
        if s.eval_mode:
            golden.eval()
            target.eval()
        return _Lockstep(golden, target, s, loss_fns).compare(inputs)
    finally:
        golden.train(modes[0])
        target.train(modes[1])


class _Clock:
    """CPU seconds per phase, into ``meta["timings"]``."""

    def __init__(self) -> None:
        self.last = time.process_time()
        self.timings: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.process_time()
        self.timings[name] = self.timings.get(name, 0.0) + now - self.last
        self.last = now


@dataclass
class _Side:
    """One side's recorded run: its calls, its outputs, and (backward) its gradients."""

    rec: _Recorder
    out: Any
    grads: Any = None  # gradients.SideGrads


class _Lockstep:
    """One comparison, phase by phase: :meth:`prepare` (weights, the code check's copy, devices, inputs),
    :meth:`run` (both sides recorded), :meth:`check_calls` (each target call against its golden call),
    :meth:`check_backward`, then :meth:`result`."""

    def __init__(self, golden, target, s: LockstepSettings, loss_fns) -> None:
        self.golden, self.target, self.s, self.loss_fns = golden, target, s, loss_fns
        self.clock = _Clock()
        self.ref = None  # the target's copy in the golden setting (code check)
        self.code_note: str | None = None
        self.autocast = str(s.target_autocast) if s.target_autocast is not None else None
        self.golden_dtype = str(s.golden_dtype)

    def compare(self, inputs) -> ComparisonResult:
        args = self.prepare(inputs)
        golden, target = self.run(*args)
        self.clock.lap("runs")
        self.golden_nonfinite = _first_nonfinite(golden.rec.calls, golden.out)
        nodes = self.check_calls(golden, target)
        self.clock.lap("checks")
        missing_grads: list = []
        if self.s.backward:
            nodes, missing_grads = self.check_backward(golden, target, nodes)
            self.clock.lap("backward_checks")
        result = self.result(golden, target, nodes, missing_grads)
        _autocast_policy(result, target.rec.calls, nodes, self.s.target_autocast)
        return result

    def convert(self, g, like):
        """Golden tensors moved to the target's device, in the dtypes the target call received."""
        return _convert_like(g, like, self.s.device, self.s.target_dtype)

    def prepare(self, inputs) -> tuple:
        """Compare (or copy) the weights, make the code check's copy, move the models; returns the inputs of both
        sides: (golden args, golden kwargs, target args, target kwargs)."""
        s, golden, target = self.s, self.golden, self.target
        self.wcheck = wcheck = compare_weights(golden, target)
        self.clock.lap("weights")
        golden.to(device=s.golden_device, dtype=s.golden_dtype)
        self.weights_how = f"target's own ({wcheck.how}; {len(wcheck.differ)} of {wcheck.compared} differ)"
        if s.copy_weights if s.copy_weights is not None else wcheck.all_differ:
            wcheck.copied = True
            wcheck.copy_reason = ("asked (copy_weights=True)" if s.copy_weights else
                                  "every parameter differed: two random initialisations, not a port defect")
            target.to(device=s.golden_device, dtype=s.golden_dtype)
            self.weights_how = ("copied from the golden " + copy_weights(golden, target)
                                + f" ({wcheck.copy_reason})")
        if s.code_check:
            try:
                self.ref = copy.deepcopy(target).to(device=s.golden_device, dtype=s.golden_dtype)
            except Exception as e:  # a target that cannot live in the golden setting: skip the code check
                self.code_note = f"code check skipped: the target cannot run on {s.golden_device}: {e}"
        target.to(device=s.device)
        if s.target_dtype is not None:
            target.to(dtype=s.target_dtype)
        # inputs of any nesting (tuples, lists, dicts: an LSTM's (x, (h, c))); floating tensors in the golden
        # dtype, and for the target in target_dtype (or the golden dtype)
        g_in, g_kw = _move((inputs, s.kwargs or {}), s.golden_device, s.golden_dtype)
        t_in, t_kw = _move((g_in, g_kw), s.device, s.target_dtype)
        self.clock.lap("setup")
        return g_in, g_kw, t_in, t_kw

    def run(self, g_in, g_kw, t_in, t_kw) -> tuple[_Side, _Side]:
        """Both sides recorded: forward only, or (backward) forward and one backward each."""
        level = self.s.level
        if not self.s.backward:
            with torch.no_grad():
                with _Recorder(self.golden, level).active() as grec:
                    g_out = _forward(self.golden, "golden", g_in, g_kw)
                with _Recorder(self.target, level).active() as trec, self.s.autocast():
                    t_out = _forward(self.target, "target", t_in, t_kw)
            return _Side(grec, g_out), _Side(trec, t_out)
        # float inputs carry a gradient (the first layer's input gradient is compared too)
        for x in _tensors((g_in, g_kw, t_in, t_kw)):
            if x.is_floating_point():
                x.requires_grad_(True)
        g_loss_fn, t_loss_fn = self.loss_fns
        with torch.enable_grad():
            golden = self._forward_backward(self.golden, g_in, g_kw, g_loss_fn, "golden", contextlib.nullcontext())
            target = self._forward_backward(self.target, t_in, t_kw, t_loss_fn, "target", self.s.autocast())
        return golden, target

    def _forward_backward(self, model, args, kw, loss_fn, side: str, ctx) -> _Side:
        """One side's recorded forward, then its backward."""
        from ascendify.precision import gradients

        with _Recorder(model, self.s.level, grads=True).active() as rec, ctx:
            live = _forward(model, side, args, kw)
        self.clock.lap("runs")
        grads = gradients.run_backward(model, gradients.check_loss(loss_fn(live), side))
        self.clock.lap("backward_runs")
        return _Side(rec, _clone(live), grads)

    def check_calls(self, golden: _Side, target: _Side) -> list[NodeResult]:
        """Match the calls, then one node per target call: its total error, its error on golden inputs (device
        check), its code in the golden setting (code check), and the verdict."""
        self.golden_keys = [c.key() for c in golden.rec.calls]
        self.target_keys = [c.key() for c in target.rec.calls]
        self.matched = matching.match_calls(self.golden_keys, self.target_keys)
        self.t2g = self.matched.target_to_golden()
        self.aliased = matching.alias_wrappers(self.target_keys, [c.parent for c in target.rec.calls], self.t2g)
        self.leaves = _leaf_counts(target.rec.calls)
        nodes = []
        for ti, tc in enumerate(target.rec.calls):
            node = NodeResult(name=tc.display, kind=tc.kind, module=tc.path if tc.kind == "module" else tc.owner,
                              api=tc.path if tc.kind == "api" else None, class_name=tc.class_name, order=ti,
                              depth=tc.depth, parent=tc.parent, source=tc.source, defined_at=tc.defined_at)
            nodes.append(node)
            gi = self.t2g.get(ti)
            if gi is None:
                node.note = matching.explain_unmatched(self.target_keys, ti, "target")
                continue
            self._check_call(node, ti, tc, golden.rec.calls[gi])
        return nodes

    def _check_call(self, node: NodeResult, ti: int, tc: _Call, gc: _Call) -> None:
        node.golden_name = gc.display
        if ti in self.aliased:
            node.note = f"wrapper level: compared with golden {gc.display}"
        red = _reduction_length(tc.module) if tc.kind == "module" else None
        cdt = thresholds.compute_dtype(_float_dtypes((tc.args, tc.kwargs, tc.out)), self.autocast)
        scale = self.s.tolerance * max(1.0, (self.leaves[ti] / 4.0) ** 0.5)
        node.compute_dtype = cdt
        node.limit = thresholds.limit(cdt, red, scale=scale).rel_l2
        node.total = _compare_outputs(tc.out, gc.out, cdt)
        node.inputs = _compare_outputs((tc.args, tc.kwargs), (gc.args, gc.kwargs), cdt)
        # device check: the target call on golden inputs, in the target setting
        try:
            a = self.convert(_golden_tensors_in(tc.args, gc.args), tc.args)
            k = self.convert(_golden_tensors_in(tc.kwargs, gc.kwargs), tc.kwargs)
            node.local = _compare_outputs(_rerun(tc, tc.module, a, k, self.s.autocast()), gc.out, cdt)
        except Exception as e:  # the call does not accept the golden inputs: report, do not guess
            node.local = {}
            node.reasons.append(f"could not re-run on golden inputs: {type(e).__name__}: {e}")
        self._code_check(node, tc, gc, red, scale)
        _judge(node, tc, gc)

    def _code_check(self, node: NodeResult, tc: _Call, gc: _Call, red: int | None, scale: float) -> None:
        """The target's code in the golden setting, on the golden inputs."""
        if self.ref is None:
            return
        rmod = _module_at(self.ref, tc.path) if tc.kind == "module" else tc.module
        if rmod is None:
            return
        try:
            node.code_limit = thresholds.limit(self.golden_dtype, red, scale=scale).rel_l2
            a = _golden_tensors_in(tc.args, gc.args)
            k = _golden_tensors_in(tc.kwargs, gc.kwargs)
            out = _rerun(tc, rmod, a, k, contextlib.nullcontext())
            node.code = _compare_outputs(out, gc.out, self.golden_dtype)
        except Exception as e:
            node.code = None
            node.note = f"code check failed: {type(e).__name__}: {e}"

    def check_backward(self, golden: _Side, target: _Side, nodes: list[NodeResult]) -> tuple[list, list]:
        """The loss node and one backward node per matched module call, after the forward nodes; and the
        parameters whose gradient is missing on one side."""
        from ascendify.precision.gradients import backward_nodes, loss_node

        s, t2g, calls = self.s, self.t2g, target.rec.calls
        n_fwd = len(nodes)
        root_t = next((c for c in calls if c.parent is None and c.kind == "module"), None)
        root_i = calls.index(root_t) if root_t is not None else None
        root_g = golden.rec.calls[t2g[root_i]] if root_i in t2g else None
        g_loss_fn, t_loss_fn = self.loss_fns
        lnode = loss_node(golden.out, target.out, g_loss_fn, t_loss_fn, n_fwd=n_fwd, target_device=s.device,
                          convert=self.convert, tolerance=s.tolerance, root_t=root_t, root_g=root_g)
        bnodes, missing_grads = backward_nodes(
            golden.rec, target.rec, t2g, nodes, golden.grads, target.grads, convert=self.convert,
            golden_in=_golden_tensors_in, t_ctx=s.autocast, target_device=s.device, target_dtype=s.target_dtype,
            tolerance=s.tolerance, leaves=self.leaves, reduction=_reduction_length, ref=self.ref,
            golden_dtype=self.golden_dtype)
        for b in bnodes:
            if b.parent is not None:
                b.parent += n_fwd
        return nodes + [lnode] + bnodes, missing_grads

    def result(self, golden: _Side, target: _Side, nodes: list[NodeResult], missing_grads: list) -> ComparisonResult:
        s, ac, gcalls, tcalls = self.s, self.autocast, golden.rec.calls, target.rec.calls
        return ComparisonResult(
            mode="lockstep",
            golden=f"{type(self.golden).__name__} on {s.golden_device} ({self.golden_dtype})",
            target=(
                f"{type(self.target).__name__} on {s.device}"
                + (f" ({s.target_dtype})" if s.target_dtype else "")
                + (f" under {ac} autocast" if ac else "")
            ),
            nodes=nodes,
            unmatched_golden=[
                {"name": gcalls[i].display, "reason": matching.explain_unmatched(self.golden_keys, i, "golden")}
                for i in self.matched.unmatched_golden
            ],
            unmatched_target=[{"name": tcalls[i].display, "reason": nodes[i].note}
                              for i in self.matched.unmatched_target if i not in self.aliased],
            end_to_end=_compare_outputs(target.out, golden.out,
                                        thresholds.compute_dtype(_float_dtypes(target.out), ac)),
            meta=self.meta(golden, target),
            weights=self.wcheck.to_dict(),
            missing_grads=missing_grads,
            golden_nonfinite=self.golden_nonfinite,
        )

    def meta(self, golden: _Side, target: _Side) -> dict[str, Any]:
        s = self.s
        backward = None
        if s.backward:
            backward = {"loss": "mean of squared outputs" if s.loss_fn is None else "loss_fn",
                        "golden_loss": golden.grads.loss, "target_loss": target.grads.loss,
                        "parameters_with_gradient": sum(g is not None for g in target.grads.grads.values())}
        return {
            "level": s.level,
            "golden_device": str(s.golden_device),
            "golden_dtype": self.golden_dtype,
            "target_device": str(s.device),
            "target_dtype": str(s.target_dtype) if s.target_dtype else None,
            "target_autocast": self.autocast,
            "weights": self.weights_how,
            "code_check": self.ref is not None,
            "code_check_note": self.code_note,
            "tolerance": s.tolerance,
            "golden_calls": len(golden.rec.calls),
            "target_calls": len(target.rec.calls),
            "torch": torch.__version__,
            "timings": {k: round(v, 6) for k, v in self.clock.timings.items()},
            "backward": backward,
        }


class ModelRunError(ValueError):
    """A model raised when called on the inputs (inputs of the wrong shape, say): the message says which side, what
    it raised, where in the model's code, and the inputs it was given."""


def _forward(model, side: str, args, kw):
    """``model(*args, **kw)``; an exception from the model's code becomes :class:`ModelRunError` (a one-line
    error, not a traceback out of ``compare``)."""
    try:
        return model(*args, **kw)
    except Exception as e:
        import traceback

        frames = traceback.extract_tb(e.__traceback__)
        own = [f for f in frames if not any(s in f.filename.replace(os.sep, "/") for s in _NOT_USER)]
        where = f" at {own[-1].filename}:{own[-1].lineno}" if own else ""
        given = ", ".join(f"{'x'.join(map(str, t.shape)) or 'scalar'} {str(t.dtype).removeprefix('torch.')}"
                          for t in _tensors((args, kw)))
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelRunError(f"the {side} model raised {type(e).__name__}{': ' + text if text else ''}{where} "
                            f"when called on the inputs ({given or 'no tensors'}): check --inputs") from None


_NOT_USER = ("/torch/", "/ascendify/precision/", "/ascendify/emulator/", "/contextlib.py")


def _nonfinite(obj) -> tuple[int, int]:
    nan = inf = 0
    for t in _tensors(obj):
        if t.is_floating_point() and t.numel():
            nan += int(torch.isnan(t).sum())
            inf += int(torch.isinf(t).sum())
    return nan, inf


def _first_nonfinite(calls: list[_Call], out) -> dict[str, Any] | None:
    """The first golden call (in the order calls finished) whose output holds NaN/Inf its inputs did not: the
    reference itself is broken there. None when the golden's outputs are finite throughout."""
    if not any(_nonfinite(c.out) != (0, 0) for c in calls) and _nonfinite(out) == (0, 0):
        return None
    for c in sorted(calls, key=lambda c: c.end):
        nan, inf = _nonfinite(c.out)
        if (nan or inf) and _nonfinite((c.args, c.kwargs)) == (0, 0):
            return {"call": c.display, "module": c.path if c.kind == "module" else c.owner, "nan": nan, "inf": inf,
                    "source": c.source}
    nan, inf = _nonfinite(out)
    return {"call": "(inputs or outputs)", "module": None, "nan": nan, "inf": inf, "source": None}


def _autocast_policy(result: ComparisonResult, calls: list[_Call], nodes: list[NodeResult], ac) -> None:
    """Which target calls ran in another dtype than CUDA autocast would have (``autocast_policy``)."""
    from ascendify.precision import autocast_policy

    try:
        ap = autocast_policy.lockstep_differences(calls, nodes, ac)
    except Exception as e:  # an explanation, never a reason to lose the comparison
        ap = {"error": f"{type(e).__name__}: {e}", "calls": []}
    if ap is not None:
        result.meta["autocast_policy"] = ap


def _leaf_counts(calls: list[_Call]) -> list[int]:
    """For each call, how many leaf calls (calls with no recorded children) ran inside it (1 for a leaf): the
    number of independently rounded operations whose errors add up in a composite module's local error."""
    kids = [0] * len(calls)
    for c in calls:
        if c.parent is not None:
            kids[c.parent] += 1
    counts = [1 if k == 0 else 0 for k in kids]
    for i in range(len(calls) - 1, -1, -1):
        p = calls[i].parent
        if p is not None:
            counts[p] += counts[i]
    return counts


def _judge(node: NodeResult, tc: _Call, gc: _Call) -> None:
    """Set ``node.flagged``/``reasons`` from its metrics (local error, code check, metadata)."""
    loc = node.local or {}
    if loc.get("shape_mismatch") or node.total.get("shape_mismatch"):
        node.reasons.append(f"output shape {node.total.get('shape', ['?', '?'])[0]} vs golden {node.total.get('shape')[1]}")
    elif loc.get("output_count_mismatch"):
        node.reasons.append(f"{loc['output_count_mismatch'][0]} outputs vs golden {loc['output_count_mismatch'][1]}")
    else:
        le = loc.get("rel_l2")
        if le is not None and node.limit is not None and le > node.limit:
            node.reasons.append(
                f"local error {le:.2e} > limit {node.limit:.1e} for {node.compute_dtype} (cosine {loc.get('cosine', 1):.6f})"
            )
        ni = loc.get("nan_inf") or {}
        if ni and not ni.get("agree", True):
            node.reasons.append(f"NaN/Inf differ: target {ni['nan'][0]} NaN, {ni['inf'][0]} Inf; golden "
                                    f"{ni['nan'][1]} NaN, {ni['inf'][1]} Inf")
    code = node.code or {}
    ce = code.get("rel_l2")
    if ce is not None and node.code_limit is not None and ce > node.code_limit and not code.get("shape_mismatch"):
        node.reasons.append(
            f"target code differs from golden in {node.code.get('dtype', ['?'])[1]}: "
            f"{ce:.2e} > {node.code_limit:.1e} (cosine {code.get('cosine', 1):.6f})"
        )
    if tc.kind == "api":
        gs = [x for x in tree_flatten((gc.args, gc.kwargs))[0] if not isinstance(x, torch.Tensor)]
        ts = [x for x in tree_flatten((tc.args, tc.kwargs))[0] if not isinstance(x, torch.Tensor)]
        if gs != ts and not node.reasons:
            node.note = f"scalar arguments differ: {ts} vs golden {gs}"
    node.flagged = bool(node.reasons)
