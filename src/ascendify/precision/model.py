"""The precision data model: what a dump holds, shared by ``dump`` and ``compare`` (torch-free, JSON-serialisable).

A *dump* is one step of one rank: the nodes (module calls and torch API calls, forward and backward) in the order
they ran, each with statistics of its inputs, outputs, parameters and gradients. Our dumps and msprobe's dumps load
into the same objects (``load_dump``), so compare never needs to know who wrote a dump.

On disk (msprobe's layout, which ``msprobe compare`` reads)::

    ROOT/step{N}/rank{R}/dump.json        nodes: {"task", "level", "framework", "dump_data_dir", "data": {name: entry}}
                         stack.json       source call stacks
                         construct.json   node name -> parent module node name
                         dump_tensor_data/  tensor mode: one array per tensor

Single-process programs may write ``rank`` instead of ``rank0`` (msprobe does this too); both load.

The fingerprint (``TensorStats.fingerprint``)
---------------------------------------------
Statistics (max/min/mean/L2 norm) miss two kinds of defects: a permutation inside a tensor leaves them all equal,
and cosine-based comparison ignores scale. The fingerprint catches both, computed on the device without a host
synchronisation (``precision.stats.fingerprint``):

* take the tensor's elements in logical (row-major) order, ``x_0 .. x_{n-1}``, as float32;
* pick ``k = min(n, FINGERPRINT_SAMPLES)`` positions ``p_i``: all of them when ``n <= 4096``, else
  ``p_i = floor(n * (h(i, 7) + 1) / 2)``;
* ``fingerprint_j = sum_i W[i, j] * x[p_i] / sqrt(k)`` for ``j = 0..7``, with ``W[i, j] = h(i, 101 + j)``;

where ``h(i, salt)`` in [-1, 1) is a fixed integer hash of the position (``stats.hash_uniform``: the same on every
machine and device, no RNG). Each component is a position-weighted sum, so it is linear in the tensor (a scale of
1.02 changes every component by 2%) and changes when elements move to other positions (a permutation). Like a
random projection, the relative error of the fingerprint vector, ``|fa - fb| / |fa|``, estimates the relative L2
error of the tensor (over the sampled positions, for large tensors), so compare treats it as a short vector and
applies the dtype's relative tolerance. Fingerprints of tensors with different numbers of elements are not
comparable.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FINGERPRINT_LEN = 8
FINGERPRINT_SAMPLES = 4096

LEVELS = ("module", "api", "mix")
MODES = ("stats", "tensors", "checksum")
DIRECTIONS = ("forward", "backward")


class DumpError(ValueError):
    """A dump that cannot be read: ``path`` names the file or folder, ``what`` says what is wrong."""

    def __init__(self, path: str | Path, what: str):
        self.path = str(path)
        self.what = what
        super().__init__(f"{self.path}: {what}")


def _num(v: Any) -> float | None:
    """A JSON-safe float (NaN/Inf kept as floats; None stays None)."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


