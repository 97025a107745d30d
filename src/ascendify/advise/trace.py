"""The op trace ``advise`` reads: every ATen call of a few training steps, with shapes, dtypes and the user's line.

:class:`Tracer` watches a running program (``start()`` ... ``stop()`` returns a :class:`Trace`):

* a :class:`torch.utils._python_dispatch.TorchDispatchMode` sees every ATen call, forward, backward (the autograd
  engine carries the mode into backward) and the optimizer's; each is kept as one compact record: the step, the
  phase (``f`` forward and the rest, ``b`` backward, ``o`` inside ``optimizer.step()``), the overload name
  (``mm``, ``add.Tensor``), each tensor argument's shape, dtype and device, the scalar arguments, the Python ids
  of the tensors in and out (the dataflow the pattern finders follow), and the *site*: the innermost frame of the
  user's code (:func:`ascendify.program.frames.is_user_file`: not torch, not a library, not ascendify) with the first
  library frame below it (``via``: ``torch/nn/functional.py``). A backward call is credited to the line of the
  forward call that made its autograd node (the node's sequence number), not to ``loss.backward()``;
* steps: an optimizer step of the first optimizer that stepped ends a step; a program without an optimizer has
  steps of one ``backward()``; one without either (inference), of one call of its outermost module. With
  ``steps=N`` the program is stopped at the start of step N+1 by :class:`StopTrace` (a ``SystemExit(0)``, as
  ``ascendify port`` stops its runs), so ``trace.steps`` holds N whole steps;
* Python-level facts no ATen call shows: ``torch.npu.synchronize()`` / ``torch.cuda.synchronize()`` calls,
  every ``DataLoader`` built (``num_workers``, ``pin_memory``, ``drop_last``, batch size, dataset length, line)
  and the time the step waited for its next batch, every optimizer built (class, ``foreach``/``fused``, line),
  and at the end the settings that change the NPU's speed (HF32 switches).

``Trace`` is plain data (``to_dict()`` / ``Trace.from_dict()``, JSON-ready), so an analysis can run on a trace
taken elsewhere (a file, another process, a GPU machine).

Cost: one Python call per ATen op (the record, and a walk up the stack to the user's frame, cached per code
object); ``benchmarks/advise_overhead.py`` measures it against a plain emulated run.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ascendify.program import frames

SCHEMA = "ascendify.advise.trace/1"

# phases
FWD, BWD, OPT = "f", "b", "o"


class StopTrace(SystemExit):
    """Raised inside the program when its step budget is spent: ends it like ``sys.exit(0)``."""

    def __init__(self, reason: str):
        super().__init__(0)
        self.reason = reason


@dataclass
class Site:
    """Where in the user's code a call was made: ``file`` (as the frame names it), ``line``, ``function``, and
    ``via``: the library function between the user's line and the op (``torch.nn.functional.linear``), if any."""

    file: str
    line: int
    function: str
    via: str | None = None

    def label(self, root: str | None = None) -> str:
        return f"{short_path(self.file, root)}:{self.line}"


@dataclass(slots=True)
class Op:
    """One ATen call. ``ins``/``outs``: ``(shape, dtype, device)`` per tensor; ``scalars``: the plain numbers and
    flags among the arguments, in order; ``in_ids``/``out_ids``: ``id()`` of the tensors (dataflow)."""

    step: int
    phase: str
    name: str
    site: int  # index in Trace.sites, -1: no user frame
    ins: tuple
    outs: tuple
    in_ids: tuple
    out_ids: tuple
    scalars: tuple = ()
    extra: dict | None = None  # _to_copy: {"to": device, "non_blocking": bool}

    @property
    def base(self) -> str:
        """``add.Tensor`` -> ``add``; ``add_.Scalar`` -> ``add_``."""
        return self.name.split(".", 1)[0]


