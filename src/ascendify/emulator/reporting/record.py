"""What happened under emulation: ops run, ops a real NPU would run on its CPU fallback or reject, float64 and
fp16-overflow events, unsupported APIs. :func:`ascendify.emulator.report` turns it into a plain dict.

On the hot path each op counts into its own record (the kernels' per-op ``OpInfo``, an attribute increment:
no hashing); other calls count into ``ops``, keyed by the op object or a name. Both are named only when
reported.
"""

from __future__ import annotations

from collections import Counter


class Recorder:
    def __init__(self) -> None:
        self.infos: list = []  # per-op records with ``.name`` and ``.calls`` (counted in place)
        self.external: list = []  # (counts() -> {op name: calls}, reset()) of kernels counting elsewhere (C++)
        self.reset()

    def reset(self) -> None:
        """Clear every counter in place (the kernels hold references to them)."""
        for info in self.infos:
            info.calls = 0
        for _, reset in self.external:
            reset()
        if hasattr(self, "ops"):
            for c in (self.ops, self.no_npu_kernel, self.rejected, self.unsupported_apis, self.float64,
                      self.fp16_overflow, self.hccl_rules, self.warned, self.graph_ops, self.fused):
                c.clear()
            self.compiled_graphs = 0
            return
        self.ops: Counter = Counter()  # op object (or name) -> calls
        self.no_npu_kernel: Counter = Counter()  # "lgamma" -> calls: CPU fallback on a real NPU
        # raised because a setting is "error": "lgamma" / "torch.nn.X" (fidelity), "float64:op", "fp16_overflow:op"
        self.rejected: Counter = Counter()
        self.unsupported_apis: Counter = Counter()  # "torch.nn.functional.pdist" -> calls
        self.float64: Counter = Counter()  # op name -> events
        self.fp16_overflow: Counter = Counter()  # op name -> events
        self.hccl_rules: Counter = Counter()  # hccl_rules.json rule id -> violations (fidelity "warn")
        self.warned: set[str] = set()
        self.compiled_graphs = 0  # graphs torch.compile compiled for npu (emulator.compile)
        self.graph_ops: Counter = Counter()  # ATen op -> occurrences in those graphs (counted at compile)
        # torch_npu fused operator -> calls (ascendify.emulator.fused; the ATen ops it ran count in ``ops`` too)
        self.fused: Counter = Counter()

    def op_counts(self) -> dict[str, int]:
        named: Counter = Counter()
        for info in self.infos:
            if info.calls:
                named[info.name] += info.calls
        for op, n in self.ops.items():
            named[op_name(op)] += n
        for counts, _ in self.external:
            for name, n in counts().items():
                named[name] += n
        return dict(named.most_common())


def op_name(op) -> str:
    """``aten.add.Tensor`` -> ``add.Tensor``; ``aten.relu.default`` -> ``relu``; strings pass through."""
    if isinstance(op, str):
        return op
    schema = getattr(op, "_schema", None)
    if schema is None:
        return str(op)
    name = schema.name.split("::", 1)[-1]
    return f"{name}.{schema.overload_name}" if schema.overload_name else name
