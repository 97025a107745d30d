"""What one watched run of ``ascendify port`` found: the typed contract between the observer that writes it (in the
run's process, :mod:`ascendify.port.observe`) and every reader (the train stage, the lockstep and bench jobs).

It is stored as ``runs/SIDE/observe.json`` (``observe.rankN.json`` on rank N > 0), schema ``ascendify.observe/1``:
:meth:`Observation.to_dict` writes it, :meth:`Observation.load` reads it back (a field an older file lacks takes
its default). JSON keys are the field names, except ``class`` (``cls`` here) and ``random_draws_on_device``.

>>> o = Observation(iterations=[Iteration(step=0, seconds=0.5, losses=[2.0, 1.0]),
...                             Iteration(step=1, seconds=0.25, losses=[1.5, 0.9])])
>>> o.history()
{'step': [0, 1], 'step_time_ms': [500.0, 250.0], 'loss': [2.0, 1.5], 'loss_2': [1.0, 0.9]}
>>> Observation.from_dict(o.to_dict()) == o
True
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "ascendify.observe/1"
_KEYS = {"cls": "class", "random_draws": "random_draws_on_device"}  # field -> JSON key where they differ


def is_factory(selector: str | None) -> bool:
    """``FILE.py:FACTORY(...)`` (build the model), as against the name or class of a discovered model.

    >>> is_factory("models.py:GPT(n_layers=2)"), is_factory("netG"), is_factory(None)
    (True, False, False)
    """
    from ascendify.workloads import factory

    return factory.is_spec(selector)


class _Record:
    """JSON in and out for the dataclasses below: nested records and lists of them by their annotations."""

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, _Record):
                v = v.to_dict()
            elif isinstance(v, list) and v and isinstance(v[0], _Record):
                v = [x.to_dict() for x in v]
            out[_KEYS.get(f.name, f.name)] = v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None):
        data = data or {}
        kwargs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            key = _KEYS.get(f.name, f.name)
            if key not in data:
                continue
            v, kind = data[key], _NESTED.get((cls.__name__, f.name))
            if kind is not None and v is not None:
                v = [kind.from_dict(x) for x in v] if isinstance(v, list) else kind.from_dict(v)
            kwargs[f.name] = v
        return cls(**kwargs)


@dataclass
class TensorSeen(_Record):
    shape: list[int] = field(default_factory=list)
    dtype: str = ""


@dataclass
class Autocast(_Record):
    enabled: bool = False
    device_type: str | None = None
    dtype: str | None = None


@dataclass
class FirstCall(_Record):
    """A model's first call: its inputs, the batch size, the autocast policy then in force."""

    t: float = 0.0
    device: str = "cpu"
    training: bool = False
    grad_enabled: bool = True
    inputs: list[TensorSeen] = field(default_factory=list)
    batch_size: int | None = None
    autocast: Autocast = field(default_factory=Autocast)
    param_dtype: str | None = None


@dataclass
class Output(_Record):
    output_mean: float = 0.0
    output_abs_mean: float = 0.0


@dataclass
class ModelSeen(_Record):
    """A root module with parameters (a model), as the program called it."""

    index: int = 0
    cls: str = ""
    qualname: str = ""
    name: str | None = None  # the name the calling code holds it under (netG, self.model)
    defined_at: str | None = None
    trained: bool = False
    params: int = 0
    trainable: int = 0
    calls_seen: int = 0
    optimizers: list[int] = field(default_factory=list)  # indexes of the optimizers over its parameters
    first_call: FirstCall | None = None
    outputs: list[Output] = field(default_factory=list)  # per root call (the curve of an inference program)
    file: str | None = None  # model-K.pkl beside observe.json (rank 0)
    batch_file: str | None = None  # batch-K.pt
    snapshot_note: str | None = None  # why it was not copied
    wrapper: str | None = None  # DistributedDataParallel, DataParallel, OptimizedModule

    @property
    def label(self) -> str:
        return self.name or self.cls


@dataclass
class OptimizerSeen(_Record):
    cls: str = ""
    steps: int = 0
    params: int = 0
    lr: float | None = None
    index: int = 0


@dataclass
class Iteration(_Record):
    """One training step: an optimizer step of the first optimizer (all of them, a GAN's), or a ``backward()``
    where the program updates its parameters by hand. A loss that went inf/NaN is a string ('NaN')."""

    step: int = 0
    t: float = 0.0
    seconds: float = 0.0
    losses: list[float | str] = field(default_factory=list)
    by: str = "optimizer"


@dataclass
class LossSeries(_Record):
    """Which optimizer's (and so which model's) loss a history column is: ``backward`` of ``of`` before it."""

    series: str = "loss"
    optimizer: str = ""
    optimizer_index: int | None = None
    models: list[str] = field(default_factory=list)
    backward: int = 1
    of: int = 1


@dataclass
class RandomDraw(_Record):
    api: str = ""
    device: str = ""
    calls: int = 0
    first_at: str | None = None


