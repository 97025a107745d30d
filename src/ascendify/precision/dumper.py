"""Record every module call and torch API call of a model, forward and backward, as a dump (msprobe's layout).

>>> with ascendify.precision.dump(model, "dump/", level="mix", mode="stats"):   # doctest: +SKIP
...     loss = model(x).sum(); loss.backward()

How it hooks (chosen for speed; see docs/precision.md):

* **modules**: forward pre/post hooks on every module of ``model`` (or, with ``model=None``, the global module hooks
  that ``ascendify dump`` installs before the program runs, so every module the program builds is seen). Module
  paths are the ``named_modules()`` paths of the outermost module called (the root, path ``""``).
* **torch APIs**: one ``torch.overrides.TorchFunctionMode`` sees every ``torch.*`` function, ``Tensor`` method and
  ``torch.nn.functional`` call made outside our own handler (one Python call per API call, instead of wrapping
  ~1,900 functions). Calls made inside an API call are not seen (a functional's own internals), nor those the
  emulated npu's kernels make (``is_conj``, ``copy_`` below a ``torch.save``): a dump records the program's calls.
* **backward**: gradient hooks on the tensors (``Tensor.register_hook``) of each recorded call: the gradient of an
  output is the backward node's input, the gradient of a (non-leaf) input its output; parameter gradients come from
  one hook per parameter. The autograd graph is not changed (no ``BackwardHookFunction``), so in-place operations on
  module outputs keep working. A gradient hook on a tensor used by several calls sees the total gradient.
* **statistics** are computed into a ``stats.StatTable`` (one C call per tensor in host memory; elsewhere on the
  tensor's device, no host sync per tensor), and moved to the host once per step at flush. A tensor seen twice (an API's output, then the enclosing
  module's output) is summarised once: the dumper remembers it by a weak reference and its version counter, so it
  keeps no tensor alive (memory is O(nodes)). Parameters are remembered by ``id`` only inside a top-level module
  call (a weak reference would stop the emulated npu's parameter swap), and every cache is dropped when a new
  top-level call starts (``p.data.add_`` in a hand-written SGD step leaves the version counter alone).

Steps: ``dumper.step()`` (or ``ascendify.precision.step()``) ends a step; ``steps=`` picks which are recorded; the
context exit ends the last one. Ranks: ``ranks=`` (torch.distributed rank, else ``$RANK``, else 0).
Scope: ``scope=["layers.0", "gelu"]`` keeps nodes whose module path is (under) one of the entries, or whose API
name or full node name contains one.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import linecache
import math
import os
import shutil
import sys
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ascendify.precision.model import LEVELS, MODES, DumpError, ScalarArg
from ascendify.precision.stats import StatTable
from ascendify.program import frames
from ascendify.program.frames import user_frame

_GC_YOUNG = 20_000  # the young generation's collection threshold while a dump runs (Dumper.start)
DEFAULT_MAX_BYTES = 1 << 30  # tensor mode refuses a step that needs more than this (1 GiB) unless raised

# Tensor methods that read metadata or control autograd: never a node.
_SKIP_TENSOR_METHODS = frozenset(
    """size dim stride numel data_ptr is_contiguous is_floating_point is_complex element_size storage_offset
    untyped_storage get_device item tolist __len__ __repr__ __format__ __bool__ __index__ __int__ __float__
    __hash__ __reduce_ex__ __deepcopy__ __setstate__ __array__ numpy backward register_hook
    register_post_accumulate_grad_hook retain_grad requires_grad_ _is_view __contains__ __iter__ __dir__
    __getstate__ __reversed__ has_names __torch_function__ _typed_storage is_shared share_memory_ dim_order
    is_pinned type nelement ndimension _version""".split()
)

_UNINITIALIZED = frozenset(("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"))

# API calls whose output holds exactly its first input's values (another layout, device or a copy)
_COPY_OPS = frozenset(
    f"Tensor.{n}" for n in ("reshape", "contiguous", "clone", "flatten", "cpu", "npu", "cuda", "reshape_as")
) | frozenset(("torch.reshape", "torch.clone", "torch.flatten"))

# split-family calls: their outputs together hold exactly the elements of their input
_SPLIT_OPS = frozenset(
    f"{p}.{n}" for p in ("Tensor", "torch") for n in ("split", "chunk", "unbind", "tensor_split", "split_with_sizes")
)


def _keeps_deferred() -> frozenset:
    """Calls that never write to a tensor's memory and that run between a fused projection and its split (views,
    the split family, shape queries): a deferred tensor's statistics can wait through them (``StatTable.add``).
    Every other call settles them first."""
    T = torch.Tensor
    names = ("view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "unflatten", "flatten",
             "unsqueeze", "squeeze", "movedim", "contiguous", "size", "dim", "stride", "numel", "is_contiguous",
             "split", "chunk", "unbind", "tensor_split", "split_with_sizes")  # fmt: skip
    funcs = {getattr(T, n) for n in names if hasattr(T, n)}
    funcs |= {getattr(torch, n) for n in names if hasattr(torch, n)}
    for prop in ("shape", "ndim", "dtype", "device", "requires_grad", "is_leaf", "grad_fn", "layout"):
        d = getattr(T, prop, None)
        if d is not None and hasattr(d, "__get__"):
            funcs.add(d.__get__)
    return frozenset(funcs)


_KEEPS_DEFERRED = _keeps_deferred()

# An API call's large output may wait for the next call, so that a split of it (a fused q/k/v projection) is read
# once: StatTable.add's defer, settled by _ApiMode, split by _split_stat. Off: measured since the C++ recorder reads
# an output in one call right after the call that made it, the deferral's own work (settling it in Python before
# the next call, the parts' combination) costs more than the second read it saves: benchmarks/dump_overhead.py,
# one process alternating both, 0.3 ms a forward less without it on the short configuration (22 ms), about 1 ms on
# the standard one (90 ms). tests/precision/test_deferred_split_stats.py turns it on: it stays correct.
_DEFER_OUTPUTS = False

# The frame a recorded call is attributed to: the first outside torch, ascendify, generated code and the standard
# library (contextlib's wrappers), and outside msprobe (its hooks when both dump)
_CALLER = frames.passing(prefixes=(os.path.dirname(contextlib.__file__) + os.sep,), contains=("/msprobe/",))

# The emulated npu's kernels and tensor plumbing: Python code that runs *below* the torch-function layer (called by
# the dispatcher, e.g. for a storage copy in torch.save), whose own torch calls (``is_conj``, ``copy_``, ``empty``)
# are not the user's. Its wrappers of user-facing functions (``device/default_index.py``, ``device/patches.py``)
# forward the user's call and are not listed.
_ASCENDIFY_DIR = os.path.dirname(sys.modules["ascendify"].__file__ or "") + os.sep
_EMULATOR_KERNEL_CODE = tuple(
    os.path.join(_ASCENDIFY_DIR, "emulator", *parts)
    for parts in (("ops", ""), ("device", "tensors.py"), ("device", "memory.py"), ("device", "layouts.py"),
                  ("device", "hostmem.py"), ("device", "rng.py"), ("device", "autograd_engine.py"))
)  # fmt: skip


class DumpTooLarge(RuntimeError):
    """A tensor-mode step would write more than ``max_bytes``."""


# ---------------------------------------------------------------------------------------------------------------
# small helpers


_dtype_names: dict[torch.dtype, str] = {}
_Tensor = torch.Tensor
_modules = sys.modules
_is_lazy = torch.nn.parameter.is_lazy
_KEYS = tuple(str(i) for i in range(64))  # argument keys "0", "1", ...


_device_names: dict[torch.device, str] = {}

# fastrec.probe (the C++ recorder's read of a tensor), item and inputs (Dumper._item_graph, the positional part of
# Dumper._record_inputs), connected at the first Dumper.start; None: the Python path
_probe = None
_citem = None
_cinputs = None
_cmode = None  # fastrec.mode_handler: the mode's handler in C++, bound to a mode (_ApiMode)
_chooks = None  # fastrec.module_hooks: Dumper._pre_hook and _post_hook in C++, bound to a dumper
_fastrec_tried = False


def _connect_fastrec() -> None:
    """Load the C++ recorder (``fastrec``; built on first use) and give its kernel call to the statistics table."""
    global _probe, _citem, _cinputs, _cmode, _chooks, _fastrec_tried
    if _fastrec_tried:
        return
    _fastrec_tried = True
    from ascendify.precision import fastrec, stats

    fns = fastrec.functions()
    if fns is not None:
        _probe = fns[0]
        stats.set_cfill(fns[1])
        rec = fastrec.recorder()
        if rec is not None:
            _citem, _cinputs = rec
            _cmode = fastrec.mode_handler(
                _ApiMode.__torch_function__, _api_cache, _OPERATOR_TABLE, _OPERATOR_FORMS, _COPY_OPS, _SPLIT_OPS,
                _any_autocast, _Rec, _CALLER, globals(),
            )
            _chooks = fastrec.module_hooks() if _cmode is not None else None


def _meta(t: torch.Tensor) -> tuple[str, tuple[int, ...], bool, str]:
    """(dtype name, shape, requires_grad, device name). The shape is the tensor's ``torch.Size`` (a tuple; copying
    it into a plain tuple costs more than the rest together)."""
    dt = t.dtype
    name = _dtype_names.get(dt)
    if name is None:
        name = _dtype_names[dt] = str(dt)
    if t.is_cpu:
        return (name, t.shape, t.requires_grad, "cpu")
    d = t.device
    dev = _device_names.get(d)
    if dev is None:
        dev = _device_names[d] = str(d)
    return (name, t.shape, t.requires_grad, dev)


def _scalar(v: Any, key: str) -> ScalarArg:
    if v is None or isinstance(v, (bool, int, float, str)):
        return ScalarArg(type(v).__name__, v, key)
    if isinstance(v, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return ScalarArg(f"torch.{type(v).__name__}", str(v), key)
    if isinstance(v, torch.Size):
        return ScalarArg("torch.Size", list(v), key)
    if isinstance(v, slice):
        return ScalarArg("slice", [v.start, v.stop, v.step] if _plain(v) else str(v), key)
    if v is Ellipsis:
        return ScalarArg("ellipsis", "...", key)
    return ScalarArg(type(v).__name__, None, key)


def _plain(s: slice) -> bool:
    return all(x is None or isinstance(x, int) for x in (s.start, s.stop, s.step))


_display_cache: dict[str, str] = {}


_kernel_cache: dict[str, bool] = {}


def _program_frame(f):
    """``f``, or the first frame below it that is not the mode's Python handler: in a dump inside another dump the
    inner dump's handler (when it is Python's, not the C++ one, which is no frame) stands between the call and the
    outer dump's handler."""
    return frames.past_code(f, _HANDLER_CODE)


