"""HCCL's rules for the emulated ``hccl`` backend, from ``ascendify/data/hccl_rules.json`` (one row per rule).

The rows say which collectives take which dtypes, which ``ReduceOp`` HCCL refuses (per dtype), what
``all_to_all`` splits must look like, how many ranks one server holds, per chip series and CANN version; each
has its source. The emulated chip is the ``device_name`` setting (``Ascend910B3``: an Atlas A2), the CANN
version the ``cann_version`` setting (``ASCENDIFY_EMULATE_CANN``).

A violation follows the ``fidelity`` setting, as the op checks do: ``error`` raises
:class:`~ascendify.emulator.errors.NpuFidelityError` (a ``RuntimeError``) with the message the NPU gives
(torch_npu's check, or HCCL's error code), counted under ``rejected``; ``warn`` counts it under
``hccl_rule_violations`` in the report and warns once per rule, and the collective runs.

>>> chip_series("Ascend910B3"), chip_series("Ascend910_9391"), chip_series("Ascend910ProB")
('A2', 'A3', 'A1')
>>> cann_key("8.0.RC1") < cann_key("8.0.0") < cann_key("9.1.0")
True
"""

from __future__ import annotations

import functools
import re

import torch

from ascendify.core import knowledge
from ascendify.emulator import runtime
from ascendify.emulator.errors import NpuFidelityError

_settings = runtime.settings
_rec = runtime.recorder

# torch dtype -> (rule name, torch_npu's name of the HCCL type in its messages)
_DTYPES = {
    torch.int8: ("int8", "at::kChar"), torch.int16: ("int16", "at::kShort"), torch.int32: ("int32", "at::kInt"),
    torch.int64: ("int64", "at::kLong"), torch.float16: ("float16", "at::kHalf"),
    torch.float32: ("float32", "at::kFloat"), torch.bfloat16: ("bfloat16", "at::kBFloat16"),
    torch.float64: ("float64", "at::kDouble"), torch.uint8: ("uint8", "at::kByte/at::kBool"),
    torch.bool: ("bool", "at::kByte/at::kBool"), torch.uint16: ("uint16", "at::ScalarType::UInt16"),
    torch.uint32: ("uint32", "at::ScalarType::UInt32"), torch.uint64: ("uint64", "at::ScalarType::UInt64"),
}
# emulator op name -> (torch_npu's ProcessGroupHCCL function, HCCL API suffix)
_FUNCTIONS = {
    "all_reduce": ("allreduce", "AllReduce"), "all_reduce_coalesced": ("allreduce_coalesced", "AllReduce"),
    "reduce": ("reduce", "Reduce"), "reduce_scatter": ("reduce_scatter", "ReduceScatter"),
    "reduce_scatter_tensor": ("_reduce_scatter_base", "ReduceScatter"),
}


def chip_series(device_name: str) -> str:
    """The chip series of the rule table (``A1`` training series, ``A2``, ``A3``, ``A5``) for a SoC name."""
    from ascendify.emulator.settings import chip_family

    family = chip_family(device_name)
    return family if family in ("A1", "A2", "A3", "A5") else "other"


def cann_key(version: str) -> tuple:
    """A sortable key: ``8.0.RC1`` < ``8.0.RC2`` < ``8.0.0`` < ``8.0.1`` < ``8.1.RC1``."""
    parts = version.strip().upper().replace("-", ".").split(".")
    major = int(parts[0]) if parts and parts[0].isdigit() else 0
    minor = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    third = parts[2] if len(parts) > 2 else "0"
    m = re.fullmatch(r"RC(\d+)", third)
    if m:
        return (major, minor, 0, int(m.group(1)))
    return (major, minor, 1, int(third) if third.isdigit() else 0)


def cann_matches(spec: str, version: str) -> bool:
    """``spec``: ``*``, ``>=X``, ``<X`` (or several, comma-separated, all of which must hold)."""
    for part in (p.strip() for p in spec.split(",")):
        if part in ("", "*"):
            continue
        m = re.fullmatch(r"(>=|<=|<|>|==)\s*(\S+)", part)
        if not m:
            raise ValueError(f"bad CANN range {spec!r} in hccl_rules.json")
        a, b = cann_key(version), cann_key(m.group(2))
        ok = {">=": a >= b, "<=": a <= b, "<": a < b, ">": a > b, "==": a == b}[m.group(1)]
        if not ok:
            return False
    return True


