"""Autocast for the emulated ``npu`` device, with torch_npu's op lists.

``torch.autocast("npu")`` flips the ``AutocastPrivateUse1`` dispatch key on. torch_npu registers C++ kernels
on that key; the emulator registers Python kernels that apply the same five cast policies to the same ops,
plus a fallthrough fallback so every other op passes straight to the backend:

- ``lower_precision_fp``: cast floating ``npu`` inputs to the autocast dtype (fp16 by default, or bf16);
- ``fp32``: cast floating ``npu`` inputs to float32;
- ``fp32_set_opt_dtype``: if the first argument is eligible, fill an unset ``dtype=`` argument with float32;
- ``fp32_append_dtype``: ``norm`` overloads without ``dtype`` are redispatched to their ``dtype`` overload;
- ``promote``: cast all floating ``npu`` inputs to the widest floating type among them.

"Eligible" is PyTorch's rule: a defined floating-point tensor on the autocast device that is not float64.
CPU tensors and float64 tensors pass untouched. Lower-precision casts of float32 leaf weights that require grad
are cached until the outermost autocast region exits, as PyTorch's C++ autocast does.

Where the lists come from (:data:`PROVENANCE`): the NPU lists are torch_npu 2.13.0's ``AutocastPrivateUse1``
registrations (``AutoCastOps.cpp``) as compiled into the wheel's ``libtorch_npu.so``, read by
``tools/build_kb.py --wheel`` into ``data/npu_kernels.json`` (104 ops; the same as that source file's lists less
the named-tensor ``Dimname`` overloads, which torch 2.13 no longer has); the CPU lists (kept only to report the
differences) are PyTorch 2.13's ``AutocastCPU`` registrations in ``aten/src/ATen/autocast_mode.cpp``, checked
against the live dispatcher by the tests. On a machine with torch_npu, ``dispatcher_ops()`` gives the installed
release's own list to compare with.

How the NPU lists differ from the CPU's (see :func:`differences_from_cpu` for the full table):

- NPU runs ~35 ops in lower precision, CPU 24: only NPU lowers ``addmv``, ``addr``, ``mv``, ``einsum``,
  ``chain_matmul``, ``linalg_multi_dot``, the RNN cells, ``convolution``/``_convolution``, flash attention;
  only CPU lowers ``linalg_vecdot``, ``_addmm_activation``, the ``conv*d.padding`` overloads,
  ``mkldnn_rnn_layer`` and ``_native_multi_head_attention``.
- NPU forces float32 for pointwise transcendental ops (``exp``, ``log*``, ``pow``, ``rsqrt``, ``acos``, ...),
  ``softplus``, the norms (``layer_norm``, ``group_norm``, ``norm``), ``softmax``/``log_softmax``,
  ``sum``/``cumsum``/``cumprod`` (via ``dtype=``) and ``logsumexp``; CPU autocast leaves all of those in the
  input dtype. CPU forces float32 for linear algebra, FFTs, ``stft``, 3-D pooling and padding, which NPU
  autocast leaves alone.
- NPU promotes ``addcdiv``, ``addcmul``, ``atan2``, ``bilinear``, ``cross``, ``dot``, ``grid_sampler``,
  ``index_put``, ``tensordot``, ``scatter_add``; CPU promotes ``cat``, ``stack``, ``index_copy`` and runs
  ``grid_sampler`` in float32.
- ``binary_cross_entropy`` is banned (raises) under NPU autocast, as under CUDA; CPU runs it in float32.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from ascendify.emulator.ops import table
from ascendify.emulator.ops.autocast_lists import (  # noqa: F401 - re-exported: the lists' public home was here
    CPU_FP32,
    CPU_LOWER_PRECISION_FP,
    CPU_PROMOTE,
    DEVICE,
    NPU_BANNED,
    NPU_FP32,
    NPU_FP32_APPEND_DTYPE,
    NPU_FP32_SET_OPT_DTYPE,
    NPU_LOWER_PRECISION_FP,
    NPU_PROMOTE,
    PROVENANCE,
    Rule,
    cpu_rules,
    differences_from_cpu,
    npu_rules,
    policy_table,
)

DISPATCH_KEY = "AutocastPrivateUse1"

def op_exists(op: str) -> bool:
    """True when ``aten::op`` (``name`` or ``name.overload``) exists in the running torch."""
    return _resolve(op) is not None


def dispatcher_ops(key: str = DISPATCH_KEY) -> set[str]:
    """The aten ops with a kernel on dispatch ``key`` in this process, as "name" or "name.overload".

    Under emulation this is the emulator's registration; in a process with a real torch_npu it is torch_npu's
    own list, the way to check :data:`NPU_LOWER_PRECISION_FP` and friends against a new release.
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {
        n.removeprefix("aten::")
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::") and has(n, key)
    }