def _from_emulator_kernel(depth: int = 2) -> bool:
    """True when the torch call being handled was made by the emulator's kernel code, not by the program."""
    f = _program_frame(sys._getframe(depth))
    if f is None:
        return False
    fn = f.f_code.co_filename
    v = _kernel_cache.get(fn)
    if v is None:
        v = _kernel_cache[fn] = fn.startswith(_EMULATOR_KERNEL_CODE)
    return v


def _display(filename: str) -> str:
    d = _display_cache.get(filename)
    if d is None:
        try:
            rel = os.path.relpath(filename)
            d = rel if not rel.startswith("..") else filename
        except ValueError:
            d = filename
        _display_cache[filename] = d
    return d


def current_rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


_pu1: str | None = None
_AC_DEVICES: tuple[str, ...] = ()


def _autocast_devices() -> list[str]:
    """Device types where autocast is on right now."""
    global _pu1, _AC_DEVICES
    if not _any_autocast():
        return []
    if _pu1 is None:
        try:
            _pu1 = torch._C._get_privateuse1_backend_name()
        except Exception:
            _pu1 = "privateuseone"
        devs = []
        for dev in ("cpu", "cuda", _pu1):
            try:
                torch.is_autocast_enabled(dev)
                devs.append(dev)
            except Exception:
                pass
        _AC_DEVICES = tuple(devs)
    return [dev for dev in _AC_DEVICES if torch.is_autocast_enabled(dev)]


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


class _quiet:
    """Torch-function modes off (``dtf``) and autocast off: the state statistics are computed in. Grad mode is left
    alone: statistics work on detached tensors, so they never enter the autograd graph."""

    __slots__ = ("ac", "dtf", "stack", "use_dtf")

    def __init__(self, ac_devices: list[str], dtf: bool = True):
        self.ac = ac_devices
        self.use_dtf = dtf

    def __enter__(self):
        self.dtf = torch._C.DisableTorchFunction() if self.use_dtf else None
        if self.dtf is not None:
            self.dtf.__enter__()
        self.stack = None
        if self.ac:
            self.stack = contextlib.ExitStack()
            for dev in self.ac:
                self.stack.enter_context(torch.autocast(dev, enabled=False))
        return self

    def __exit__(self, *exc):
        if self.stack is not None:
            self.stack.__exit__(*exc)
        if self.dtf is not None:
            self.dtf.__exit__(*exc)
        return False


class _Rec:
    """A node being recorded (tensor values are indices into the dumper's list of statistics vectors)."""

    __slots__ = (
        "name", "kind", "direction", "call_index", "order", "module_path", "api", "class_name", "parent",
        "args", "outputs", "params", "grads", "source", "autocast", "backward", "base", "ac", "lazy",
    )  # fmt: skip

    def __init__(self, name, kind, direction, call_index, order, module_path, api, class_name, parent, base):
        self.name = name
        self.kind = kind
        self.direction = direction
        self.call_index = call_index
        self.order = order
        self.module_path = module_path
        self.api = api
        self.class_name = class_name
        self.parent = parent
        self.base = base  # name without direction/index, e.g. "Functional.gelu" / "Module.fc.Linear"
        self.args: list = []  # positional and keyword inputs, keyed "0", "1.0", "weight"
        self.outputs: list = []
        self.params: dict = {}
        self.grads: dict = {}
        self.source = None
        self.autocast = None
        self.backward: _Rec | None = None
        self.ac: list[str] | tuple = ()  # autocast devices on at the call (_autocast_devices)
        self.lazy: torch.nn.Module | None = None  # a module with uninitialised parameters (_record_params)


def _api_info(func) -> tuple[str, str] | None:
    """(msprobe-style prefix name, dotted API name) of a torch function, or None when it is not a node."""
    name = getattr(func, "__name__", None)
    if not name or name in ("__get__", "__set__"):
        return None
    if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
        return None  # private helpers (_set_grad_enabled, _record_function_enter_new, ...)
    if name in _UNINITIALIZED:
        return None  # uninitialised memory: its values mean nothing and differ run to run
    qual = getattr(func, "__qualname__", "") or ""
    mod = getattr(func, "__module__", None) or ""
    if getattr(func, "__objclass__", None) is torch._C.TensorBase or qual.startswith(("Tensor.", "TensorBase.")):
        if name in _SKIP_TENSOR_METHODS:
            return None
        return (f"Tensor.{name}", f"Tensor.{name}")
    if mod in ("torch.nn.functional", "torch._C._nn"):
        return (f"Functional.{name}", f"torch.nn.functional.{name}")
    if mod == "torch._C._linalg" and name.startswith("linalg_"):
        return (f"Torch.{name}", f"torch.linalg.{name[7:]}")
    if mod in ("torch", "torch.functional", "torch._C._VariableFunctions") or qual.startswith("_VariableFunctions"):
        return (f"Torch.{name}", f"torch.{name}")
    if mod.startswith("torch.distributed"):
        return (f"Distributed.{name}", f"{mod}.{name}")
    if mod.startswith("torch"):
        return (f"Torch.{name}", f"{mod}.{name}")
    return None