@dataclass
class Trace:
    ops: list[Op] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # per whole step: {"step", "seconds", "data_wait_s", "ops"}
    step_unit: str | None = None  # "optimizer step" | "backward" | "model call" | None (no step seen)
    dataloaders: list[dict] = field(default_factory=list)
    optimizers: list[dict] = field(default_factory=list)
    syncs: list[dict] = field(default_factory=list)  # python-level synchronize calls: {"api", "site", "step"}
    model_calls: list[dict] = field(default_factory=list)  # outermost module calls: {"step", "site", "class"}
    settings: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # device, torch version, program, root, stop reason...

    # -- views -------------------------------------------------------------------------------------------------
    def whole_steps(self) -> list[int]:
        return [s["step"] for s in self.steps]

    def ops_in(self, step: int) -> list[Op]:
        return [o for o in self.ops if o.step == step]

    def site(self, op_or_index: Op | int) -> Site | None:
        i = op_or_index.site if isinstance(op_or_index, Op) else op_or_index
        return self.sites[i] if 0 <= i < len(self.sites) else None

    def label(self, index: int) -> str:
        s = self.site(index)
        return s.label(self.meta.get("root")) if s is not None else "?"

    # -- plain data --------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "meta": self.meta,
            "settings": self.settings,
            "step_unit": self.step_unit,
            "steps": self.steps,
            "sites": [[s.file, s.line, s.function, s.via] for s in self.sites],
            "dataloaders": self.dataloaders,
            "optimizers": self.optimizers,
            "syncs": self.syncs,
            "model_calls": self.model_calls,
            "op_fields": ["step", "phase", "name", "site", "ins", "outs", "in_ids", "out_ids", "scalars", "extra"],
            "ops": [[o.step, o.phase, o.name, o.site, [[list(s), d, v] for s, d, v in o.ins],
                     [[list(s), d, v] for s, d, v in o.outs], list(o.in_ids), list(o.out_ids), list(o.scalars),
                     o.extra] for o in self.ops],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not an advise trace (schema {d.get('schema')!r}, expected {SCHEMA})")

        def meta(rows):
            return tuple((tuple(s), dt, dev) for s, dt, dev in rows)

        return cls(
            ops=[Op(r[0], r[1], r[2], r[3], meta(r[4]), meta(r[5]), tuple(r[6]), tuple(r[7]), tuple(r[8]), r[9])
                 for r in d["ops"]],
            sites=[Site(*s) for s in d["sites"]],
            steps=list(d.get("steps") or []),
            step_unit=d.get("step_unit"),
            dataloaders=list(d.get("dataloaders") or []),
            optimizers=list(d.get("optimizers") or []),
            syncs=list(d.get("syncs") or []),
            model_calls=list(d.get("model_calls") or []),
            settings=dict(d.get("settings") or {}),
            meta=dict(d.get("meta") or {}),
        )


def short_path(path: str, root: str | None = None) -> str:
    """``path`` relative to ``root`` (default: the current folder) when it lies under it, else its last two
    parts."""
    try:
        rel = os.path.relpath(path, root or os.getcwd())
    except ValueError:
        rel = ".."
    if not rel.startswith(".."):
        return rel.replace(os.sep, "/")
    parts = path.replace(os.sep, "/").split("/")
    return "/".join(parts[-2:])


_DTYPES: dict[Any, str] = {}
_DT = _DTYPES


def dtype_name(dt: Any) -> str:
    s = _DTYPES.get(dt)
    if s is None:
        s = _DTYPES[dt] = str(dt).replace("torch.", "")
    return s


# -- the tracer ----------------------------------------------------------------------------------------------