def _resolve(op: str):
    name, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    try:
        return getattr(packet, overload or "default")
    except AttributeError:
        return None


# --- the cast machinery ---------------------------------------------------------------------------------------

_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

# id(source) -> (weakref to source, casted); cleared when the outermost autocast region exits
_cast_cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}


def _eligible(t) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.device.type == DEVICE
        and t.is_floating_point()
        and t.dtype is not torch.float64
    )


def _cast(t, dtype: torch.dtype, lower: torch.dtype):
    """PyTorch's ``cached_cast``: cast an eligible tensor, caching fp32 leaf weights cast to ``lower``."""
    if isinstance(t, (list, tuple)):
        return type(t)(_cast(x, dtype, lower) for x in t)
    if not _eligible(t) or t.dtype is dtype:
        return t
    cacheable = (
        dtype is lower
        and t.dtype is torch.float32
        and t.requires_grad
        and t.is_leaf
        and not t._is_view()
        and torch.is_autocast_cache_enabled()
        and not torch._C._is_cached_tensor(t)
    )
    if not cacheable:
        return t.to(dtype)
    hit = _cast_cache.get(id(t))
    if hit is not None and hit[0]() is t:
        return hit[1]
    casted = t.to(dtype)
    _cast_cache[id(t)] = (weakref.ref(t), casted)
    return casted


def clear_cache() -> None:
    """Drop cached weight casts (done automatically when the outermost autocast region exits)."""
    _cast_cache.clear()


def _promote_type(lower: torch.dtype, values) -> torch.dtype:
    """PyTorch's ``promote_type``: float32 wins over the lower precision type; float64 is ignored."""
    current = lower
    for v in values:
        for t in v if isinstance(v, (list, tuple)) else (v,):
            if not _eligible(t):
                continue
            if current is torch.float32 or t.dtype is torch.float32:
                current = torch.float32
            elif t.dtype is not lower:  # e.g. float16 next to bfloat16 autocast, as PyTorch's prioritize()
                raise RuntimeError(f"Unexpected floating ScalarType {t.dtype} in autocast promote")
    return current


def _first_eligible(args) -> bool:
    return bool(args) and _eligible(args[0])


