"""THE per-op table: every decision the emulator takes about one ATen op, in one entry.

Keys are op names as the recorder prints them: ``"name"`` for the default overload, ``"name.overload"``
otherwise (``"copy_"``, ``"index.Tensor"``, ``"pow.Tensor_Scalar"``). An :class:`OpPolicy` says

- ``kernel``: the op's own kernel instead of the generic one (copies across devices, ``empty``, ``resize_``,
  convolution's "overrideable" pair, the fused RNN cells, SDPA); ``direct``: registered on ``PrivateUse1``
  itself rather than reached through the boxed fallback (the hottest of them); ``keys``: further dispatch
  keys its kernel is registered for (SDPA also on ``AutogradPrivateUse1``); ``cxx_as``: the CPU op the C++
  kernels (:mod:`.cfast`) may run for it on CPU aliases instead of its own kernel (convolution's pair, whose
  own kernels do just that in Python);
- ``cpu_args_ok``: CPU tensors may sit next to ``npu`` ones (indexing with a CPU index, as on CUDA);
- ``no_npu_kernel``: torch_npu has no NPU kernel for it (on hardware: CPU fallback with a warning, or an error
  under ``TORCH_NPU_FALLBACK_CPU_DISABLE=1``); the fidelity checks report or reject it;
- ``autocast`` / ``autocast_target``: torch_npu's cast policy under ``torch.autocast("npu")`` (and for
  ``fp32_append_dtype`` the overload it is redispatched to);
- ``fast_path``: whether the specialised kernels of :mod:`.fastpath` may take it (they still need the
  right schema shape: see :class:`~ascendify.emulator.ops.opinfo.OpInfo`).

Nothing else in the emulator hard-codes an op name: the kernels ask :func:`policy`, the registration asks
:func:`direct_entries`, autocast asks :func:`autocast_entries`. The data behind ``no_npu_kernel`` and
``autocast`` lives in package data / :mod:`.autocast_lists` and is merged here once, on first use.

>>> policy("copy_").direct, policy("index.Tensor").cpu_args_ok, policy("mm").autocast
(True, True, 'lower_precision_fp')
>>> policy("an_op_nobody_knows") == DEFAULT
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from ascendify.core import knowledge
from ascendify.emulator.ops import attention, autocast_lists, fused_rnn, special


@dataclasses.dataclass(frozen=True, slots=True)
class OpPolicy:
    """What the emulator does with one op (see the module docstring for each field)."""

    kernel: Callable | None = None
    direct: bool = False
    keys: tuple[str, ...] = ()
    cpu_args_ok: bool = False
    no_npu_kernel: bool = False
    autocast: str | None = None
    autocast_target: str | None = None
    fast_path: bool = True
    cxx_as: str | None = None


DEFAULT = OpPolicy()

_aten = torch.ops.aten

# the hand-written part: kernels and CPU-argument exceptions (facts about PyTorch's dispatch, not data)
_ENTRIES: dict[str, OpPolicy] = {
    "empty.memory_format": OpPolicy(kernel=special.empty, direct=True),
    "empty_strided": OpPolicy(kernel=special.empty_strided, direct=True),
    "copy_": OpPolicy(kernel=special.copy_, direct=True),
    "_copy_from": OpPolicy(kernel=special.copy_from),
    "_copy_from_and_resize": OpPolicy(kernel=special.copy_from_and_resize),
    "_to_copy": OpPolicy(kernel=special.to_copy, direct=True),
    "resize_": OpPolicy(kernel=special.resize_, direct=True),
    "set_": OpPolicy(kernel=special.set_empty),
    "set_.source_Storage": OpPolicy(kernel=special.redispatch_cpu(_aten.set_.source_Storage)),
    "set_.source_Storage_storage_offset": OpPolicy(
        kernel=special.redispatch_cpu(_aten.set_.source_Storage_storage_offset)),
    "set_.source_Tensor": OpPolicy(kernel=special.redispatch_cpu(_aten.set_.source_Tensor)),
    "set_.source_Tensor_storage_offset": OpPolicy(
        kernel=special.redispatch_cpu(_aten.set_.source_Tensor_storage_offset)),
    "record_stream": OpPolicy(kernel=special.record_stream),
    "_has_compatible_shallow_copy_type": OpPolicy(kernel=special.has_compatible_shallow_copy_type, direct=True),
    "_efficientzerotensor": OpPolicy(kernel=special.efficientzerotensor),
    "convolution_overrideable": OpPolicy(kernel=special.conv_overrideable, direct=True, cxx_as="convolution"),
    "convolution_backward_overrideable": OpPolicy(kernel=special.conv_backward_overrideable, direct=True,
                                                  cxx_as="convolution_backward"),
    # PyTorch picks SDPA's implementation per device type; follow the CPU's choice (see attention.py)
    "scaled_dot_product_attention": OpPolicy(kernel=attention.sdpa, direct=True, keys=("AutogradPrivateUse1",)),
    # ops that legitimately take CPU tensors next to device tensors (as on CUDA)
    **{name: OpPolicy(cpu_args_ok=True, fast_path=False) for name in (
        "index.Tensor", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index.Tensor",
        "_unsafe_index_put", "index.Tensor_out", "index_put.out", "_index_put_impl.out", "equal")},
    # the fused RNN cells PyTorch calls on accelerators (no CPU kernel exists)
    "_thnn_fused_lstm_cell": OpPolicy(kernel=fused_rnn.lstm_cell),
    "_thnn_fused_lstm_cell_backward_impl": OpPolicy(kernel=fused_rnn.lstm_cell_backward_impl),
    "_thnn_fused_gru_cell": OpPolicy(kernel=fused_rnn.gru_cell),
    "_thnn_fused_gru_cell_backward": OpPolicy(kernel=fused_rnn.gru_cell_backward),
}

_table: dict[str, OpPolicy] = {}


def _build() -> dict[str, OpPolicy]:
    t = dict(_ENTRIES)
    for name in knowledge.overloads_without_npu_kernel():
        t[name] = dataclasses.replace(t.get(name, DEFAULT), no_npu_kernel=True, fast_path=False)
    for rule in autocast_lists.npu_rules():
        target = autocast_lists.NPU_FP32_APPEND_DTYPE.get(rule.op) if rule.policy == "fp32_append_dtype" else None
        t[rule.op] = dataclasses.replace(t.get(rule.op, DEFAULT), autocast=rule.policy, autocast_target=target)
    return t


def table() -> dict[str, OpPolicy]:
    """Every op with a decision that differs from :data:`DEFAULT` (built once)."""
    if not _table:
        _table.update(_build())
    return _table


def policy(name: str) -> OpPolicy:
    """The policy of op ``name`` (``"add.Tensor"``, ``"relu"``); :data:`DEFAULT` for an op with none."""
    return (_table or table()).get(name, DEFAULT)


def direct_entries() -> list[tuple[str, OpPolicy]]:
    """The ops whose own kernel is registered directly on ``PrivateUse1`` (and on ``keys``)."""
    return [(name, p) for name, p in table().items() if p.direct and p.kernel is not None]


def autocast_entries() -> list[tuple[str, OpPolicy]]:
    """The ops with an autocast policy, in torch_npu's registration order."""
    return [(name, p) for name, p in table().items() if p.autocast is not None]


def no_npu_kernel() -> frozenset[str]:
    """The ops with no NPU kernel in torch_npu."""
    return frozenset(name for name, p in table().items() if p.no_npu_kernel)


# NPU graphs (api/npu/graphs.py): ops a capture refuses because they synchronise the host with the device
# (a result read back, or a shape that depends on the data), and the copies that do so when they go to the CPU
GRAPH_DATA_DEPENDENT = frozenset({
    "nonzero", "nonzero_static", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
    "unique_consecutive", "repeat_interleave", "_local_scalar_dense", "is_nonzero", "equal",
    "nonzero_numpy", "argwhere",
})
GRAPH_DEVICE_COPIES = frozenset({"_to_copy", "copy_", "to"})