class Tracer:
    """Watch a program; see the module docstring. ``steps``: stop the program after that many whole steps
    (None: never stop it; a run already stopped by someone else, ``ascendify port``'s observer). ``root``: the
    folder paths are reported relative to."""

    def __init__(self, steps: int | None = None, root: str | None = None, max_ops: int = 2_000_000,
                 capture_model: bool = False, record_from: int = 0):
        self.steps_wanted = steps
        self.record_from = record_from  # ops of earlier steps are not kept (1: skip the warm-up step)
        self.capture_model = capture_model
        self.captured: tuple[Any, Any] | None = None  # (the first outermost module with parameters, its args)
        self.root = os.path.abspath(root or os.getcwd())
        self.max_ops = max_ops
        self.trace = Trace(meta={"root": self.root, "steps_asked": steps})
        self.step = 0
        self.phase = FWD
        self._mode = None
        self._patches = None
        self._handles: list[Any] = []
        self._code_kind: dict[Any, Any] = {}  # code object -> True (user) | via label (library) | None (skip)
        self._site_index: dict[tuple, int] = {}
        self._site_fast: dict[tuple, int] = {}  # (code, instruction, via) -> site index
        self._in_backward = 0  # inside torch.autograd.backward/grad: only then can an op be a backward op
        self._seq_site: dict[int, int] = {}  # autograd sequence number -> site of the forward call that made it
        self._seq_fused: dict[int, tuple[int, str]] = {}  # ... -> (fused call, name) when made inside one
        self._fused_open: dict[tuple, int] = {}  # (fused call, backward?) -> index of its op in trace.ops
        self._fused_ins: dict[int, tuple] = {}  # fused call -> its inputs (for its backward's record)
        self._collapse: list[tuple] = []  # APIs run as one kernel on an NPU, being called now (ONE_KERNEL_APIS)
        self._devtype: str | None = None  # the accelerator's device type, asked once
        self._calls = 0  # numbers the fused calls (a frame's id is reused once it is gone)
        self._cur_fused: tuple | None = None  # (frame id, call number, op index) of the fused call being recorded
        self._last_seq = -1
        self._opt_first: int | None = None  # id of the first optimizer that stepped
        self._opt_depth = 0
        self._backwards = 0
        self._root_calls = 0
        self._module_depth = 0
        self._unit: str | None = None
        self._step_t0 = time.perf_counter()
        self._step_op0 = 0
        self._data_wait = 0.0
        self.stop_reason: str | None = None
        self.overflow = False
        self.active = False
        self._names: dict[Any, str] = {}

    # -- public ----------------------------------------------------------------------------------------------
    def start(self) -> Tracer:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        from ascendify.core.patching import Patches

        tracer = self
        self._torch = torch
        self._Tensor = torch.Tensor
        self._node = torch._C._current_autograd_node
        self._seqnr = torch._C._autograd._get_sequence_nr
        self._patches = Patches()

        from ascendify.auto.record import TOOL_DEPTH as tool

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if kwargs is None:
                    kwargs = {}
                out = func(*args, **kwargs)
                if tracer.active and not tool[0]:  # not ascendify's own reads (port's observer)
                    tracer._record(func, args, kwargs, out)
                return out

        self._install_hooks(torch)
        self.trace.meta.update(self._environment(torch))
        self._mode = _Mode()
        self._mode.__enter__()
        self.active = True
        self._step_t0 = time.perf_counter()
        return self

    def stop(self) -> Trace:
        """Switch everything off and return the trace (whole steps only in ``trace.steps``)."""
        if self._mode is not None:
            self.active = False
            try:
                self._mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 (a mode stack left unbalanced by the program: nothing to undo)
                pass
            self._mode = None
        for h in self._handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self._handles.clear()
        if self._patches is not None:
            self._patches.restore()
            self._patches = None
        t = self.trace
        t.step_unit = self._unit
        t.settings.update(self._settings())
        t.meta["stopped"] = self.stop_reason or "ended"
        t.meta["ops_recorded"] = len(t.ops)
        if self.overflow:
            t.meta["truncated"] = f"more than {self.max_ops:,} ops: the rest were not recorded"
        if self._unit is None and t.ops:  # no step boundary at all: the whole run is one (partial) step
            t.meta["no_steps"] = True
        return t

    # -- the hot path ------------------------------------------------------------------------------------------
    def _record(self, func, args, kwargs, out) -> None:
        if self.step < self.record_from:  # the warm-up step is not analysed: not recorded either (cheaper)
            return
        t = self.trace
        if len(t.ops) >= self.max_ops:
            self.overflow = True
            return
        Tensor = self._Tensor
        devof = self._dev
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = _op_name(func)
        ins, in_ids, scal = [], [], []
        for a in args:
            if isinstance(a, Tensor):
                ins.append((a.shape, _DT.get(a.dtype) or dtype_name(a.dtype), devof(a)))
                in_ids.append(id(a))
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, Tensor):
                        ins.append((b.shape, _DT.get(b.dtype) or dtype_name(b.dtype), devof(b)))
                        in_ids.append(id(b))
                    elif isinstance(b, (int, float, bool)):
                        scal.append(b)
            elif isinstance(a, (int, float, bool)):
                scal.append(a)
        extra = None
        if kwargs:
            for v in kwargs.values():
                if isinstance(v, Tensor):
                    ins.append((v.shape, _DT.get(v.dtype) or dtype_name(v.dtype), devof(v)))
                    in_ids.append(id(v))
            if "device" in kwargs or "non_blocking" in kwargs:
                dev = kwargs.get("device")
                extra = {"to": getattr(dev, "type", dev) if dev is not None else None,
                         "non_blocking": bool(kwargs.get("non_blocking", False))}
        outs, out_ids = [], []
        if isinstance(out, Tensor):
            outs.append((out.shape, _DT.get(out.dtype) or dtype_name(out.dtype), devof(out)))
            out_ids.append(id(out))
        elif isinstance(out, (list, tuple)):
            for b in out:
                if isinstance(b, Tensor):
                    outs.append((b.shape, _DT.get(b.dtype) or dtype_name(b.dtype), devof(b)))
                    out_ids.append(id(b))
        phase = self.phase
        node = self._node() if self._in_backward else None
        site = -1
        if node is not None:
            phase = BWD
            try:
                seq = node._sequence_nr()
            except Exception:  # noqa: BLE001
                seq = -1
            fz = self._seq_fused.get(seq)
            if fz is not None:  # the backward of an emulated fused operator: one record per call
                self._fused_op(fz[0], fz[1] + "_backward", BWD, self._seq_site.get(seq, -1), (), (), (), outs,
                               out_ids, bwd=True)
                return
            site = self._seq_site.get(seq, -1)
            if site < 0:
                site, _ = self._site()
        else:
            site, fz = self._site()
            call = cname = None
            if fz is not None:  # inside an emulated torch_npu fused operator (even one that calls SDPA itself)
                call, cname = self._fused_call(id(fz[0])), fz[1]
            elif self._collapse:  # inside an API an NPU runs as one kernel
                call, cname, cins, cids = self._collapse[-1]
            seq = self._seqnr()
            if seq != self._last_seq:  # this call's autograd node was made just before it ran
                self._last_seq = seq
                self._seq_site[seq - 1] = site
                if call is not None:
                    self._seq_fused[seq - 1] = (call, cname)
            if call is not None:  # the call is one op, not its math
                if fz is not None:
                    self._fused_op(call, cname, phase, site, fz[0], ins, in_ids, outs, out_ids)
                    self._cur_fused = (id(fz[0]), call, len(t.ops) - 1)
                else:
                    self._fused_op(call, cname, phase, site, None, cins, cids, outs, out_ids)
                return
        t.ops.append(Op(self.step, phase, name, site, tuple(ins), tuple(outs), tuple(in_ids), tuple(out_ids),
                        tuple(scal), extra))

    def _fused_call(self, frame_id: int) -> int:
        """The number of the fused call a frame runs: the current one while its op is the last recorded (the
        call's ops come one after the other), else a new one."""
        cur = self._cur_fused
        if cur is not None and cur[0] == frame_id and cur[2] == len(self.trace.ops) - 1:
            return cur[1]
        self._calls += 1
        return self._calls

    def _fused_op(self, call: int, name: str, phase: str, site: int, frame, ins, in_ids, outs, out_ids,
                  bwd: bool = False) -> None:
        """Record (or extend) the one op that stands for a call of an emulated fused operator: its inputs are
        the call's tensor arguments, its outputs the last tensors its math made."""
        t = self.trace
        key = (call, bwd)
        k = self._fused_open.get(key)
        if k is not None and k < len(t.ops) and t.ops[k].name == name and t.ops[k].step == self.step:
            o = t.ops[k]
            o.outs, o.out_ids = tuple(outs), tuple(out_ids)
            return
        if not bwd and frame is not None:
            ins, in_ids = _frame_tensor_args(frame, self._Tensor)
        if not bwd:
            self._fused_ins[call] = tuple(ins)
            if len(self._fused_ins) > 4096:
                self._fused_ins.clear()
        else:
            ins = self._fused_ins.get(call, ())
        self._fused_open[key] = len(t.ops)
        if len(self._fused_open) > 256:
            self._fused_open.clear()
            self._fused_open[key] = len(t.ops)
        t.ops.append(Op(self.step, phase, name, site, tuple(ins), tuple(outs), tuple(in_ids), tuple(out_ids), (),
                        {"fused": True}))

    def _dev(self, t) -> str:
        """A tensor's device type, cheaply: ``is_cpu`` is a flag; another device's type is asked once."""
        if t.is_cpu:
            return "cpu"
        if t.is_meta:
            return "meta"
        d = self._devtype
        if d is None:
            d = self._devtype = t.device.type
        return d

    def _site(self) -> tuple[int, Any]:
        """``(site index, fused)``: the user's frame above the current op, and ``(frame, name)`` of the outermost
        emulated fused operator on the way (None when the op is not part of one). The user's frame is
        :func:`ascendify.program.frames.user_frame`'s (``is_user_file``); this walk is its own because it also
        reads every frame on the way (the fused op, the library the call came through), in the same pass, per op
        of the step."""
        f = sys._getframe(3)
        kinds = self._code_kind
        via = None
        fused = None
        while f is not None:
            code = f.f_code
            k = kinds.get(code, 0)
            if k == 0:
                k = kinds[code] = self._classify(code)
            if k is True:
                fast = (code, f.f_lasti, via)  # f_lineno decodes the line table: asked once per instruction
                i = self._site_fast.get(fast)
                if i is None:
                    key = (code.co_filename, f.f_lineno, code.co_name, via)
                    i = self._site_index.get(key)
                    if i is None:
                        i = self._site_index[key] = len(self.trace.sites)
                        self.trace.sites.append(Site(code.co_filename, f.f_lineno, code.co_name, via))
                    self._site_fast[fast] = i
                return i, fused
            if type(k) is tuple:
                fused = (f, k[1])
            elif k is not None and via is None:
                via = k
            f = f.f_back
        return -1, fused

    def _classify(self, code) -> Any:
        fn = code.co_filename
        if fn.startswith("<"):
            return None
        if frames.is_user_file(fn):
            return True
        path = os.path.abspath(fn)
        if path.startswith(_FUSED_DIR) and code.co_name in _fused_names():
            return ("fused", code.co_name)  # an emulated torch_npu fused operator: one op for the trace
        if path.startswith(_OWN_DIR):
            return None
        label = _via_label(fn, code.co_name)
        if label.split(":", 1)[0] in _PLUMBING:  # torch's own wrappers around every call: never the "via"
            return None
        return label

    # -- hooks -------------------------------------------------------------------------------------------------
    def _install_hooks(self, torch) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        tracer = self
        self._handles.append(register_optimizer_step_pre_hook(self._pre_step))
        self._handles.append(register_optimizer_step_post_hook(self._post_step))
        self._handles.append(nn_module.register_module_forward_pre_hook(self._mod_pre))
        self._handles.append(nn_module.register_module_forward_hook(self._mod_post, always_call=True))
        orig_backward = torch.autograd.backward
        orig_grad = torch.autograd.grad

        def backward(tensors, *args, **kwargs):
            tracer._on_backward()
            tracer._in_backward += 1
            try:
                return orig_backward(tensors, *args, **kwargs)
            finally:
                tracer._in_backward -= 1

        def grad(*args, **kwargs):
            tracer._in_backward += 1
            try:
                return orig_grad(*args, **kwargs)
            finally:
                tracer._in_backward -= 1

        self._patches.set(torch.autograd, "backward", backward)  # Tensor.backward calls it too
        self._patches.set(torch.autograd, "grad", grad)
        self._patch_syncs(torch)
        self._patch_one_kernel_apis(torch)
        self._patch_dataloader(torch)
        self._patch_optimizer_init(torch)

    def _patch_syncs(self, torch) -> None:
        tracer = self
        for modname in ("npu", "cuda"):
            mod = getattr(torch, modname, None)
            orig = getattr(mod, "synchronize", None) if mod is not None else None
            if orig is None:
                continue

            def synchronize(*args, _orig=orig, _api=f"torch.{modname}.synchronize", **kwargs):
                if tracer.active:
                    tracer.trace.syncs.append({"api": _api, "site": tracer._site_py(), "step": tracer.step})
                return _orig(*args, **kwargs)

            self._patches.set(mod, "synchronize", synchronize)

    def _patch_one_kernel_apis(self, torch) -> None:
        """APIs an NPU runs as one kernel that the CPU (so the emulated NPU) may run as many ops (SDPA with
        dropout or a mask takes the CPU's math path): one op in the trace, as on the NPU."""
        tracer = self
        F = torch.nn.functional
        for name in ONE_KERNEL_APIS:
            orig = getattr(F, name, None)
            if orig is None:
                continue

            def api(*args, _orig=orig, _name=name, **kwargs):
                if not tracer.active:
                    return _orig(*args, **kwargs)
                ins, ids = [], []
                for x in list(args) + list(kwargs.values()):
                    if isinstance(x, tracer._Tensor):
                        ins.append((tuple(x.shape), dtype_name(x.dtype), x.device.type))
                        ids.append(id(x))
                tracer._calls += 1
                tracer._collapse.append((tracer._calls, _name, ins, ids))
                try:
                    return _orig(*args, **kwargs)
                finally:
                    tracer._collapse.pop()

            self._patches.set(F, name, api)

    def _site_py(self) -> int:
        """The user's site of a Python-level call (one frame less than an ATen call's)."""
        return self._site_from(2)

    def _site_from(self, depth: int) -> int:
        """The site of the user's frame from ``depth`` frames above the caller outwards."""
        f = frames.user_frame(depth + 1, frames.LIBRARIES)
        if f is None:
            return -1
        code = f.f_code
        key = (code.co_filename, f.f_lineno, code.co_name, None)
        i = self._site_index.get(key)
        if i is None:
            i = self._site_index[key] = len(self.trace.sites)
            self.trace.sites.append(Site(code.co_filename, f.f_lineno, code.co_name, None))
        return i

    def _patch_dataloader(self, torch) -> None:
        from torch.utils.data import DataLoader
        from torch.utils.data import dataloader as dl_mod

        tracer = self
        orig_init = DataLoader.__init__

        def __init__(loader, *args, **kwargs):  # noqa: N807
            orig_init(loader, *args, **kwargs)
            try:
                tracer._on_dataloader(loader)
            except Exception:  # noqa: BLE001 (a loader we cannot describe is left out)
                pass

        self._patches.set(DataLoader, "__init__", __init__)
        base = getattr(dl_mod, "_BaseDataLoaderIter", None)
        if base is not None:
            orig_next = base.__next__

            def __next__(it):  # noqa: N807
                t0 = time.perf_counter()
                try:
                    return orig_next(it)
                finally:
                    tracer._data_wait += time.perf_counter() - t0

            self._patches.set(base, "__next__", __next__)

    def _on_dataloader(self, loader) -> None:
        n = samples = None
        try:
            n = len(loader.dataset)
        except Exception:  # noqa: BLE001 (an iterable dataset has no length)
            n = None
        try:
            samples = len(loader.sampler) if loader.batch_size is not None else None  # an epoch's samples
        except Exception:  # noqa: BLE001
            samples = None
        self.trace.dataloaders.append({
            "site": self._site_from(2),
            "num_workers": int(getattr(loader, "num_workers", 0) or 0),
            "pin_memory": bool(getattr(loader, "pin_memory", False)),
            "drop_last": bool(getattr(loader, "drop_last", False)),
            "batch_size": getattr(loader, "batch_size", None),
            "dataset_len": n,
            "samples": samples,
            "dataset": type(loader.dataset).__name__,
            "step": self.step,
        })

    def _patch_optimizer_init(self, torch) -> None:
        tracer = self
        orig = torch.optim.Optimizer.__init__

        def __init__(opt, params, defaults, *args, **kwargs):  # noqa: N807
            orig(opt, params, defaults, *args, **kwargs)
            try:
                site = tracer._site_from(1)
                n = sum(p.numel() for g in opt.param_groups for p in g["params"])
                tensors = sum(len(g["params"]) for g in opt.param_groups)
                tracer.trace.optimizers.append({
                    "class": type(opt).__name__, "module": type(opt).__module__, "site": site,
                    "foreach": defaults.get("foreach"), "fused": defaults.get("fused"),
                    "params": n, "tensors": tensors, "id": id(opt), "steps": 0,
                })
            except Exception:  # noqa: BLE001
                pass

        self._patches.set(torch.optim.Optimizer, "__init__", __init__)

    # -- steps -------------------------------------------------------------------------------------------------
    def _pre_step(self, opt, args, kwargs) -> None:
        if self._opt_first is None:
            self._opt_first = id(opt)
            if self._unit != "optimizer step":
                # steps were counted by backward (or model calls) until the first optimizer showed up: the ops so
                # far are step 0's
                self._renumber_to_zero()
                self._unit = "optimizer step"
        elif id(opt) == self._opt_first:
            self._check_budget()
        self._opt_depth += 1
        self.phase = OPT

    def _post_step(self, opt, args, kwargs) -> None:
        self._opt_depth = max(0, self._opt_depth - 1)
        if self._opt_depth == 0:
            self.phase = FWD
        for o in self.trace.optimizers:
            if o["id"] == id(opt):
                o["steps"] += 1
        if id(opt) == self._opt_first:
            self._end_step()

    def _on_backward(self) -> None:
        if self._unit == "optimizer step":
            return
        if self._unit != "backward":
            if self._unit == "model call":
                self._renumber_to_zero()
            self._unit = "backward"
            self._backwards = 0
        if self._backwards > 0:  # the previous backward's step ends where the next begins
            self._end_step()
        self._backwards += 1
        self._check_budget()

    def _mod_pre(self, module, args) -> None:
        self._module_depth += 1
        if self._module_depth == 1 and self.capture_model and self.captured is None and self.active:
            try:
                if next(iter(module.parameters()), None) is not None:
                    from torch.utils._pytree import tree_map

                    self.captured = (module, tree_map(
                        lambda x: x.detach().to("cpu").clone() if isinstance(x, self._Tensor) else x, tuple(args)))
            except Exception:  # noqa: BLE001 (a batch that cannot be copied: no lockstep)
                self.captured = None
        if self._module_depth == 1 and self.active and len(self.trace.model_calls) < 64:
            calls = self.trace.model_calls
            if not calls or calls[-1]["step"] != self.step or calls[-1]["class"] != type(module).__name__:
                calls.append({"step": self.step, "site": self._site_from(1),
                              "class": type(module).__name__,
                              "params": bool(next(iter(module.parameters(recurse=False)), None) is not None
                                             or any(True for _ in module.children()))})
        if self._module_depth == 1 and self._unit in (None, "model call"):
            if self._unit is None:
                self._unit = "model call"
            if self._root_calls > 0:
                self._end_step()
            self._root_calls += 1  # never a reason to stop: a trainer's evaluation loop before its first step

    def _mod_post(self, module, args, out) -> None:
        self._module_depth = max(0, self._module_depth - 1)

    def _renumber_to_zero(self) -> None:
        for o in self.trace.ops:
            o.step = 0
        self.trace.steps.clear()
        self.trace.syncs[:] = [dict(s, step=0) for s in self.trace.syncs]
        self.trace.model_calls[:] = [dict(s, step=0) for s in self.trace.model_calls]
        self.step = 0
        self._step_op0 = 0

    def _end_step(self) -> None:
        now = time.perf_counter()
        n = len(self.trace.ops)
        self.trace.steps.append({"step": self.step, "seconds": round(now - self._step_t0, 6),
                                 "data_wait_s": round(self._data_wait, 6), "ops": n - self._step_op0})
        self._data_wait = 0.0
        self._step_t0 = now
        self._step_op0 = n
        self.step += 1

    def _check_budget(self) -> None:
        if self.steps_wanted is not None and len(self.trace.steps) >= self.steps_wanted and self.active:
            self.stop_reason = f"{self.steps_wanted} steps done"
            self.active = False
            raise StopTrace(self.stop_reason)

    # -- facts read once -----------------------------------------------------------------------------------------
    def _environment(self, torch) -> dict[str, Any]:
        dev = None
        try:
            if hasattr(torch, "npu") and torch.npu.is_available():
                dev = torch.npu.get_device_name(0)
        except Exception:  # noqa: BLE001
            dev = None
        emulated = "ascendify.emulator.runtime" in sys.modules and getattr(
            sys.modules["ascendify.emulator.runtime"], "enabled", False)
        return {"torch": torch.__version__, "device_name": dev, "emulated": bool(emulated), "pid": os.getpid()}

    def _settings(self) -> dict[str, Any]:
        torch = self._torch
        out: dict[str, Any] = {}
        try:
            npu = getattr(torch, "npu", None)
            if npu is not None:
                out["npu_matmul_allow_hf32"] = bool(npu.matmul.allow_hf32)
                out["npu_conv_allow_hf32"] = bool(npu.conv.allow_hf32)
        except Exception:  # noqa: BLE001
            pass
        try:
            out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        except Exception:  # noqa: BLE001
            pass
        return out


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FUSED_DIR = os.path.join(_OWN_DIR, "emulator", "fused") + os.sep
# torch.nn.functional APIs torch_npu runs as one kernel (aten::scaled_dot_product_attention has a PrivateUse1
# kernel in torch_npu 2.13, data/npu_kernels.json) that a CPU may decompose
ONE_KERNEL_APIS = ("scaled_dot_product_attention",)
_FUSED_NAMES: frozenset[str] | None = None


