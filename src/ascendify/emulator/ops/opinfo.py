"""What the kernels know about one op overload: its schema facts, computed once, joined with its policy
from :mod:`ascendify.emulator.ops.table`; and the overload lookup for numbers
where a schema has ``Tensor`` (shared by every kernel).

Schema facts are what the op *is* (view / writes an argument / functional, where written outputs come from,
which positions hold tensors, whether it draws random numbers); the policy is what the emulator *decides*
about it (see the table). :func:`info` caches one :class:`OpInfo` per overload.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ascendify.emulator import runtime
from ascendify.emulator.ops import table
from ascendify.emulator.reporting.record import op_name


class OpInfo:
    """What the kernels need to know about one op overload, computed once."""

    __slots__ = ("op", "call", "name", "kind", "write_src", "out_names", "gen_kw", "flagged", "allow_cpu",
                 "has_tensor_lists", "fast", "policy", "tensor_pos", "tensor_kw", "single_tensor", "calls", "swap_rng")

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
        self.policy = pol = table.policy(self.name)
        self.flagged = pol.no_npu_kernel
        self.allow_cpu = pol.cpu_args_ok
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


_INFO: dict = {}


def info(op) -> OpInfo:
    i = _INFO.get(op)
    if i is None:
        i = _INFO[op] = OpInfo(op)
    return i


# --------------------------------------------------------------------------------------------------------
# a number where the schema has a Tensor


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