@dataclass
class Observation(_Record):
    schema: str = SCHEMA
    rank: int = 0
    seed: int = 0
    steps_asked: int | None = None
    seconds_asked: float | None = None
    stopped: str = "ended"  # "N steps done", "time budget of S s spent...", "interrupted", "error", "ended"
    exit_code: int | None = None
    error: str | None = None
    wall_seconds: float = 0.0
    first_model_call_at: float | None = None
    step_unit: str | None = None  # "optimizer step", "backward", or None (no training)
    backwards: int = 0
    optimizers_built: list[str] = field(default_factory=list)
    training: bool = False  # built an optimizer or called backward(): a training program, steps made or not
    loss_fn: str | None = None
    grad_scaler: bool = False
    iterations: list[Iteration] = field(default_factory=list)
    models: list[ModelSeen] = field(default_factory=list)
    functions: dict[str, int] = field(default_factory=dict)  # root modules without parameters: class -> calls
    optimizers: list[OptimizerSeen] = field(default_factory=list)
    loss_series: list[LossSeries] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    random_draws: list[RandomDraw] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> Observation | None:
        """The observation in ``path``, or None when it is missing or not an observation."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return cls.from_dict(data) if isinstance(data, dict) else None

    def main_model(self) -> ModelSeen | None:
        """The model the program trains: the one whose parameters the first optimizer holds, else the largest.

        >>> Observation(optimizers=[OptimizerSeen()], models=[ModelSeen(index=0, params=5),
        ...                                                   ModelSeen(index=1, params=3, optimizers=[0])]
        ...             ).main_model().index
        1
        """
        if not self.models:
            return None
        for opt in range(len(self.optimizers) or 1):
            owned = [m for m in self.models if opt in m.optimizers]
            if owned:
                return max(owned, key=lambda m: m.params or 0)
        return max(self.models, key=lambda m: m.params or 0)

    def select_model(self, selector: str | None) -> ModelSeen | None:
        """The discovered model ``selector`` names (the name the code holds it under, its class, or its qualified
        class name), else the main model when ``selector`` is empty; None when nothing matches.

        >>> o = Observation(models=[ModelSeen(index=0, name="netG", cls="Generator", qualname="m.Generator"),
        ...                         ModelSeen(index=1, name="netD", cls="Discriminator", qualname="m.D")])
        >>> o.select_model("netD").index, o.select_model("Generator").index, o.select_model("x")
        (1, 0, None)
        """
        if not selector or is_factory(selector):
            return self.main_model()
        return next((m for m in self.models if selector in (m.name, m.cls, m.qualname)), None)

    def history(self) -> dict[str, list]:
        """The per-step history as columns: ``step``, ``loss`` (the first ``backward()`` of each step; ``loss_2``...
        for the next ones, a GAN's generator loss), ``step_time_ms``. A run without steps that is no training
        program (an inference script) gives the main model's output mean per call as ``output_mean`` instead."""
        its = self.iterations
        cols: dict[str, list] = {"step": [], "step_time_ms": []}
        width = max((len(it.losses) for it in its), default=0)
        for k in range(width):
            cols["loss" if k == 0 else f"loss_{k + 1}"] = []
        for it in its:
            losses = list(it.losses)
            if len(losses) != width:  # a step with another number of backwards: keep the columns aligned
                losses = (losses + [float("nan")] * width)[:width]
            cols["step"].append(it.step)
            cols["step_time_ms"].append(round(1000.0 * float(it.seconds or 0.0), 3))
            for k, v in enumerate(losses):
                cols["loss" if k == 0 else f"loss_{k + 1}"].append(v)
        if not its and not self.training:  # a training program stopped before its first step has none
            m = self.main_model()
            if m is not None and m.outputs:
                return {"step": list(range(len(m.outputs))), "output_mean": [o.output_mean for o in m.outputs],
                        "output_abs_mean": [o.output_abs_mean for o in m.outputs]}
        return cols

    def step_time(self) -> float | None:
        """Median seconds per step, the first (warm-up, compilation, discovery) left out when there are more."""
        secs = sorted(float(it.seconds or 0.0) for it in self.iterations[1:] or self.iterations)
        if not secs:
            return None
        mid = len(secs) // 2
        return secs[mid] if len(secs) % 2 else 0.5 * (secs[mid - 1] + secs[mid])

    def model_rows(self) -> list[dict[str, Any]]:
        """One row per discovered model: name, class, where defined, parameters, optimizers, batch, AMP."""
        rows = []
        for m in self.models:
            fc = m.first_call or FirstCall()
            ac = fc.autocast
            rows.append({
                "model": m.label,
                "class": m.cls + (f" (in {m.wrapper})" if m.wrapper else ""),
                "defined at": m.defined_at,
                "params": m.params,
                "trainable": m.trainable,
                "optimizer": ", ".join(self.optimizers[i].cls for i in m.optimizers if i < len(self.optimizers))
                or ("none (frozen or by hand)" if self.iterations else "none"),
                "batch": fc.batch_size,
                "inputs": ", ".join("x".join(str(d) for d in t.shape) + f" {t.dtype}" for t in fc.inputs),
                "AMP": f"{ac.dtype} autocast on {ac.device_type}" if ac.enabled else "off (fp32)",
                "mode": "train" if m.trained else (
                    ("train" if fc.training else "eval") + ("" if fc.grad_enabled else ", no grad")),
            })
        return rows


# nested records by (owner, field): what from_dict builds from a dict (or each dict of a list)
_NESTED: dict[tuple[str, str], type[_Record]] = {
    ("FirstCall", "inputs"): TensorSeen, ("FirstCall", "autocast"): Autocast,
    ("ModelSeen", "first_call"): FirstCall, ("ModelSeen", "outputs"): Output,
    ("Observation", "iterations"): Iteration, ("Observation", "models"): ModelSeen,
    ("Observation", "optimizers"): OptimizerSeen, ("Observation", "loss_series"): LossSeries,
    ("Observation", "random_draws"): RandomDraw,
}