_api_cache: dict[Any, tuple[str, str] | None] = {}


def _cached_api_info(func) -> tuple[str, str] | None:
    try:
        return _api_cache[func]
    except (KeyError, TypeError):
        info = _api_info(func)
        try:
            _api_cache[func] = info
        except TypeError:
            pass
        return info

# ``a * b`` reaches the mode as Tensor.mul; msprobe (which wraps Tensor.__mul__) names it Tensor.__mul__. The
# caller's current bytecode instruction says which form was written (CPython 3.11+; elsewhere: the method name).
_BINARY = {0: "add", 1: "and", 2: "floordiv", 3: "lshift", 4: "matmul", 5: "mul", 6: "mod", 7: "or", 8: "pow",
           9: "rshift", 10: "sub", 11: "truediv", 12: "xor"}  # fmt: skip
_COMPARE = {0: "lt", 1: "le", 2: "eq", 3: "ne", 4: "gt", 5: "ge"}
_OPERATOR_FORMS = frozenset(
    f"Tensor.{n}" for n in ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "true_divide", "matmul",
                            "floor_divide", "floor_divide_", "remainder", "remainder_", "pow", "pow_",
                            "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_and_", "bitwise_or_",
                            "bitwise_xor_", "__lshift__", "__rshift__", "lt", "le", "eq", "ne", "gt", "ge")
)  # fmt: skip
try:
    import dis as _dis

    _BINARY_OP = _dis.opmap.get("BINARY_OP")
    _COMPARE_OP = _dis.opmap.get("COMPARE_OP")
except Exception:  # pragma: no cover
    _BINARY_OP = _COMPARE_OP = None


def _operator_name(op: int, arg: int) -> str | None:
    """The dunder name of the operator the instruction ``(op, arg)`` applies, or None."""
    if op == _BINARY_OP and _BINARY_OP is not None:
        name = _BINARY.get(arg % 13)
        if name is None:
            return None
        return f"__i{name}__" if arg >= 13 else f"__{name}__"
    if op == _COMPARE_OP and _COMPARE_OP is not None and sys.version_info < (3, 12):
        name = _COMPARE.get(arg)
        return None if name is None else f"__{name}__"
    return None


# opcode * 256 + oparg -> the API info of the operator it applies (the C++ handler reads this table too)
_OPERATOR_TABLE = {
    op * 256 + arg: (f"Tensor.{name}", f"Tensor.{name}")
    for op in (_BINARY_OP, _COMPARE_OP) if op is not None
    for arg in range(256) if (name := _operator_name(op, arg)) is not None
}  # fmt: skip


def _operator_form(info: tuple[str, str]) -> tuple[str, str]:
    try:
        f = _program_frame(sys._getframe(2))  # the code that wrote the operator (C slot wrappers add no frame)
        code, i = f.f_code.co_code, f.f_lasti
        op, arg = code[i], code[i + 1]
    except (ValueError, IndexError, AttributeError):
        return info
    return _OPERATOR_TABLE.get(op * 256 + arg, info)


class _ApiMode(TorchFunctionMode):
    def __init__(self, dumper: Dumper):
        super().__init__()
        self.d = dumper
        if _cmode is not None and _citem is not None and _cinputs is not None:
            # the handler below in C++ for the common recorded call (fastrec.cpp): an instance attribute, which
            # torch looks up first; the C++ handler calls this class's for everything else. Only with the rest of
            # the C++ recorder on (a test that turns it off gets the Python path throughout)
            self.__torch_function__ = _cmode(self)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        d = self.d
        if d._busy:  # the dumper's own calls
            return func(*args, **kwargs) if kwargs else func(*args)
        if d._table.pending is not None and func not in _KEEPS_DEFERRED:
            d._table.settle()  # this call could write to the deferred tensor: take its statistics first
        try:
            info = _api_cache[func]
        except (KeyError, TypeError):
            info = _cached_api_info(func)
        if not d._recording:
            if info is not None and not (d._step_active or d._in_optimizer):
                d._step_active = True  # a call this step would have recorded (the optimizer's own are not)
            return func(*args, **kwargs) if kwargs else func(*args)
        if info is None or ("ascendify.emulator" in _modules and _from_emulator_kernel()):
            return func(*args, **kwargs) if kwargs else func(*args)
        if info[0] in _OPERATOR_FORMS:
            info = _operator_form(info)
        if kwargs is None:
            kwargs = {}
        rec = d._begin_api(info, args, kwargs)
        out = func(*args, **kwargs)
        if rec is not None:
            d._end(rec, out)
        return out


_HANDLER_CODE = _ApiMode.__torch_function__.__code__  # (_program_frame)

# ---------------------------------------------------------------------------------------------------------------


