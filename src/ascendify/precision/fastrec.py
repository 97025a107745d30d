"""The dump's per-tensor path in C++ (``fastrec.cpp``): what the recorder reads of each tensor, in one call.

A statistics dump reads, of every tensor a recorded call takes or returns, its metadata (dtype, shape,
requires_grad, device), its version counter, whether it is a leaf that requires grad, and where its memory lies
(``dumper._memory_key``), then gives the statistics kernel its data pointer, sizes and strides
(``stats.StatTable._fast``). In Python that is some twenty attribute reads and method calls per tensor; right after
a layer ran (its tensors have pushed the interpreter's data out of the caches) they cost several microseconds each
time, the largest part of a dump's cost on a small model (``benchmarks/dump_overhead.py``'s short configuration).
Here each is one call:

* ``probe(t)``: ``(metadata, version or None, leaf that requires grad, memory key or None)``, or None for what it
  leaves to the Python path (a tensor subclass other than ``Parameter``: its ``__torch_function__`` may answer
  differently; an undefined tensor);
* ``fill(t, row, head, plans, privateuse1_is_host, defer_min)``: the statistics kernel on a float32, bfloat16 or
  float16 tensor in host memory whose fingerprint plan is built (``stats._plans``), dense or strided (the samples'
  offsets computed once per layout, as ``stats._offsets``): 1; 2 where the table may defer such a dense tensor
  (``StatTable.add``) and it is large enough; 0 for anything else, which the Python path then handles as before;
* ``item(dumper, t, key, defer)`` and ``inputs(dumper, rec, args, watch)``: ``Dumper._item_graph`` and the
  positional part of ``Dumper._record_inputs`` (the common case of a recorded call: a tensor seen earlier in the
  step, a new one the kernel reads, a view of a summarised tensor's memory, a parameter once per top-level call),
  working on the dumper's own dictionaries and statistics table, with the plain scalar arguments and the
  gradient watches; the less common branches (a deferred row, a row torch computed, another kind of argument, the
  making of a gradient hook) call the dumper's Python methods, so there is one implementation of each;
* ``mode_handler(mode)`` and ``module_hooks(dumper)``: the torch-function mode's ``__torch_function__`` and the
  module pre- and post-hook (``_ApiMode``, ``Dumper._pre_hook``/``_post_hook``, ``_record_params``) for the common
  call (recording, no scope, autocast off, a function named before); the rest calls the Python ones;
* ``entries(specs, rows, Fragment, data)``: a statistics step's forward entries of ``dump.json`` as JSON text
  (``msprobe_io._write_step``), which orjson writes as it is; the nodes it cannot write (a value of another type,
  keys nested deeper than one list) are left to the Python path, which wrote them all before.

Built with :mod:`ascendify.core.cxx` (about 10 s, once per machine and torch version; ``python -m
ascendify.precision.fastrec`` builds it ahead, as ``scripts/setup.sh`` does). Where it cannot be built, or
``ASCENDIFY_DUMP_CRECORD=0``, :func:`functions` returns None and the Python path serves: the same dump, every value
read back the same (numbers may be spelt differently: ``3.2e-05`` where orjson writes ``0.000032``;
``tests/precision/test_fastrec.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ascendify.core.cxx import Extension

ENV = "ASCENDIFY_DUMP_CRECORD"
SOURCE = Path(__file__).with_name("fastrec.cpp")

_EXT = Extension(SOURCE, "ascendify_fastrec", ENV, "the dump's C++ recorder", seconds=15)
_ready = False


def functions(build_if_missing: bool = True):
    """``(probe, fill)`` from the loaded extension, connected to the statistics kernels, or None (then
    :func:`why` says why)."""
    global _ready
    mod = _EXT.module(build_if_missing)
    if mod is None:
        return None
    if not _ready:
        import ctypes

        import torch

        from ascendify.precision import stats_kernel

        lib = stats_kernel.kernel()
        addrs = []
        for name in ("vec_f32", "vec_bf16", "vec_f16"):
            fn = getattr(lib, name, None) if lib is not None else None
            addrs.append(ctypes.cast(fn, ctypes.c_void_p).value or 0 if fn is not None else 0)
        offs = getattr(lib, "offsets", None) if lib is not None else None
        mod.init(tuple(addrs), torch.Tensor, torch.nn.Parameter,
                 ctypes.cast(offs, ctypes.c_void_p).value or 0 if offs is not None else 0)
        _ready = True
    return mod.probe, mod.fill


def recorder():
    """``(item, inputs)``: the recording of a tensor (``Dumper._item_graph``) and of a call's positional inputs
    (``Dumper._record_inputs``) in C++, connected to the statistics table's module, or None. Call after
    :func:`functions` gave the functions."""
    mod = _EXT.module(build_if_missing=False) if _EXT.loaded() else None
    if mod is None or not _ready:
        return None
    from ascendify.precision import stats

    mod.connect(vars(stats), mod.fill, stats._DEFER_MIN, stats._ROW)
    return mod.item, mod.inputs


def mode_handler(py_handler, api_cache, operator_table, operator_forms, copy_ops, split_ops, any_autocast,
                 rec_class, caller, dumper_globals):
    """``mode_handler(mode)``: the dump's torch-function handler in C++ bound to ``mode`` (``_ApiMode``), connected to
    the dumper's tables, or None (an extension without it: CPython before 3.11). Call after :func:`recorder`."""
    mod = _EXT.module(build_if_missing=False) if _EXT.loaded() else None
    if mod is None or not _ready or not hasattr(mod, "mode_handler"):
        return None
    mod.mode_connect(py_handler, api_cache, operator_table, operator_forms, copy_ops, split_ops, sys.modules,
                     any_autocast, rec_class, caller, dumper_globals)
    return mod.mode_handler


def module_hooks():
    """``module_hooks(dumper)``: the dump's module hooks in C++ bound to ``dumper``, ``(pre, post)``, or None. Call
    after :func:`mode_handler` connected it."""
    mod = _EXT.module(build_if_missing=False) if _EXT.loaded() else None
    return getattr(mod, "module_hooks", None) if mod is not None and _ready else None


def entries():
    """The writer of a step's common ``dump.json`` entries (``entries(specs, rows, Fragment, data)``: see the C++
    source) when the extension is loaded (a dump loaded it), else None. Never builds it."""
    mod = _EXT.module(build_if_missing=False) if _EXT.loaded() else None
    return None if mod is None else mod.entries


def why() -> str:
    """Why :func:`functions` gave None ("" when it loaded or was not tried)."""
    return _EXT.why()


def main() -> int:
    """Build (again, after a failure) and load; say which."""
    return _EXT.main()


if __name__ == "__main__":
    sys.exit(main())
