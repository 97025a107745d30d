"""``ascendify dump --overflow``: find the first torch call whose output has inf/NaN that its inputs did not have.

msprobe's overflow check (its ``overflow_check`` / ``nan_check`` tasks) needs a real NPU; this one runs wherever
torch runs. A :class:`torch.utils._python_dispatch.TorchDispatchMode` sees every aten call, forward and backward
(the autograd engine carries the mode into backward). For each call with a floating tensor input, the floating
outputs are checked with ``isfinite(out).all()``; only when an output is not finite are the inputs checked (a NaN
that came in is inherited, not new). In-place calls have their inputs checked before they run. A finding names the
aten call, the module it ran in (forward) or the autograd node (backward), the line of user code, the dtype, each
input's min/max and each output's inf/NaN counts.

``GradScaler.update`` is wrapped: a step whose scale went down was skipped (inf/NaN gradients); those are counted
and placed (update number, scale before and after).
"""

from __future__ import annotations

import math
import os
import sys
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ascendify.program import frames

DEFAULT_CAP = 100


_aten = torch.ops.aten
# calls whose output is uninitialised memory (may hold NaN bit patterns) even with a floating input
_UNINITIALISED = {getattr(_aten, n).default for n in ("empty_like", "new_empty", "new_empty_strided", "resize_")
                  if hasattr(_aten, n) and hasattr(getattr(_aten, n), "default")}  # fmt: skip


class OverflowStop(SystemExit):
    """Raised at the first new overflow with ``--overflow-action stop``: ends the program with status 1 (a
    SystemExit, so the program's own ``except Exception`` does not swallow it)."""

    def __init__(self, finding: dict):
        super().__init__(1)
        self.finding = finding


def _user_frame() -> dict | None:
    """The innermost frame outside torch and ascendify: the user's line."""
    f = frames.user_frame(1)
    if f is None:
        return None
    line = (traceback.extract_stack(f, limit=1) or [None])[-1]
    return {"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name,
            "code": (line.line or "").strip() if line else ""}  # fmt: skip


def _floats(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point()]


_LOW = (torch.float16, torch.bfloat16)
_F32_SUM = (*_LOW, torch.float64)  # float64: a float32 sum, so the check makes no float64 tensor of its own


def _finite(t: torch.Tensor) -> bool:
    """All of ``t`` finite. One reduction: a finite sum (float32 accumulation for 16-bit floats; a float32 sum
    for float64, whose float64 tensors the emulated NPU counts) means no inf/NaN; only a sum that is not finite
    (an inf/NaN, or a sum of finite values past the range) is checked element by element."""
    if t.numel() == 0:
        return True
    total = t.sum(dtype=torch.float32) if t.dtype in _F32_SUM else t.sum()
    if math.isfinite(total.item()):
        return True
    return bool(torch.isfinite(t).all())


def _describe_input(t: torch.Tensor) -> dict:
    d = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
    if t.numel():
        fin = torch.isfinite(t)
        d["finite"] = bool(fin.all())
        v = t.detach().float()
        d["min"], d["max"] = float(v.min()), float(v.max())
    return d


def _describe_output(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "inf": int(torch.isinf(t).sum()), "nan": int(torch.isnan(t).sum())}  # fmt: skip