class Dumper:
    """Records nodes; see the module docstring. Use :func:`dump` to build one."""

    # -- what the writer (msprobe_io.write_step) reads of the step it is given: it does not import this module,
    # and reads nothing else of the dumper than these and the settings (root, level, mode, scope, step_index)

    def check_disk(self, root: Path, nbytes: int) -> None:
        check_disk(root, nbytes)

    def source_text(self, src: tuple | None) -> tuple[str | None, str | None]:
        """``source_text`` of a recorded call's source: ``(code, instruction offset)`` as recorded (the texts kept
        for the next steps, which call from the same places), or ``(file, line, function)``."""
        if src is None or len(src) != 2:
            return source_text(src)
        got = _source_texts.get(src)
        if got is None:
            code = src[0]
            got = source_text((code.co_filename, _line_at(code, src[1]), code.co_name))
            if len(_source_texts) > 65536:
                _source_texts.clear()
            _source_texts[src] = got
        return got

    @property
    def rank(self) -> int:
        """The rank this dump records (torch.distributed's, else ``$RANK``, else 0; read at ``start``)."""
        return self._rank

    def tensor_bytes(self) -> int:
        """Bytes of tensor data seen so far in this step (tensor mode)."""
        return self._bytes

    def kept_tensor(self, idx: int) -> torch.Tensor | None:
        """Tensor mode: the copy kept of statistics row ``idx``'s tensor in this step, or None."""
        return self._tensors.get(idx)

    def checksum(self, idx: int) -> str | None:
        """Checksum mode: the MD5 of statistics row ``idx``'s tensor in this step, or None."""
        return self._md5.get(idx)

    def __init__(
        self,
        model: torch.nn.Module | None,
        path: str | os.PathLike[str],
        *,
        level: str = "mix",
        mode: str = "stats",
        steps: Iterable[int] | None = None,
        ranks: Iterable[int] | None = None,
        scope: Iterable[str] | str | None = None,
        backward: bool = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
        skip_optimizer: bool = True,
        step_on_optimizer: bool = False,
    ):
        if level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None, not {type(model).__name__}")
        self.model = model
        self.root = Path(path)
        if self.root.exists() and not self.root.is_dir():
            raise DumpError(self.root, "the dump folder exists and is not a folder")
        self.level = level
        self.mode = mode
        self._keeps = mode != "stats"  # tensor and checksum modes keep something of each tensor (_keep)
        self.steps = None if steps is None else frozenset(int(s) for s in steps)
        self.ranks = None if ranks is None else frozenset(int(r) for r in ranks)
        if isinstance(scope, str):
            scope = [scope]
        self.scope = tuple(s for s in (scope or ()) if s)
        self.backward = backward
        self.max_bytes = int(max_bytes)
        self.skip_optimizer = skip_optimizer
        self.step_on_optimizer = step_on_optimizer
        self.explicit_steps_win = True  # a call to precision.step() turns optimizer boundaries off
        self.step_index = 0
        self._step_active = False  # a module or torch call ran in this step (recorded or not)
        self._last_step_active = True  # stop(): whether the step in progress then had run anything
        self.written: list[Path] = []
        self.written_info: list[dict] = []
        self.error: BaseException | None = None
        self._handles: list = []
        self._param_handles: dict[int, Any] = {}
        self._mode: _ApiMode | None = None
        self._started = False
        self._froze = False
        self._gc_threshold: tuple[int, ...] | None = None
        self._rank = current_rank()
        self._busy = False
        self._in_optimizer = 0
        self._paths: dict[int, tuple[weakref.ref, str]] = {}
        self._stack: list[tuple[torch.nn.Module, str, _Rec | None]] = []
        self._reset_step()
        self._update_recording()

    # -- step state --------------------------------------------------------------------------------------------

    def _reset_step(self) -> None:
        self._recs: list[_Rec] = []
        self._table = StatTable()  # statistics vectors; a tensor's index is its row
        self._seen: dict[int, tuple[weakref.ref, int, int]] = {}
        # memory key (_memory_key: data_ptr, dtype, footprint) -> (the newest tensor over it, version, its row)
        self._storage: dict[tuple, tuple[weakref.ref, int, int]] = {}
        self._params_seen: dict[int, tuple[int, int]] = {}  # id -> (version, index), inside a top-level call
        self._grad_targets: dict[int, list] = {}  # statistics index -> [(rec, side, key)]: one hook per tensor
        self._counts: dict[str, int] = {}
        self._tensors: dict[int, torch.Tensor] = {}  # tensor mode: index -> detached copy
        self._md5: dict[int, str] = {}
        self._bytes = 0
        self._n_tensors = 0
        self._over = False

    def _update_recording(self) -> None:
        self._recording = (
            self._started
            and (self.steps is None or self.step_index in self.steps)
            and (self.ranks is None or self._rank in self.ranks)
        )

    # -- public API ----------------------------------------------------------------------------------------------

    def start(self) -> Dumper:
        if self._started:
            return self
        self._started = True
        self._rank = current_rank()
        _connect_fastrec()
        # A dump keeps its records for a whole step, which makes Python's cyclic GC run full collections that
        # walk every object of the process (torch's own are most of them: ~0.1 s each here). Freezing what exists
        # now keeps those collections to the objects made during the dump; stop() unfreezes. Left alone when the
        # program froze objects itself.
        self._froze = gc.get_freeze_count() == 0
        if self._froze:
            gc.freeze()
        # A step's records (~30 tracked objects a recorded call, freed at flush) also set off a young-generation
        # collection every 700 allocations, each walking the tensors made since (~0.3 ms apiece here: 0.1-0.6 ms
        # of a 69-call step). A higher first threshold while the dump runs lets a step's records come and go
        # between collections; the program's cyclic garbage is still collected, less often. stop() restores it.
        self._gc_threshold = gc.get_threshold()
        if 0 < self._gc_threshold[0] < _GC_YOUNG:
            gc.set_threshold(_GC_YOUNG, *self._gc_threshold[1:])
        if self.model is not None:
            pre, post = self._pre_hook, self._post_hook
            if _chooks is not None and _citem is not None and _cinputs is not None:
                pre, post = _chooks(self)  # the common module call in C++; they call the two methods for the rest
            for m in self._register_paths(self.model, ""):
                self._handles.append(_hook_module(m, pre, post))
        else:
            from torch.nn.modules import module as _m

            self._handles.append(_m.register_module_forward_pre_hook(self._global_pre_hook))
            self._handles.append(
                _m.register_module_forward_hook(self._post_hook, with_kwargs=True, always_call=True)
            )
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_pre_hook(self._opt_pre))
        self._handles.append(register_optimizer_step_post_hook(self._opt_post))
        if self.level in ("api", "mix"):
            self._mode = _ApiMode(self)
            self._mode.__enter__()
        self._update_recording()
        return self

    def stop(self) -> list[Path]:
        """Remove every hook and write the step in progress. Returns the folders written."""
        if not self._started:
            return self.written
        self._started = False
        self._recording = False
        if self._mode is not None:
            try:
                self._mode.__exit__(None, None, None)
            except Exception:
                pass
            self._mode.__dict__.pop("__torch_function__", None)  # the C++ handler holds the mode: no cycle left
            self._mode = None
        from torch.nn.modules import module as _m

        for h in self._handles:
            if type(h) in (tuple, list):
                _unhook_module(h)
                continue
            h.remove()
            # torch's handle of a global hook with kwargs leaves its id in _global_forward_hooks_with_kwargs,
            # and torch.compile then warns about global hooks for the rest of the process
            _m._global_forward_hooks_with_kwargs.pop(getattr(h, "id", None), None)
        for h in self._param_handles.values():
            _remove_grad_hook(h)
        self._handles.clear()
        self._param_handles.clear()
        self._stack.clear()
        self._last_step_active = self._step_active or any(r.kind is not None for r in self._recs)
        try:
            self._flush()
        finally:
            if self._froze:
                gc.unfreeze()
                self._froze = False
            if self._gc_threshold is not None and gc.get_threshold()[0] == _GC_YOUNG:  # not changed meanwhile
                gc.set_threshold(*self._gc_threshold)
            self._gc_threshold = None
        return self.written

    def step(self) -> None:
        """End the current step (write it when it was recorded) and start the next."""
        self._flush()
        self.step_index += 1
        self._step_active = False
        self._update_recording()

    @property
    def steps_seen(self) -> int:
        """The steps the program ran so far: after ``stop()``, a last step in which nothing ran (the program
        ended right after its last ``optimizer.step()``) is not one."""
        if self._started:
            return self.step_index + 1
        return self.step_index + (1 if self._last_step_active else 0)

    def __deepcopy__(self, memo) -> Dumper:
        """Itself: a model deep-copied while it is dumped (an EMA copy) keeps its modules' hooks, which then record
        into this dump, whether they are the C++ hooks (copied as they are) or the Python ones (bound methods,
        copied with a copy of their dumper before this method: the whole dump state, the model included, and a
        dumper that recorded what it never wrote)."""
        return self

    def __enter__(self) -> Dumper:
        return self.start()

    def __exit__(self, *exc) -> None:
        global _current
        if _current is self:
            _current = None
        if exc[0] is not None:
            # the program failed: still write what was recorded, but never hide its error
            try:
                self.stop()
            except Exception as e:  # pragma: no cover - reported, the original error wins
                print(f"ascendify dump: could not write the dump: {e}", file=sys.stderr)
            return
        self.stop()

    # -- module paths --------------------------------------------------------------------------------------------

    def _register_paths(self, root: torch.nn.Module, prefix: str) -> list[torch.nn.Module]:
        """Name ``root``'s modules (``named_modules()`` paths under ``prefix``) where not named yet; returns them
        all (``root.modules()``)."""
        mods = []
        paths = self._paths
        for name, m in _named_modules(root):
            mods.append(m)
            got = paths.get(id(m))
            if got is not None and got[0]() is m:
                continue
            path = f"{prefix}.{name}" if prefix and name else (prefix or name)
            paths[id(m)] = (weakref.ref(m), path)
        return mods

    def _path_of(self, module: torch.nn.Module) -> str:
        entry = self._paths.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        if self._stack:  # built on the fly inside another module: named after its class under its caller
            parent = self._stack[-1][1]
            prefix = f"{parent}.{type(module).__name__}" if parent else type(module).__name__
        else:
            prefix = ""
        self._register_paths(module, prefix)
        return self._paths[id(module)][1]

    def _in_scope(self, module_path: str | None, name: str) -> bool:
        if not self.scope:
            return True
        for s in self.scope:
            if module_path is not None and (module_path == s or module_path.startswith(s + ".")):
                return True
            if s in name:
                return True
        return False

    # -- statistics ----------------------------------------------------------------------------------------------

    def _stat(self, t: torch.Tensor, defer: bool = False) -> int:
        """Index of ``t``'s statistics vector in this step (computed once per tensor version). ``defer``: an API
        call's output, which may wait for the next call (``StatTable.add``; ``_ApiMode`` settles it)."""
        p = _probe(t) if _probe is not None else None
        if p is not None:
            return self._stat_probed(t, p, defer)
        try:
            ver = t._version
        except RuntimeError:  # inference tensors keep no version counter: summarise them every time
            ver = None
        else:
            if t.requires_grad and t.is_leaf:
                return self._param_stat(t, id(t), ver)
            seen = self._seen.get(id(t))
            if seen is not None and seen[1] == ver and seen[0]() is t:
                return seen[2]
        return self._stat_new(t, ver, _memory_key(t, ver), defer)

    def _stat_probed(self, t: torch.Tensor, p: tuple, defer: bool) -> int:
        """``_stat`` with what ``fastrec.probe`` read of ``t`` in one call: (metadata, version, a leaf that requires
        grad, memory key)."""
        ver = p[1]
        if ver is not None:
            if p[2]:
                return self._param_stat(t, id(t), ver)
            seen = self._seen.get(id(t))
            if seen is not None and seen[1] == ver and seen[0]() is t:
                return seen[2]
        return self._stat_new(t, ver, p[3], defer)

    def _stat_new(self, t: torch.Tensor, ver: int | None, skey: tuple | None, defer: bool) -> int:
        """``_stat`` of a tensor (version) not summarised yet in this step: a view of a summarised tensor's memory
        (``skey``: ``_memory_key``) reuses its statistics, anything else is read."""
        table = self._table
        base = self._storage.get(skey) if skey is not None else None
        if base is not None and base[1] == ver and base[0]() is not None and table.has(base[2]):
            idx = table.add_view(base[2], t)  # a view of the same elements: same statistics
        else:
            base = None
            idx = table.add(t, defer and ver is not None)
            if skey is not None and table.has(idx):
                self._storage.pop(skey, None)
        self._remember(t, ver, skey, idx, base)
        if self._keeps:
            self._keep(t, idx)
        return idx

    def _remember(self, t: torch.Tensor, ver: int | None, skey: tuple | None, idx: int, base: tuple | None) -> None:
        """Note ``t``'s row for later calls that name ``t`` (``_seen``) or a view of its memory (``_storage``);
        ``base``: the entry ``t`` reused."""
        if ver is None:
            return
        try:
            ref = weakref.ref(t)
        except TypeError:
            return
        self._seen[id(t)] = (ref, ver, idx)
        if skey is None:
            return
        if base is not None:
            # the newest tensor over this memory keeps the entry valid (while it lives, the memory is not reused):
            # q/k/v's slices die inside the attention code, their views and transposes live on
            self._storage[skey] = (ref, ver, base[2])
        elif self._table.has(idx) and skey not in self._storage:
            self._storage[skey] = (ref, ver, idx)

    def _split_stat(self, src: int, parts: list[torch.Tensor]) -> None:
        """The outputs of a ``split``/``chunk``/``unbind`` of row ``src``'s tensor: when that tensor's statistics
        are still deferred, the parts are read and its row is combined from theirs (``StatTable.add_parts``)."""
        rows = self._table.add_parts(src, parts)
        if rows is None:
            return
        for t, idx in zip(parts, rows, strict=True):
            try:
                ver = t._version
            except RuntimeError:
                continue
            skey = _memory_key(t, ver)
            if skey is not None:
                self._storage.pop(skey, None)
            self._remember(t, ver, skey, idx, None)
            self._keep(t, idx)

    def _keep(self, t: torch.Tensor, idx: int) -> None:
        """Tensor mode: a copy of ``t``; checksum mode: its MD5."""
        if self.mode == "tensors":
            nbytes = t.numel() * t.element_size()
            self._bytes += nbytes
            self._n_tensors += 1
            if self._bytes <= self.max_bytes:
                self._tensors[idx] = t.detach().to("cpu", copy=True)
            else:
                self._over = True
                self._tensors.clear()
        elif self.mode == "checksum":
            self._md5[idx] = _md5(t)

    def _param_stat(self, t: torch.Tensor, key: int, ver: int) -> int:
        """``_stat`` for a parameter (a leaf that requires grad), without a weak reference to it: a weak reference
        makes ``torch.utils.swap_tensors`` refuse the tensor, and the emulated npu moves parameters by swapping
        (``Module.to``). Inside a top-level module call the module holds its parameters, so ``id`` names one
        tensor and its statistics are computed once; outside (``Module.to``'s conversions) every time."""
        hit = self._params_seen.get(key) if self._stack else None
        if hit is not None and hit[0] == ver:
            return hit[1]
        idx = self._table.add(t)
        if self._stack:
            self._params_seen[key] = (ver, idx)
        if self._keeps:
            self._keep(t, idx)
        return idx

    def _copy_stat(self, out: torch.Tensor, src_idx: int) -> None:
        """``out`` holds the same values as the tensor summarised at ``src_idx`` (a reshape copy, ``contiguous``,
        ``clone``, a device move): reuse its statistics, compute only the fingerprint (positions may differ)."""
        if not self._table.has(src_idx) or id(out) in self._seen or self.mode != "stats":
            return
        # the source tensor had the same number of elements and dtype (checked through the recorded metadata)
        idx = self._table.add_view(src_idx, out)
        try:
            self._seen[id(out)] = (weakref.ref(out), out._version, idx)
        except (TypeError, RuntimeError):
            pass

    def _item(self, t: torch.Tensor, key: str, defer: bool = False) -> tuple:
        """``(key, metadata, statistics row)`` of a tensor; an uninitialised parameter of a lazy module (no shape,
        no values yet) as a value without statistics."""
        p = _probe(t) if _probe is not None else None
        if p is not None:
            return (key, p[0], self._stat_probed(t, p, defer))
        try:
            meta = _meta(t)
        except RuntimeError:
            return (key, _scalar(t, key), None)
        return (key, meta, self._stat(t, defer))

    def _item_graph(self, t: torch.Tensor, key: str, defer: bool = False) -> tuple[tuple, bool]:
        """``(_item(t, key, defer), t requires grad and has a grad_fn)``. With the C++ recorder the second is read
        from the probe (requires grad, not a leaf): asking for ``t.grad_fn`` makes a Python object of the node."""
        if _citem is not None:
            got = _citem(self, t, key, defer)  # this method's work in C++ (fastrec.item), where it applies
            if got is not None:
                return got
        return self._item_graph_py(t, key, defer)

    def _item_graph_py(self, t: torch.Tensor, key: str, defer: bool = False) -> tuple[tuple, bool]:
        p = _probe(t) if _probe is not None else None
        if p is not None:
            return (key, p[0], self._stat_probed(t, p, defer)), p[0][2] and not p[2]
        return self._item(t, key, defer), t.requires_grad and t.grad_fn is not None

    def _value(self, v: Any, key: str, out: list) -> None:
        if isinstance(v, _Tensor):
            out.append(self._item(v, key))
        elif isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            if not v:
                out.append((key, ScalarArg(type(v).__name__, [], key), None))
            for i, x in enumerate(v):
                self._value(x, f"{key}.{i}", out)
        else:
            out.append((key, _scalar(v, key), None))

    def _record_inputs(self, rec: _Rec, args, kwargs, grad_on: bool) -> None:
        # gradients of non-leaf tensor inputs (a tensor argument, or one in a list argument) are the backward node's
        # outputs (leaves: see parameter hooks)
        out = rec.args
        watch = self.backward and grad_on
        if _cinputs is not None:
            _cinputs(self, rec, args, watch)  # the loop below in C++ (fastrec.inputs)
            args = ()
        for i, a in enumerate(args):
            key = _KEYS[i] if i < len(_KEYS) else str(i)
            if isinstance(a, _Tensor):  # most arguments: _value's first case, inline
                item, has_grad_fn = self._item_graph(a, key)
                out.append(item)
                if watch and has_grad_fn and item[2] is not None:
                    self._watch_grad(a, rec, "output", key, item[2])
            else:
                self._value(a, key, out)
                if watch and isinstance(a, (list, tuple)):
                    self._watch_list(a, rec, key)
        if kwargs:
            self._record_kwargs(rec, kwargs, watch)

    def _record_kwargs(self, rec: _Rec, kwargs: dict, watch: bool) -> None:
        out = rec.args
        for key, a in kwargs.items():
            self._value(a, key, out)
            if watch and isinstance(a, _Tensor) and a.requires_grad and a.grad_fn is not None:
                self._watch_grad(a, rec, "output", key)

    def _watch_list(self, items, rec: _Rec, key: str) -> None:
        for j, x in enumerate(items):
            if isinstance(x, _Tensor) and x.requires_grad and x.grad_fn is not None:
                self._watch_grad(x, rec, "output", f"{key}.{j}")

    def _record_outputs(self, rec: _Rec, out) -> list[tuple[str, torch.Tensor, int]]:
        """Record the outputs; return the tensors that need a gradient hook."""
        if isinstance(out, _Tensor):
            if rec.api not in _COPY_OPS and rec.api not in _SPLIT_OPS:  # most calls: one tensor out, as below
                # an API call's single output may wait for the next call (which settles it unless it is a view or
                # split)
                item, has_grad_fn = self._item_graph(out, "0", _DEFER_OUTPUTS and rec.kind == "api")
                rec.outputs.append(item)
                if has_grad_fn:  # never a hook on a leaf (it would outlive the step)
                    return [("0", out, item[2])]
                return []
            flat = [("0", out)]
        elif isinstance(out, (list, tuple)):
            flat = []
            _flatten(out, "", flat)
        elif isinstance(out, dict):
            flat = []
            for k, v in out.items():
                _flatten(v, str(k), flat)
        else:
            flat = [("0", out)] if out is not None else []
        grad_out = []
        if rec.api in _COPY_OPS and isinstance(out, torch.Tensor) and rec.args and rec.args[0][2] is not None:
            src_meta = rec.args[0][1]
            if src_meta[0] == _meta(out)[0] and math.prod(src_meta[1]) == out.numel():
                self._copy_stat(out, rec.args[0][2])
        elif (
            rec.api in _SPLIT_OPS and self._table.pending is not None and rec.args and rec.args[0][2] is not None
            and flat and all(isinstance(v, torch.Tensor) for _, v in flat)
        ):  # fmt: skip
            self._split_stat(rec.args[0][2], [v for _, v in flat])
        # an API call's single output may wait for the next call (which settles it unless it is a view or split)
        defer = _DEFER_OUTPUTS and rec.kind == "api" and isinstance(out, torch.Tensor)
        for key, v in flat:
            if isinstance(v, torch.Tensor):
                item = self._item(v, key, defer)
                rec.outputs.append(item)
                if v.requires_grad and v.grad_fn is not None:  # never a hook on a leaf: it would outlive the step
                    grad_out.append((key, v, item[2]))
            elif v is not None:
                rec.outputs.append((key, _scalar(v, key), None))
        return grad_out

    def _new_rec(self, base: str, kind: str, module_path, api, class_name) -> _Rec:
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        if kind == "module":
            name = f"{base}.forward.{n}"
        else:
            name = f"{base}.{n}.forward"
        parent = None
        for entry in reversed(self._stack):
            if entry[2] is not None:
                parent = entry[2].name
                break
        rec = _Rec(name, kind, "forward", n, len(self._recs), module_path, api, class_name, parent, base)
        f = user_frame(2, _CALLER)  # from the frame that called the dumper's hook or mode
        if f is not None:
            # the line is found when the step is written (source_text): f_lineno decodes the code's line table
            # from its start, a microsecond and more in a long forward, on every recorded call
            rec.source = (f.f_code, f.f_lasti)
        self._recs.append(rec)
        return rec

    # -- hooks ---------------------------------------------------------------------------------------------------

    def _global_pre_hook(self, module, args):
        return self._pre_hook(module, args, {})

    def _pre_hook(self, module, args, kwargs):
        if not self._recording or self._busy:
            if not self._busy and not self._in_optimizer:
                self._step_active = True
            return None
        if not self._stack:
            # a new top-level call: parameters may have changed since the last one through ``p.data`` (a
            # hand-written SGD step), which leaves the parameter's version counter alone; summarise them afresh
            self._seen.clear()
            self._storage.clear()
            self._params_seen.clear()
        path = self._path_of(module)
        rec = None
        if self.level != "api":
            cls = type(module).__name__
            base = f"Module.{path}.{cls}" if path else f"Module.{cls}"
            if self._in_scope(path, base):
                self._busy = True
                grad_on = torch.is_grad_enabled()
                try:
                    ac = _autocast_devices()
                    with _quiet(ac):
                        rec = self._new_rec(base, "module", path, None, cls)
                        rec.ac = ac
                        if ac:
                            rec.autocast = str(torch.get_autocast_dtype(ac[-1]))
                        self._record_inputs(rec, args, kwargs, grad_on)
                        self._record_params(rec, module)
                finally:
                    self._busy = False
        self._stack.append((module, path, rec))
        return None

    def _record_params(self, rec: _Rec, module: torch.nn.Module) -> None:
        """The module's own parameters (``named_parameters(recurse=False)``, cheaper). A lazy module's parameter
        (``nn.LazyLinear``) is uninitialised until the module's own pre-hook, which may run after ours (``ascendify
        dump``'s global hooks run first), gives it a shape: it is recorded when the module returns."""
        lazy = False
        for pname, p in module._parameters.items():
            if p is None or pname in rec.params:
                continue
            if _is_lazy(p):
                lazy = True
                continue
            probed = _probe(p) if _probe is not None else None
            if probed is not None:
                meta = probed[0]
                rec.params[pname] = (meta, self._stat_probed(p, probed, False))
            else:
                meta = _meta(p)
                rec.params[pname] = (meta, self._stat(p))
            if self.backward and meta[2] and id(p) not in self._param_handles:
                self._hook_param(rec, pname, p)
        if rec.lazy is not None:  # the module returned: parameters in the module's order
            rec.params = {n: rec.params[n] for n in module._parameters if n in rec.params}
        rec.lazy = module if lazy and rec.lazy is None else None

    def _hook_param(self, rec: _Rec, pname: str, p: torch.nn.Parameter) -> None:
        """The gradient hook of a module's parameter (one per parameter for the whole dump)."""
        self._param_handles[id(p)] = _add_grad_hook(p, self._param_grad_hook(rec.module_path, rec.class_name, pname))

    def _post_hook(self, module, args, kwargs, output):
        if not self._stack:
            return None
        # pop to this module (a failed inner call may have left entries behind)
        while self._stack:
            m, path, rec = self._stack.pop()
            if m is module:
                break
        else:
            return None
        if rec is None or not self._recording:
            return None
        self._end(rec, output)
        return None

    def _begin_api(self, info: tuple[str, str], args, kwargs) -> _Rec | None:
        if self._in_optimizer and self.skip_optimizer:
            return None
        base, api = info
        module_path = self._stack[-1][1] if self._stack else None
        if self.scope and not self._in_scope(module_path, base):
            return None
        self._busy = True
        grad_on = torch.is_grad_enabled()
        try:
            rec = self._new_rec(base, "api", module_path, api, None)
            ac = _autocast_devices() if _any_autocast() else None
            if ac:
                with _quiet(ac, dtf=False):  # inside the mode's own handler: the mode is off already
                    rec.ac = ac
                    rec.autocast = str(torch.get_autocast_dtype(ac[-1]))
                    self._record_inputs(rec, args, kwargs, grad_on)
            else:
                self._record_inputs(rec, args, kwargs, grad_on)
        finally:
            self._busy = False
        return rec

    def _end(self, rec: _Rec, out) -> None:
        self._busy = True
        try:
            grad_on = torch.is_grad_enabled()
            if rec.kind == "api" and not rec.ac:  # inside the mode's handler, autocast off: nothing to switch off
                self._end_body(rec, out, grad_on)
            else:
                with _quiet(rec.ac, dtf=rec.kind == "module"):
                    self._end_body(rec, out, grad_on)
        finally:
            self._busy = False

    def _end_body(self, rec: _Rec, out, grad_on: bool) -> None:
        if rec.lazy is not None:
            self._record_params(rec, rec.lazy)
        grad_out = self._record_outputs(rec, out)
        if rec.kind == "api" and not _has_tensor(rec.args) and not _has_tensor(rec.outputs):
            rec.kind = None  # no tensor in or out: not a node (dropped at flush)
        if grad_out and grad_on and self.backward:
            for key, t, idx in grad_out:
                self._watch_grad(t, rec, "input", key, idx)

    def _watch_grad(self, t: torch.Tensor, rec: _Rec, side: str, key: str, idx: int | None = None) -> None:
        """Record ``t``'s gradient as ``rec``'s backward input ("input": ``t`` is an output of ``rec``) or output
        ("output": ``t`` is an input). One hook per tensor serves every call that produced or used it. ``idx``:
        ``t``'s statistics row when the caller has it."""
        if idx is None:
            idx = self._stat(t)
        targets = self._grad_targets.get(idx)
        if targets is None:
            targets = self._grad_targets[idx] = []
            self._hook_grad(t, targets)
        targets.append((rec, side, key))

    def _hook_grad(self, t: torch.Tensor, targets: list) -> None:
        # a Python hook (not a C++ one: torch's CppFunctionTensorPreHook stops compiled autograd, nyi)
        _add_grad_hook(t, self._grad_hook(targets))

    def _grad_hook(self, targets: list):
        def hook(grad):
            if self._recording and grad is not None and not self._busy:
                self._record_grads(targets, grad)
            return None

        return hook

    def _backward_rec(self, rec: _Rec) -> _Rec:
        b = rec.backward
        if b is None or b not in self._recs:
            if rec.kind == "module":
                name = f"{rec.base}.backward.{rec.call_index}"
            else:
                name = f"{rec.base}.{rec.call_index}.backward"
            b = _Rec(name, rec.kind, "backward", rec.call_index, len(self._recs), rec.module_path, rec.api,
                     rec.class_name, None, rec.base)  # fmt: skip
            b.source = rec.source
            b.autocast = rec.autocast
            if rec.parent is not None:
                b.parent = rec.parent.replace(".forward", ".backward") if ".forward." in rec.parent else None
            rec.backward = b
            self._recs.append(b)
        return b

    def _record_grads(self, targets: list, grad: torch.Tensor) -> None:
        self._busy = True
        try:
            with _quiet(_autocast_devices()):
                meta, idx = _meta(grad), self._stat(grad)
                for rec, side, key in targets:
                    b = self._backward_rec(rec)
                    (b.args if side == "input" else b.outputs).append((key, meta, idx))
        finally:
            self._busy = False

    def _param_grad_hook(self, path: str, cls: str, pname: str):
        base = f"Module.{path}.{cls}" if path else f"Module.{cls}"

        def hook(grad):
            if not self._recording or grad is None:
                return None
            self._busy = True
            try:
                with _quiet(_autocast_devices()):
                    b = None
                    for r in reversed(self._recs):
                        if r.base == base and r.direction == "backward":
                            b = r
                            break
                    if b is None:
                        n = self._counts.get(base, 1) - 1
                        b = _Rec(f"{base}.backward.{max(n, 0)}", "module", "backward", max(n, 0), len(self._recs),
                                 path, None, cls, None, base)  # fmt: skip
                        self._recs.append(b)
                    b.grads[pname] = (_meta(grad), self._stat(grad))
            finally:
                self._busy = False
            return None

        return hook

    def _opt_pre(self, optimizer, args, kwargs):
        self._in_optimizer += 1

    def _opt_post(self, optimizer, args, kwargs):
        self._in_optimizer = max(0, self._in_optimizer - 1)
        if self.step_on_optimizer and self._in_optimizer == 0 and self._started:
            self.step()

    # -- flush ---------------------------------------------------------------------------------------------------

    def _flush(self) -> None:
        recs = [r for r in self._recs if r.kind is not None]
        if not recs:
            self._reset_step()
            return
        if self._over:
            need, n = self._bytes, self._n_tensors
            step = self.step_index
            self._reset_step()
            self.error = DumpTooLarge(
                f"{self.root}: the tensor dump of step {step} needs {_mb(need)} for {n} tensors, more than "
                f"max_bytes={_mb(self.max_bytes)}; nothing was written for this step. Raise the limit "
                f"(dump(..., max_bytes=...), ascendify dump --max-bytes), narrow it with scope=/steps=, or use "
                f"mode='stats'"
            )
            raise self.error
        from ascendify.precision import msprobe_io

        try:
            folder = msprobe_io.write_step(self, recs, self._table)  # its rows, read where they are
        except (DumpTooLarge, msprobe_io.DumpWriteError) as e:  # a full disk too: exit 4 (dump_runner), not 1
            self.error = e
            raise
        finally:
            self._reset_step()
        self.written.append(folder)
        self.written_info.append({"folder": folder, "step": self.step_index, "rank": self._rank, "nodes": len(recs)})