@dataclass
class TensorStats:
    """One tensor's summary.

    ``key`` says where the tensor sat in the call: ``"0"``, ``"1.0"`` (second positional argument, first element of
    a list/tuple) or a keyword name (``"weight"``); for outputs ``"0"``, ``"0.1"``... ``max``/``min``/``mean``/``norm``
    are None for empty or non-numeric tensors (bool max/min are 0/1).
    """

    dtype: str
    shape: tuple[int, ...]
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None
    nan_count: int = 0
    inf_count: int = 0
    fingerprint: tuple[float, ...] = ()
    data_ref: str | None = None
    md5: str | None = None
    key: str | None = None
    requires_grad: bool | None = None
    device: str | None = None

    kind = "tensor"

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def is_float(self) -> bool:
        return any(t in self.dtype for t in ("float", "bfloat", "half", "complex"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = "tensor"
        d["shape"] = list(self.shape)
        d["fingerprint"] = list(self.fingerprint)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorStats:
        return cls(
            dtype=str(d.get("dtype")),
            shape=tuple(int(s) for s in d.get("shape") or ()),
            max=_num(d.get("max")),
            min=_num(d.get("min")),
            mean=_num(d.get("mean")),
            norm=_num(d.get("norm")),
            nan_count=int(d.get("nan_count") or 0),
            inf_count=int(d.get("inf_count") or 0),
            fingerprint=tuple(float(x) for x in d.get("fingerprint") or ()),
            data_ref=d.get("data_ref"),
            md5=d.get("md5"),
            key=d.get("key"),
            requires_grad=d.get("requires_grad"),
            device=d.get("device"),
        )


@dataclass
class ScalarArg:
    """A non-tensor argument (int, float, bool, str, None, torch.dtype, torch.device, slice, ...).

    ``type`` is the Python type name (``"int"``, ``"float"``, ``"torch.dtype"``...); ``value`` is JSON-safe (dtypes,
    devices and slices as their ``str``).
    """

    type: str
    value: Any = None
    key: str | None = None

    kind = "scalar"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "scalar", "type": self.type, "value": self.value, "key": self.key}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScalarArg:
        return cls(type=str(d.get("type")), value=d.get("value"), key=d.get("key"))


def value_from_dict(d: dict[str, Any]) -> TensorStats | ScalarArg:
    return ScalarArg.from_dict(d) if d.get("kind") == "scalar" else TensorStats.from_dict(d)


@dataclass
class Node:
    """One call: a module's forward/backward or one torch API call.

    ``name`` is msprobe's full name (``Module.layers.0.mlp.Linear.forward.0``, ``Functional.gelu.3.forward``);
    ``module_path`` the dotted path as in ``named_modules()`` (for api nodes: the innermost enclosing module; None
    outside any module; ``""`` is the root module); ``call_index`` counts calls of the same module/api within the
    step (msprobe's number); ``order`` is the execution order in the step (0, 1, ...). For backward nodes ``inputs``
    are the gradients flowing in (grad of outputs) and ``outputs`` the gradients flowing out (grad of inputs);
    ``grads`` holds parameter gradients by parameter name.
    """

    name: str
    kind: str  # "module" | "api"
    direction: str  # "forward" | "backward"
    call_index: int = 0
    order: int = 0
    module_path: str | None = None
    api: str | None = None
    class_name: str | None = None
    parent: str | None = None
    inputs: list[TensorStats | ScalarArg] = field(default_factory=list)
    outputs: list[TensorStats] = field(default_factory=list)
    params: dict[str, TensorStats] = field(default_factory=dict)
    grads: dict[str, TensorStats] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    autocast: str | None = None

    @property
    def tensor_inputs(self) -> list[TensorStats]:
        return [x for x in self.inputs if isinstance(x, TensorStats)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "direction": self.direction,
            "call_index": self.call_index,
            "order": self.order,
            "module_path": self.module_path,
            "api": self.api,
            "class_name": self.class_name,
            "parent": self.parent,
            "inputs": [x.to_dict() for x in self.inputs],
            "outputs": [x.to_dict() for x in self.outputs],
            "params": {k: v.to_dict() for k, v in self.params.items()},
            "grads": {k: v.to_dict() for k, v in self.grads.items()},
            "scalars": self.scalars,
            "source": self.source,
            "autocast": self.autocast,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Node:
        return cls(
            name=d["name"],
            kind=d.get("kind", "api"),
            direction=d.get("direction", "forward"),
            call_index=int(d.get("call_index") or 0),
            order=int(d.get("order") or 0),
            module_path=d.get("module_path"),
            api=d.get("api"),
            class_name=d.get("class_name"),
            parent=d.get("parent"),
            inputs=[value_from_dict(x) for x in d.get("inputs") or []],
            outputs=[TensorStats.from_dict(x) for x in d.get("outputs") or []],
            params={k: TensorStats.from_dict(v) for k, v in (d.get("params") or {}).items()},
            grads={k: TensorStats.from_dict(v) for k, v in (d.get("grads") or {}).items()},
            scalars=dict(d.get("scalars") or {}),
            source=d.get("source"),
            autocast=d.get("autocast"),
        )


@dataclass
class Dump:
    """One step of one rank. ``root`` is the folder holding ``dump.json`` (tensor ``data_ref`` paths are relative
    to it); ``framework`` is "ascendify" or "msprobe"; ``level`` one of ``LEVELS``; ``mode`` one of ``MODES``."""

    root: str
    step: int
    rank: int
    framework: str
    level: str
    mode: str
    nodes: list[Node] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def forward(self) -> list[Node]:
        return [n for n in self.nodes if n.direction == "forward"]

    def backward(self) -> list[Node]:
        return [n for n in self.nodes if n.direction == "backward"]

    def load_tensor(self, stats: TensorStats):
        """The saved array of a tensor-mode dump (numpy, ``allow_pickle=False``); None when not saved."""
        return load_tensor(self.root, stats)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "step": self.step,
            "rank": self.rank,
            "framework": self.framework,
            "level": self.level,
            "mode": self.mode,
            "meta": self.meta,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Dump:
        return cls(
            root=d["root"],
            step=int(d["step"]),
            rank=int(d["rank"]),
            framework=d.get("framework", "ascendify"),
            level=d.get("level", "mix"),
            mode=d.get("mode", "stats"),
            nodes=[Node.from_dict(n) for n in d.get("nodes") or []],
            meta=dict(d.get("meta") or {}),
        )


def load_tensor(root: str | os.PathLike[str], stats: TensorStats):
    """The saved array of ``stats`` (numpy; bfloat16 as float32), or None when the dump holds no data for it."""
    if not stats.data_ref:
        return None
    path = Path(root) / stats.data_ref
    if not path.is_file():
        raise DumpError(path, "tensor file missing")
    if path.suffix == ".npy":
        import numpy as np

        try:
            return np.load(path, allow_pickle=False)
        except ValueError as e:
            raise DumpError(path, f"not a plain array file: {e}") from None
    import torch

    try:
        t = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise DumpError(path, f"not a plain tensor file (loaded with weights_only=True): {e}") from None
    if not isinstance(t, torch.Tensor):
        raise DumpError(path, f"holds a {type(t).__name__}, not a tensor")
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.detach().numpy()