class OverflowWatch(TorchDispatchMode):
    """Watch every aten call for a new inf/NaN. ``action``: ``stop`` (raise :class:`OverflowStop` at the first) or
    ``record`` (keep up to ``cap`` findings, count the rest)."""

    def __init__(self, action: str = "stop", cap: int = DEFAULT_CAP):
        super().__init__()
        if action not in ("stop", "record"):
            raise ValueError(f"overflow action {action!r}: stop or record")
        self.action, self.cap = action, cap
        self.findings: list[dict] = []
        self.count = 0
        self.calls = 0
        self.module_stack: list[str] = []
        self.class_stack: list[str] = []
        self._names: dict[int, str] = {}
        self._hooks: list = []
        self.skipped_steps: list[dict] = []
        self.updates = 0
        self._orig_update = None

    # -- modules: where a forward call ran ----------------------------------------------------------------------
    def _pre(self, module, args):
        name = self._names.get(id(module))
        if name is None:
            if not self.module_stack:  # a root: name its tree once
                root = type(module).__name__
                for sub, m in module.named_modules():
                    self._names.setdefault(id(m), f"{root}.{sub}" if sub else root)
                name = self._names[id(module)]
            else:
                name = f"{self.module_stack[-1]}.?{type(module).__name__}"
        self.module_stack.append(name)
        self.class_stack.append(type(module).__name__)

    def _post(self, module, args, out):
        if self.module_stack:
            self.module_stack.pop()
            self.class_stack.pop()

    # -- GradScaler ----------------------------------------------------------------------------------------------
    def _wrap_scaler(self):
        try:
            from torch.amp.grad_scaler import GradScaler
        except ImportError:  # pragma: no cover
            return
        orig = GradScaler.update
        watch = self

        def update(scaler, new_scale=None):
            before = scaler._scale.item() if getattr(scaler, "_scale", None) is not None else None
            out = orig(scaler, new_scale)
            after = scaler._scale.item() if getattr(scaler, "_scale", None) is not None else None
            if before is not None and after is not None and after < before:
                watch.skipped_steps.append({"update": watch.updates, "scale_before": before, "scale_after": after,
                                            "where": _user_frame()})  # fmt: skip
            watch.updates += 1
            return out

        self._orig_update = (GradScaler, orig)
        GradScaler.update = update

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self):
        from torch.nn.modules import module as nn_module

        self._hooks = [nn_module.register_module_forward_pre_hook(self._pre),
                       nn_module.register_module_forward_hook(self._post, always_call=True)]  # fmt: skip
        self._wrap_scaler()
        self.__enter__()
        return self

    def stop(self):
        self.__exit__(None, None, None)
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._orig_update is not None:
            cls, orig = self._orig_update
            cls.update = orig
            self._orig_update = None

    # -- the check -----------------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mutable = func._schema.is_mutable
        ins = None
        if mutable:  # an in-place call overwrites its inputs: check them before
            ins = _floats((args, kwargs))
            before = all(_finite(t) for t in ins)
        out = func(*args, **kwargs)
        if func.is_view or func in _UNINITIALISED:
            return out
        self.calls += 1
        outs = _floats(out) if not mutable else ins
        if not outs:
            return out
        if ins is None:
            ins = _floats((args, kwargs))
            if not ins:  # a factory (empty() holds garbage): nothing to compare with
                return out
        if all(_finite(t) for t in outs):
            return out
        if mutable:
            if not before:
                return out
        elif not all(_finite(t) for t in ins):
            return out  # inherited
        self._found(func, args, kwargs, out, mutable)
        return out

    def _found(self, func, args, kwargs, out, mutable):
        self.count += 1
        if len(self.findings) >= self.cap:
            return
        node = torch._C._current_autograd_node()
        backward = node is not None
        outs = _floats(out) if not mutable else _floats((args, kwargs))
        where = _user_frame()
        finding = {
            "index": self.count - 1,
            "call": self.calls - 1,
            "api": str(func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else func),
            "op": str(func),
            "direction": "backward" if backward else "forward",
            "module": None if backward else (self.module_stack[-1] if self.module_stack else None),
            "module_class": None if backward or not self.class_stack else self.class_stack[-1],
            "autograd_node": node.name() if backward else None,
            "file": where["file"] if where else None,
            "line": where["line"] if where else None,
            "code": where["code"] if where else None,
            "dtype": str(outs[0].dtype).removeprefix("torch.") if outs else None,
            "inputs": [_describe_input(t) for t in _floats((args, kwargs))][:8],
            "scalars": [x for x in tree_leaves((args, kwargs)) if isinstance(x, float)][:8],
            "outputs": [_describe_output(t) for t in outs][:8],
            "step": self.updates,
        }
        self.findings.append(finding)
        if self.action == "stop":
            raise OverflowStop(finding)

    def summary(self) -> dict:
        return {
            "npu_overflow_mode": npu_overflow_mode(),
            "action": self.action,
            "calls_checked": self.calls,
            "overflows": self.count,
            "first": self.findings[0] if self.findings else None,
            "findings": self.findings,
            "findings_cap": self.cap,
            "gradscaler_updates": self.updates,
            "skipped_steps": self.skipped_steps,
        }


def npu_overflow_mode() -> dict | None:
    """The emulated NPU's floating-point overflow mode (``emulator.settings.overflow_mode``) when the emulator is on,
    with what it means for this check; None otherwise (a real NPU's mode is the chip's and ``INF_NAN_MODE_ENABLE``'s,
    see docs/emulator.md)."""
    rt = sys.modules.get("ascendify.emulator.runtime")
    if rt is None or not getattr(rt, "enabled", False):
        return None
    mode = rt.settings.overflow_mode
    if mode == "saturation":
        note = ("saturation: an overflow gives +-max of its dtype and NaN gives 0, as on Atlas training series "
                "(910A) or with INF_NAN_MODE_ENABLE=0; nothing turns inf/NaN, so this check cannot see overflows: "
                "rerun with ASCENDIFY_EMULATE_OVERFLOW_MODE=inf_nan to find where they start")
    else:
        note = "inf_nan: IEEE 754 inf/NaN, CANN's default on Atlas A2/A3 (INF_NAN_MODE_ENABLE=1)"
    return {"mode": mode, "device": rt.settings.device_name, "note": note}


def watch_run(fn, action: str = "record", cap: int = DEFAULT_CAP) -> dict:
    """Run ``fn()`` under an :class:`OverflowWatch` (``record``: every new inf/NaN up to ``cap``; ``stop``: end at
    the first, :class:`OverflowStop` caught here); returns :meth:`OverflowWatch.summary` plus ``stopped``."""
    watch = OverflowWatch(action, cap).start()
    stopped = False
    try:
        fn()
    except OverflowStop:
        stopped = True
    finally:
        watch.stop()
    return {"stopped": stopped, **watch.summary()}