def _make_kernel(op, policy: str, target=None) -> Callable:
    """The Python kernel for one overload under one policy (``target``: redispatch overload)."""
    schema_args = op._schema.arguments
    # ``ScalarType?`` arguments (the JIT schema shows ScalarType as int; in these ops it is always ``dtype``)
    opt_dtype_args = [
        (i, a.name, a.kwarg_only)
        for i, a in enumerate(schema_args)
        if a.name == "dtype" and isinstance(a.type, torch.OptionalType)
    ]

    def lower_precision_fp(*args, **kwargs):
        lower = torch.get_autocast_dtype(DEVICE)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            args = [_cast(a, lower, lower) for a in args]
            kwargs = {k: _cast(v, lower, lower) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    def fp32(*args, **kwargs):
        lower = torch.get_autocast_dtype(DEVICE)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            args = [_cast(a, torch.float32, lower) for a in args]
            kwargs = {k: _cast(v, torch.float32, lower) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    def fp32_set_opt_dtype(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if not _first_eligible(args):
                return op(*args, **kwargs)
            args = list(args)
            for i, name, kwarg_only in opt_dtype_args:
                if not kwarg_only and i < len(args):
                    if args[i] is None:
                        args[i] = torch.float32
                elif kwargs.get(name) is None:
                    kwargs[name] = torch.float32
            return op(*args, **kwargs)

    def fp32_append_dtype(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if not _first_eligible(args):
                return op(*args, **kwargs)
            return target(*args, **kwargs, dtype=torch.float32)

    def promote(*args, **kwargs):
        lower = torch.get_autocast_dtype(DEVICE)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            dtype = _promote_type(lower, list(args) + list(kwargs.values()))
            args = [_cast(a, dtype, lower) for a in args]
            kwargs = {k: _cast(v, dtype, lower) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    def banned(*args, **kwargs):
        raise RuntimeError(
            "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
            "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
            "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
            "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
            "safe to autocast."
        )

    return locals()[policy]


# --- installation ---------------------------------------------------------------------------------------------

_libraries: list = []
_registered: dict[str, str] = {}
_original_clear_autocast_cache = None


def _clear_autocast_cache_and_ours():
    _original_clear_autocast_cache()
    clear_cache()


def install() -> dict[str, str]:
    """Register the ``npu`` autocast kernels and the fallthrough fallback. Idempotent.

    Returns ``{op: policy}`` for what was registered (overloads absent from this torch are skipped).
    Call after PrivateUse1 has been renamed to ``npu`` (the core's ``enable()`` does this).
    """
    global _original_clear_autocast_cache
    if _libraries:
        return dict(_registered)
    fallback_lib = torch.library.Library("_", "IMPL")
    fallback_lib.fallback(torch.library.fallthrough_kernel, DISPATCH_KEY)
    lib = torch.library.Library("aten", "IMPL")
    registered = {}
    for name, pol in table.autocast_entries():
        op = _resolve(name)
        if op is None:
            continue
        target = None
        if pol.autocast == "fp32_append_dtype":
            target = _resolve(pol.autocast_target)
            if target is None:
                continue
        lib.impl(name, _make_kernel(op, pol.autocast, target), DISPATCH_KEY)
        registered[name] = pol.autocast
    _libraries.extend([fallback_lib, lib])
    _registered.update(registered)
    if _original_clear_autocast_cache is None:
        # torch.autocast.__exit__ calls torch.clear_autocast_cache() when the outermost region exits
        from ascendify.emulator import runtime

        _original_clear_autocast_cache = torch.clear_autocast_cache
        runtime.patches.set(torch, "clear_autocast_cache", _clear_autocast_cache_and_ours)
    return dict(registered)


def is_installed() -> bool:
    return bool(_libraries)


def registered_ops() -> dict[str, str]:
    """``{op: policy}`` currently registered on the ``AutocastPrivateUse1`` key by :func:`install`."""
    return dict(_registered)


def _main(argv=None) -> int:
    """``python -m ascendify.emulator.ops.autocast [--json]``: the NPU table and how it differs from the CPU's."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="torch_npu's autocast op lists, and where they differ from the CPU's")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    diff = differences_from_cpu()
    if args.json:
        print(json.dumps({"provenance": PROVENANCE, "npu": policy_table("npu"), "cpu": policy_table("cpu"),
                          "differences": {op: {"npu": n, "cpu": c} for op, (n, c) in diff.items()}}, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"autocast: npu (torch_npu) vs cpu (PyTorch), {len(diff)} ops differ")
    for col in ("op", "npu policy", "cpu policy", "in this torch"):
        table.add_column(col)
    for op, (n, c) in diff.items():
        table.add_row(op, n or "-", c or "-", "yes" if op_exists(op) else "no")
    Console().print(table)
    for device, source in PROVENANCE.items():
        print(f"{device}: {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