@functools.cache
def _table() -> list[dict]:
    return knowledge.load("hccl_rules")["rules"]


@functools.cache
def _active(chip: str, cann: str) -> tuple[dict, ...]:
    return tuple(
        r for r in _table()
        if ("*" in r["chips"] or chip in r["chips"]) and cann_matches(r.get("cann", "*"), cann)
    )


def active_rules() -> tuple[dict, ...]:
    """The rules for the emulated chip and CANN version (settings ``device_name``, ``cann_version``)."""
    return _active(chip_series(_settings.device_name), _settings.cann_version)


_CALL_KINDS = ("collective", "dtype", "reduce_op", "reduce_op_dtype", "contiguous", "alltoall")


@functools.cache
def _for_op(device_name: str, cann: str, op: str) -> tuple[dict, ...]:
    """The rules that check a call of ``op`` (cached: one lookup per collective on the hot path)."""
    return tuple(r for r in _active(chip_series(device_name), cann)
                 if r["kind"] in _CALL_KINDS and _applies(r, op))


def _violation(rule: dict, message: str) -> None:
    code = rule.get("code")
    full = message + (f"\n{code}" if code else "")
    note = (f" [emulator: HCCL rule '{rule['id']}' for {chip_series(_settings.device_name)}, CANN "
            f"{_settings.cann_version}; source: {rule['source'].split(' ')[0].rstrip(';')}]")
    if _settings.fidelity == "error":
        _rec.rejected["hccl:" + rule["id"]] += 1
        raise NpuFidelityError(full + note)
    _rec.hccl_rules[rule["id"]] += 1
    from ascendify.emulator.ops.fidelity import warn_once

    warn_once("hccl:" + rule["id"], "On a real NPU: " + message + note)


def _fmt(rule: dict, op: str, dtype=None, reduce_op: str | None = None, **extra) -> str:
    function, hccl_op = _FUNCTIONS.get(op, (op, op))
    hccl_dtype = _DTYPES.get(dtype, (str(dtype), str(dtype)))[1] if dtype is not None else ""
    return rule["message"].format(function=function, hccl_op=hccl_op, hccl_dtype=hccl_dtype,
                                  reduce_op=reduce_op or "", **extra)


def _applies(rule: dict, op: str) -> bool:
    cols = rule.get("collectives", ())
    return "*" in cols or op in cols


def check_collective(op: str, tensors, reduce_op: str | None = None, split_sizes: bool | None = None,
                     group_size: int = 1) -> None:
    """Check one collective (``op``: the emulator's name, ``all_reduce``...) on ``tensors`` (npu tensors)."""
    if not tensors:
        return
    for rule in _for_op(_settings.device_name, _settings.cann_version, op):
        kind = rule["kind"]
        if kind == "collective":
            _violation(rule, _fmt(rule, op))
        elif kind == "dtype":
            for t in tensors:
                name = _DTYPES.get(t.dtype, (str(t.dtype).removeprefix("torch."),))[0]
                if name not in rule["allowed"] and name not in rule.get("cast_first", ()):
                    _violation(rule, _fmt(rule, op, t.dtype))
                    break
        elif kind == "reduce_op":
            if reduce_op in rule["refused_ops"]:
                _violation(rule, _fmt(rule, op, reduce_op=reduce_op))
        elif kind == "reduce_op_dtype":
            if reduce_op != rule["reduce_op"]:
                continue
            for t in tensors:
                name = _DTYPES.get(t.dtype, (str(t.dtype),))[0]
                bad = name in rule.get("refused_dtypes", ()) or (
                    "allowed" in rule and name not in rule["allowed"])
                if bad:
                    _violation(rule, _fmt(rule, op, t.dtype, reduce_op=reduce_op))
                    break
        elif kind == "contiguous":
            if any(not t.is_contiguous() for t in tensors):
                _violation(rule, _fmt(rule, op))
        elif kind == "alltoall":
            t = tensors[0]
            if t.dim() == 0:
                _violation(rule, "Scalar tensors (0-dim tensors) are not supported in alltoall. Please reshape "
                                 "tensors to at least 1-D before calling alltoall.")
            elif not split_sizes and any(x.dim() and x.size(0) % group_size for x in tensors):
                _violation(rule, _fmt(rule, op))