def _memory_key(t: torch.Tensor, ver: int | None) -> tuple | None:
    """The memory a tensor covers: (data pointer, dtype, footprint). A view or transpose of it has the same key, a
    slice or a broadcast from the same address another. None for an empty tensor, another layout, one without a
    version counter, or a wrapper subclass (data pointer 0)."""
    if ver is None:
        return None
    try:
        n = t.numel()
        if not n or t.layout is not _STRIDED:
            return None
        ptr = t.data_ptr()
        if not ptr:
            return None
        return (ptr, t.dtype, n if t.is_contiguous() else _footprint(t))
    except Exception:
        return None


_STRIDED = torch.strided


def _footprint(t: torch.Tensor) -> int | tuple[tuple[int, int], ...]:
    """The memory elements ``t`` reads from its data pointer, independent of dimension order: the number of elements
    for a contiguous tensor, else its (size, stride) runs in memory order with contiguous neighbours merged (as the
    statistics kernel walks them). Two tensors from the same address with the same footprint hold the same
    elements: ``view``, ``transpose``, ``permute`` keep it; a slice, a broadcast or another stride change it."""
    if t.is_contiguous():
        return t.numel()
    dims = sorted(
        ((sz, st) for sz, st in zip(t.shape, t.stride(), strict=True) if sz != 1),
        key=lambda d: (-d[1] if d[1] else -math.inf, -d[0]),
    )
    runs: list[tuple[int, int]] = []
    for sz, st in dims:
        if runs and runs[-1][1] == st * sz:
            runs[-1] = (runs[-1][0] * sz, st)
        else:
            runs.append((sz, st))
    if len(runs) == 1 and runs[0][1] == 1:
        return runs[0][0]  # dense in another dimension order (a transpose): as its contiguous base
    return tuple(runs)