def _fused_names() -> frozenset[str]:
    global _FUSED_NAMES
    if _FUSED_NAMES is None:
        try:
            from ascendify.emulator.fused import names

            _FUSED_NAMES = names()
        except Exception:  # noqa: BLE001
            _FUSED_NAMES = frozenset()
    return _FUSED_NAMES


def _frame_tensor_args(frame, tensor_type) -> tuple[list, list]:
    """The tensor arguments of the call ``frame`` runs (its parameters, in order; lists of tensors opened)."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    ins, ids = [], []
    loc = frame.f_locals
    for n in names:
        v = loc.get(n)
        vals = v if isinstance(v, (list, tuple)) else (v,)
        for x in vals:
            if isinstance(x, tensor_type):
                ins.append((tuple(x.shape), dtype_name(x.dtype), x.device.type))
                ids.append(id(x))
    return ins, ids
# files of torch that wrap calls without being an API the user called (the mode's own caller, decorators)
_PLUMBING = frozenset({"torch/_dynamo/eval_frame.py", "torch/_compile.py", "torch/utils/_python_dispatch.py",
                       "torch/_ops.py", "torch/utils/_contextlib.py", "torch/autograd/grad_mode.py",
                       "torch/_jit_internal.py", "torch/overrides.py"})


def _op_name(func) -> str:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return str(func)
    name = schema.name.split("::", 1)[-1]
    return f"{name}.{schema.overload_name}" if schema.overload_name else name


def _via_label(filename: str, function: str) -> str:
    """``.../site-packages/torch/nn/functional.py`` + ``linear`` -> ``torch/nn/functional.py:linear``."""
    p = filename.replace(os.sep, "/")
    for mark in ("/site-packages/", "/dist-packages/", "/lib/python"):
        i = p.rfind(mark)
        if i >= 0:
            p = p[i + len(mark):]
            if mark == "/lib/python":
                p = p.split("/", 1)[-1]
            break
    return f"{p}:{function}"