def target_run(model, args, kwargs, device, autocast=None, backward: bool = True) -> dict:
    """``compare --overflow``: one forward (and a backward of the mean of the squared floating outputs, so gradients
    are watched too) of ``model`` on ``device`` under ``autocast`` (a dtype or None), watched in record mode."""
    from torch.utils._pytree import tree_map

    def move(x):
        return x.to(device) if isinstance(x, torch.Tensor) else x

    model = model.to(device)
    a, k = tree_map(move, tuple(args)), tree_map(move, dict(kwargs or {}))
    dev_type = torch.device(device).type

    def run():
        with torch.autocast(dev_type, dtype=autocast) if autocast is not None else _null():
            out = model(*a, **k)
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
        if backward and outs:
            loss = sum(t.float().pow(2).mean() for t in outs)
            loss.backward()

    return watch_run(run)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run_program(runner, prog, conf: dict, *, action: str, cap: int = DEFAULT_CAP, json_path: str | None = None,
                quiet: bool = False, hide: str = __file__) -> int:
    """Run ``prog`` with ``runner`` under an :class:`OverflowWatch`; write OUT/overflow.json (``conf["output"]``)
    and a summary. Exit status: 1 when a new overflow or a skipped step was found, else the program's."""
    from pathlib import Path

    from ascendify import report

    watch = OverflowWatch(action, cap).start()
    code = 0
    stopped = False
    try:
        code = runner(hide_frames_of=[hide, __file__])
    except OverflowStop:
        code, stopped = 1, True
    finally:
        watch.stop()
    stopped = stopped or (action == "stop" and bool(watch.findings))
    summary = {"program": prog.display(), "exit_code": code, "stopped": stopped, **watch.summary()}
    out = Path(conf.get("output") or "dump")
    out.mkdir(parents=True, exist_ok=True)
    summary["file"] = str(out / "overflow.json")
    report.write_json(out / "overflow.json", summary)
    if json_path:
        report.write_json(json_path, summary)
    if not quiet:
        print_summary(summary)
    if watch.count or watch.skipped_steps:
        return 1
    return code


def _short(path: str | None) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else os.path.basename(path)
    except ValueError:
        return os.path.basename(path)


def _num(x) -> str:
    return "?" if x is None else f"{x:.4g}"


def print_summary(s: dict, file=None, title: str = "ascendify dump --overflow") -> None:
    """The terminal summary (80 columns)."""
    file = file or sys.stderr
    w = lambda text="": print(text[:80], file=file)  # noqa: E731
    first = s["first"]
    if not first:
        w(f"{title}: no new inf/NaN in {s['calls_checked']:,} calls checked")
    else:
        what = "stopped at" if s["stopped"] else "first of"
        n = s["overflows"]
        more = "" if s["stopped"] else f" {n:,} new overflow{'' if n == 1 else 's'}"
        w(f"{title}: {what}{more}: {first['api']} ({first['direction']})")
        place = first["autograd_node"] or "-"
        if first["module"]:
            place = f"{first['module']} ({first['module_class']})"
        w(f"  where   {_short(first['file'])}:{first['line']}  in {place}")
        if first["code"]:
            w(f"  code    {first['code']}")
        o = first["outputs"][0] if first["outputs"] else {}
        w(f"  output  {first['dtype']} {o.get('shape')}: {o.get('inf', 0):,} inf, {o.get('nan', 0):,} NaN")
        for i, d in enumerate(first["inputs"][:4]):
            w(f"  input {i} {d['dtype']} {d['shape']}: min {_num(d.get('min'))} max {_num(d.get('max'))}")
        if first.get("scalars"):
            w("  scalars " + ", ".join(_num(x) for x in first["scalars"]))
        if not s["stopped"] and len(s["findings"]) > 1:
            w(f"  then ({min(len(s['findings']) - 1, 5)} of {s['overflows'] - 1:,} more):")
            for f in s["findings"][1:6]:
                w(f"    {f['api']} {f['direction']} {_short(f['file'])}:{f['line']}")
    mode = s.get("npu_overflow_mode")
    if mode:
        w(f"  emulated NPU ({mode['device']}): {mode['mode']} mode")
        if mode["mode"] == "saturation":
            w("    overflows saturate (inf -> +-max, NaN -> 0): none can be seen here;")
            w("    ASCENDIFY_EMULATE_OVERFLOW_MODE=inf_nan shows where they start")
    sk = s["skipped_steps"]
    if s["gradscaler_updates"]:
        at = ", ".join(str(x["update"]) for x in sk[:12]) + (" ..." if len(sk) > 12 else "")
        w(f"  GradScaler: {len(sk)} of {s['gradscaler_updates']} steps skipped" + (f" (at {at})" if sk else ""))
    if s.get("file"):
        w(f"  written {s['file']}")