_NAMED_MODULES = torch.nn.Module.named_modules


def _named_modules(root: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``list(root.named_modules())`` (pre-order, each module once, at its first path) in one loop, not a generator
    per module (most of a dump's start on a model of many modules); a model with a class of its own
    ``named_modules`` gets that."""
    out: list[tuple[str, torch.nn.Module]] = []
    seen: set[int] = set()
    todo: list[tuple[str, torch.nn.Module]] = [("", root)]
    while todo:
        prefix, m = todo.pop()
        if type(m).named_modules is not _NAMED_MODULES:
            return list(root.named_modules())
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append((prefix, m))
        children = [(f"{prefix}.{n}" if prefix else n, c) for n, c in m._modules.items() if c is not None]
        todo.extend(reversed(children))
    return out


def _hook_module(m: torch.nn.Module, pre, post) -> Any:
    """``m.register_forward_pre_hook(pre, with_kwargs=True)`` and ``m.register_forward_hook(post, with_kwargs=True,
    always_call=True)`` without their two ``RemovableHandle`` objects (and the three weak references each makes:
    most of a dump's start on a model of many modules, paid by every `with dump(...)`). The
    dictionaries and ids are torch's own (ids drawn from ``RemovableHandle``'s counter, so none is shared); a module
    without them gets the two handles. Returns what :func:`_unhook_module` takes."""
    try:
        pre_hooks, pre_kw = m._forward_pre_hooks, m._forward_pre_hooks_with_kwargs
        hooks, kw, always = m._forward_hooks, m._forward_hooks_with_kwargs, m._forward_hooks_always_called
    except AttributeError:
        return [m.register_forward_pre_hook(pre, with_kwargs=True),
                m.register_forward_hook(post, with_kwargs=True, always_call=True)]  # fmt: skip
    i = _RemovableHandle.next_id
    _RemovableHandle.next_id = i + 2
    pre_hooks[i] = pre
    pre_kw[i] = True
    hooks[i + 1] = post
    kw[i + 1] = True
    always[i + 1] = True
    return (m, i)


def _unhook_module(h: Any) -> None:
    if isinstance(h, list):
        for handle in h:
            handle.remove()
        return
    m, i = h
    for d, key in ((m._forward_pre_hooks, i), (m._forward_pre_hooks_with_kwargs, i), (m._forward_hooks, i + 1),
                   (m._forward_hooks_with_kwargs, i + 1), (m._forward_hooks_always_called, i + 1)):  # fmt: skip
        d.pop(key, None)


_RemovableHandle = torch.utils.hooks.RemovableHandle
_hook_keys = itertools.count(-1, -1)  # torch's own hook handles count up from 0


def _add_grad_hook(t: torch.Tensor, hook) -> Any:
    """``t.register_hook(hook)`` without the removable handle it builds (most of its cost: a non-leaf's hook is never
    removed, it goes with the tensor). The steps are ``Tensor.register_hook``'s own; a tensor subclass, or a torch
    without them, gets ``register_hook``. Returns what :func:`_remove_grad_hook` takes."""
    if type(t) in _PLAIN_TENSORS:
        try:
            hooks = t._backward_hooks
            if hooks is None:
                hooks = OrderedDict()
                t._backward_hooks = hooks
                if t.grad_fn is not None:
                    t.grad_fn._register_hook_dict(t)
            key = next(_hook_keys)
            hooks[key] = hook
            return (hooks, key)
        except AttributeError:
            pass
    return t.register_hook(hook)


def _remove_grad_hook(handle) -> None:
    if isinstance(handle, tuple):
        handle[0].pop(handle[1], None)
    else:
        handle.remove()


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _has_tensor(items: list) -> bool:
    for it in items:
        if it[2] is not None:  # a tensor's statistics row (None: a ScalarArg)
            return True
    return False


def _flatten(v, prefix: str, out: list) -> None:
    if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        for i, x in enumerate(v):
            _flatten(x, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out.append((prefix or "0", v))


def _md5(t: torch.Tensor) -> str:
    import hashlib

    x = t.detach().to("cpu").contiguous().reshape(-1)
    try:
        data = x.view(torch.uint8).numpy().tobytes()
    except Exception:
        data = x.to(torch.float64).numpy().tobytes()
    return hashlib.md5(data).hexdigest()


def _mb(n: int) -> str:
    if n < 2**20:
        return f"{n / 2**10:.1f} KiB"
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


_line_tables: dict[Any, tuple[list[int], list[int | None]]] = {}  # code -> (instruction offsets, their lines)
_source_texts: dict[tuple, tuple[str | None, str | None]] = {}  # (code, offset) -> source_text


def _line_at(code, lasti: int) -> int | None:
    """The line of the instruction at byte offset ``lasti`` of ``code``: what ``frame.f_lineno`` gives for a frame
    whose ``f_lasti`` it is (both read the code's line table)."""
    table = _line_tables.get(code)
    if table is None:
        starts: list[int] = []
        lines: list[int | None] = []
        for start, _end, line in code.co_lines():
            starts.append(start)
            lines.append(line)
        if len(_line_tables) > 4096:
            _line_tables.clear()
        table = _line_tables[code] = (starts, lines)
    i = bisect.bisect_right(table[0], lasti) - 1
    return table[1][i] if i >= 0 else None


def source_text(src: tuple[str, int, str] | None) -> tuple[str | None, str | None]:
    """("file:line", msprobe stack line) of a recorded source location."""
    if src is None:
        return None, None
    file, line, func = src
    code = linecache.getline(file, line).strip()
    return f"{_display(file)}:{line}", f"File {file}, line {line}, in {func}, \n {code}"


def check_disk(root: Path, nbytes: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if nbytes > free:
        raise DumpTooLarge(f"{root}: the tensor dump needs {_mb(nbytes)} but only {_mb(free)} is free")


# ---------------------------------------------------------------------------------------------------------------

_current: Dumper | None = None


def dump(
    model: torch.nn.Module | None,
    path: str | os.PathLike[str] = "dump",
    *,
    level: str = "mix",
    mode: str = "stats",
    steps: Iterable[int] | None = None,
    ranks: Iterable[int] | None = None,
    scope: Iterable[str] | str | None = None,
    backward: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Dumper:
    """A :class:`Dumper` to use as a context manager (or ``.start()`` / ``.step()`` / ``.stop()``).

    ``model=None`` hooks every module (global hooks). ``level``: "module" | "api" | "mix"; ``mode``: "stats" |
    "tensors" | "checksum"; ``steps``/``ranks``: which to record (None: all); ``scope``: module paths / API names;
    ``max_bytes``: tensor mode refuses a step needing more (``DumpTooLarge``).
    """
    global _current
    d = Dumper(model, path, level=level, mode=mode, steps=steps, ranks=ranks, scope=scope, backward=backward,
               max_bytes=max_bytes)  # fmt: skip
    _current = d
    return d


def step() -> None:
    """End the current step of the active dump (``ascendify dump`` or the latest ``dump(...)``); no-op without.

    Once a program calls this, optimizer steps no longer end steps (the program says where they end)."""
    if _current is not None:
        if _current.explicit_steps_win:
            _current.step_on_optimizer = False
        _current.step()


def active() -> Dumper | None:
    """The dump ``step()`` acts on, or None."""
    return _current


def set_active(d: Dumper | None) -> None:
    global _current
    _current = d
