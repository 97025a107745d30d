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

Where the lists come from (:data:`PROVENANCE`): the NPU lists are torch_npu's
``torch_npu/csrc/aten/AutoCastOps.cpp``; the CPU lists (kept only to report the differences) are PyTorch
2.13's ``AutocastCPU`` registrations in ``aten/src/ATen/autocast_mode.cpp``, checked against the live
dispatcher by the tests. Overloads that do not exist in the running torch (named-tensor ``Dimname``
variants were dropped) are listed but not registered. The NPU lists were read from the newest stored version
of that file, not from a torch_npu 2.13 wheel (the lists are compiled in): on a machine with torch_npu,
``dispatcher_ops()`` gives the installed release's own list to compare with.

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
from dataclasses import dataclass

import torch

DEVICE = "npu"
DISPATCH_KEY = "AutocastPrivateUse1"

PROVENANCE = {
    "npu": (
        "torch_npu (Ascend/pytorch) torch_npu/csrc/aten/AutoCastOps.cpp, "
        "TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1) at commit cfb19ef5eca56613ced4a8b2d8a8c3576b570c22"
    ),
    "cpu": (
        "PyTorch 2.13 aten/src/ATen/autocast_mode.cpp, TORCH_LIBRARY_IMPL(aten, AutocastCPU); "
        "the op set is checked against the running dispatcher by tests/emulator/test_autocast.py"
    ),
}

# --- torch_npu's lists (op names as "name" for the default overload or "name.overload") ---------------------

NPU_LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "cudnn_convolution",
    "cudnn_convolution_transpose", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)

NPU_FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
)

NPU_FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname", "log_softmax.int",
    "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum", "cumsum.dimname", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)

# registered overload -> overload it is redispatched to, with dtype=float32 appended
NPU_FP32_APPEND_DTYPE = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}

NPU_PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "tensordot",
    "scatter_add",
)

NPU_BANNED = ("binary_cross_entropy",)

# --- PyTorch 2.13's CPU lists, to report differences ----------------------------------------------------------

CPU_LOWER_PRECISION_FP = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding", "bmm", "mm",
    "linalg_vecdot", "baddbmm", "addmm", "_addmm_activation", "addbmm", "linear", "_convolution.deprecated",
    "matmul", "conv_tbc", "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "prelu", "scaled_dot_product_attention", "_native_multi_head_attention",
)

CPU_FP32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "prod.dim_int", "quantile",
    "quantile.scalar", "nanquantile", "nanquantile.scalar", "stft", "stft.center", "cdist", "grid_sampler_2d",
    "_grid_sampler_2d_cpu_fallback", "grid_sampler_3d", "trace", "view_as_complex", "cholesky",
    "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d",
    "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d", "reflection_pad2d",
    "replication_pad1d", "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss",
    "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "ctc_loss.IntList", "ctc_loss.Tensor", "kl_div",
    "multilabel_margin_loss", "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft", "fft_fft2",
    "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn",
    "fft_irfftn", "fft_hfft", "fft_ihfft", "linalg_cond", "linalg_cond.p_str", "linalg_matrix_rank",
    "linalg_matrix_rank.tol_tensor", "linalg_matrix_rank.atol_rtol_tensor",
    "linalg_matrix_rank.atol_rtol_float", "linalg_solve", "linalg_cholesky", "linalg_svdvals",
    "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product", "linalg_tensorinv",
    "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info", "qr", "svd",
    "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d", "adaptive_max_pool3d",
    "multilabel_margin_loss_forward", "linalg_qr", "linalg_cholesky_ex", "linalg_svd", "linalg_eig",
    "linalg_eigh", "linalg_lstsq", "linalg_inv_ex",
)

CPU_PROMOTE = ("stack", "cat", "index_copy")


@dataclass(frozen=True)
class Rule:
    """One registered op: ``op`` ("name" or "name.overload") and its cast ``policy``."""

    op: str
    policy: str


def npu_rules() -> list[Rule]:
    """torch_npu's autocast table as data, in registration order (absent overloads included)."""
    rules = [Rule(op, "lower_precision_fp") for op in NPU_LOWER_PRECISION_FP]
    rules += [Rule(op, "fp32") for op in NPU_FP32]
    rules += [Rule(op, "fp32_set_opt_dtype") for op in NPU_FP32_SET_OPT_DTYPE]
    rules += [Rule(op, "fp32_append_dtype") for op in NPU_FP32_APPEND_DTYPE]
    rules += [Rule(op, "promote") for op in NPU_PROMOTE]
    rules += [Rule(op, "banned") for op in NPU_BANNED]
    return rules


def cpu_rules() -> list[Rule]:
    """PyTorch 2.13's CPU autocast table (for comparison only; the emulator never registers it)."""
    rules = [Rule(op, "lower_precision_fp") for op in CPU_LOWER_PRECISION_FP]
    rules += [Rule(op, "fp32") for op in CPU_FP32]
    rules += [Rule(op, "promote") for op in CPU_PROMOTE]
    return rules


def policy_table(device: str = DEVICE) -> dict[str, str]:
    """``{op: policy}`` for ``"npu"`` (torch_npu's lists) or ``"cpu"`` (PyTorch's)."""
    rules = npu_rules() if device == DEVICE else cpu_rules() if device == "cpu" else None
    if rules is None:
        raise ValueError(f"no autocast table for device {device!r}: use 'npu' or 'cpu'")
    return {r.op: r.policy for r in rules}


def differences_from_cpu() -> dict[str, tuple[str | None, str | None]]:
    """``{op: (npu_policy, cpu_policy)}`` for every op whose policy differs (``None``: not listed there).

    Example: ``differences_from_cpu()["exp"] == ("fp32", None)``; ``["cat"] == (None, "promote")``.
    """
    npu, cpu = policy_table("npu"), policy_table("cpu")
    return {op: (npu.get(op), cpu.get(op)) for op in sorted(set(npu) | set(cpu)) if npu.get(op) != cpu.get(op)}


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
    for rule in npu_rules():
        op = _resolve(rule.op)
        if op is None:
            continue
        target = None
        if rule.policy == "fp32_append_dtype":
            target = _resolve(NPU_FP32_APPEND_DTYPE[rule.op])
            if target is None:
                continue
        lib.impl(rule.op, _make_kernel(op, rule.policy, target), DISPATCH_KEY)
        registered[rule.op] = rule.policy
    _libraries.extend([fallback_lib, lib])
    _registered.update(registered)
    if _original_clear_autocast_cache is None:
        # torch.autocast.__exit__ calls torch.clear_autocast_cache() when the outermost region exits
        _original_clear_autocast_cache = torch.clear_autocast_cache
        torch.clear_autocast_cache = _clear_autocast_cache_and_ours
    return dict(registered)


def is_installed() -> bool:
    return bool(_libraries)


def registered_ops() -> dict[str, str]:
    """``{op: policy}`` currently registered on the ``AutocastPrivateUse1`` key by :func:`install`."""
    return dict(_registered)


def _main(argv=None) -> int:
    """``python -m ascendify.emulator.autocast [--json]``: the NPU table and how it differs from the CPU's."""
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