def check_gather() -> None:
    """``dist.gather`` on npu: torch_npu runs it as an all_gather and warns (on the destination rank)."""
    for rule in active_rules():
        if rule["kind"] == "collective_note" and _applies(rule, "gather"):
            _rec.hccl_rules[rule["id"]] += 1
            from ascendify.emulator.ops.fidelity import warn_once

            warn_once("hccl:" + rule["id"], rule["message"])


def check_ranks_per_node(local_world_size: int) -> None:
    """At group creation: ``LOCAL_WORLD_SIZE`` ranks on this server against the chip's devices per server."""
    for rule in active_rules():
        if rule["kind"] != "devices_per_node":
            continue
        allowed = rule.get("allowed_counts")
        if (allowed and local_world_size not in allowed) or local_world_size > rule.get("max", 1 << 30):
            _violation(rule, rule["message"].format(count=local_world_size))


def non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """ATen's ``is_non_overlapping_and_dense``: the elements fill one block of memory in some dimension order.

    >>> x = torch.empty(2, 3, 4)
    >>> [non_overlapping_and_dense(v) for v in (x, x.permute(2, 0, 1), x[:, 1:], x.expand(2, 2, 3, 4)[0])]
    [True, True, False, True]
    """
    if t.is_contiguous():
        return True
    dims = sorted(range(t.dim()), key=lambda d: (t.stride(d), t.size(d)), reverse=True)
    return t.permute(dims).is_contiguous()


def _dense(t) -> bool:
    """torch_npu's ``is_contiguous(suggest_memory_format())``: contiguous, or channels-last contiguous."""
    return t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or (
        t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d))


# the argument checks of torch_npu's ProcessGroupHCCL (rows of kind "argument"): True when the call passes
_ARGUMENT_CHECKS = {
    "same_dtype": lambda a: a["output"].dtype == a["input"].dtype,
    "output_is_size_times_input": lambda a: a["output"].numel() == a["input"].numel() * a["size"],
    "input_is_size_times_output": lambda a: a["input"].numel() == a["output"].numel() * a["size"],
    "contiguous": lambda a: _dense(a["output"]) and _dense(a["input"]),
    "input_contiguous": lambda a: _dense(a["input"]),
    "list_is_group_size": lambda a: len(a["outputs"]) == a["size"],
    "list_same_dtype": lambda a: len({t.dtype for t in a.get("outputs", a.get("inputs", ()))}) <= 1,
    "list_dense": lambda a: all(non_overlapping_and_dense(t) for t in a.get("outputs", a.get("inputs", ()))),
}


@functools.cache
def _argument_rules(op: str) -> tuple[dict, ...]:
    return tuple(r for r in _table() if r["kind"] == "argument" and _applies(r, op))


def check_arguments(op: str, **args) -> None:
    """torch_npu's argument checks of one collective (``op``: ``all_gather_into_tensor``, ``reduce_scatter_tensor``,
    ``all_gather``, ``reduce_scatter``), whatever the fidelity setting: a call that fails one cannot run, on an
    NPU as here. ``args``: ``output``/``input`` (single tensors), ``outputs``/``inputs`` (lists), ``size`` (the
    group's). HCCL compares element counts, not shapes: a flat buffer of the right size passes.

    >>> import torch
    >>> check_arguments("all_gather_into_tensor", output=torch.empty(8), input=torch.empty(2, 2), size=2)
    >>> check_arguments("all_gather_into_tensor", output=torch.empty(6), input=torch.empty(2, 2), size=2)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    RuntimeError: output tensor size must be equal to world_size times input tensor size...
    """
    for rule in _argument_rules(op):
        if not _ARGUMENT_CHECKS[rule["check"]](args):
            fn = rule["source"].rsplit("(", 1)[-1].rstrip(")")
            raise RuntimeError(f"{rule['message']}\n{rule['code']} [emulator: torch_npu's check '{rule['id']}'; "
                               f"ProcessGroupHCCL.cpp: {fn}]")
