"""Training curves: do two runs' loss / metric histories agree within a tolerance band, and where do they part?

Histories load from (``load_history``):

* JSON: a dict of lists (``ascendify train``'s ``history.json``: ``train_loss``, ``train_acc``, ``val_loss``,
  ``val_acc``, ``lr``, ``epoch_time``, ``throughput``), a list of dicts (one per step), or a list of numbers
  (one loss curve, named ``loss``);
* CSV with a header (one column per series; a ``step``/``epoch`` column, when present, gives the x values);
* TensorBoard event files (a file, or a folder holding ``events.out.tfevents.*``): every scalar tag;
* a training log (any other text file, or any file with ``pattern=``): ``load_log`` reads the common
  ``loss X`` forms (``loss 3.21``, ``loss: 3.21``, ``loss=3.21``, ``'loss': 3.21``, ``val_loss``/``val loss``
  as their own series; the step from ``step N``/``iter N``/``iteration N`` on the same line), or a regex
  whose named groups are the series (``step`` gives the x values; one unnamed group is ``loss``).

``compare_curves(a, b, tolerance=0.05)`` compares each series present in both, step by step: a step is inside the
band when ``|a - b| <= tolerance * max(|a|, |b|) + abs_tolerance``. Series that are timings (``epoch_time``,
``throughput``, anything with ``time``/``throughput``/``samples_per_s`` in the name) differ between devices by
nature and are reported but never fail the comparison. The result names the first step outside the band per
series, and overall.

>>> r = compare_curves({"loss": [2.0, 1.5, 1.2]}, {"loss": [2.0, 1.52, 1.6]}, tolerance=0.05)
>>> r.verdict, r.first["series"], r.first["step"]
('divergence', 'loss', 2)
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMING_WORDS = ("time", "throughput", "samples_per_s", "tokens_per_s", "its_per_s", "speed")
STEP_KEYS = ("step", "steps", "epoch", "iteration", "iter", "global_step")


class CurveError(ValueError):
    """A history that cannot be read: ``path`` and what is wrong."""

    def __init__(self, path: str | Path, what: str):
        self.path = str(path)
        self.what = what
        super().__init__(f"{self.path}: {what}")


@dataclass
class History:
    """Series by name: ``(steps, values)``."""

    source: str
    series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)


def _num(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _from_columns(source: str, cols: dict[str, list[Any]]) -> History:
    step_key = next((k for k in STEP_KEYS if k in cols), None)
    n = max((len(v) for v in cols.values()), default=0)
    steps = [_num(x) for x in cols[step_key]] if step_key else list(range(n))
    h = History(source)
    for name, vals in cols.items():
        if name == step_key:
            continue
        xs, ys = [], []
        for i, v in enumerate(vals):
            y = _num(v)
            if y is None:
                continue
            x = steps[i] if i < len(steps) and steps[i] is not None else i
            xs.append(x)
            ys.append(y)
        if ys:
            h.series[name] = (xs, ys)
    return h


def _load_json(path: Path) -> History:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CurveError(path, f"not a readable JSON history ({e})") from None
    if isinstance(data, dict) and isinstance(data.get("history"), (dict, list)):
        data = data["history"]
    if isinstance(data, dict):
        cols = {k: v for k, v in data.items() if isinstance(v, list)}
        if not cols:
            raise CurveError(path, "a JSON object with no list of values (expected e.g. {\"train_loss\": [...]})")
        return _from_columns(str(path), cols)
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        keys: list[str] = []
        for row in data:
            keys.extend(k for k in row if k not in keys)
        return _from_columns(str(path), {k: [row.get(k) for row in data] for k in keys})
    if isinstance(data, list) and data and all(isinstance(x, (int, float)) for x in data):
        return _from_columns(str(path), {"loss": list(data)})
    if data == [] or data == {}:
        raise CurveError(path, "an empty history (no epoch or step recorded: did the run finish one?)")
    raise CurveError(path, "JSON history must be a dict of lists, a list of dicts or a list of numbers")


def _load_csv(path: Path) -> History:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CurveError(path, f"not a readable CSV history ({e})") from None
    if not rows:
        raise CurveError(path, "CSV history with no rows")
    keys = list(rows[0].keys())
    if any(k is None for k in keys):
        raise CurveError(path, "CSV rows longer than the header")
    return _from_columns(str(path), {k: [r.get(k) for r in rows] for k in keys})


def _load_tensorboard(path: Path) -> History:
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:  # pragma: no cover - tensorboard is a dependency of the ml extra
        raise CurveError(path, "reading TensorBoard event files needs the tensorboard package") from None
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    try:
        acc.Reload()
    except Exception as e:
        raise CurveError(path, f"not a readable TensorBoard event file ({e})") from None
    tags = acc.Tags().get("scalars", [])
    if not tags:
        raise CurveError(path, "TensorBoard events with no scalar series")
    h = History(str(path))
    for tag in tags:
        ev = acc.Scalars(tag)
        h.series[tag] = ([float(e.step) for e in ev], [float(e.value) for e in ev])
    return h


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
# 'loss 3.2', 'loss: 3.2', 'loss=3.2', "'loss': 3.2", 'val_loss 3.2', 'val loss: 3.2', '| loss  7.63 |'
LOSS_PATTERN = (
    r"(?<![\w.])(?P<prefix>(?:train|training|val|valid|validation|test|eval)[ _]?)?loss['\"]?\s*[:=]?\s*"
    rf"(?P<value>{_NUMBER})(?![\w.])"
)
STEP_PATTERN = r"(?<![\w.])(?:step|iter|iteration|global_step)['\"]?\s*[:=]?\s*(?P<step>\d+)"
_PREFIX = {"training": "train", "valid": "val", "validation": "val"}


def load_log(path: str | Path, pattern: str | None = None) -> History:
    """Series from a training log (see the module docstring); ``pattern`` is a regex searched in each line: its
    named groups are series (``step`` the x value), or its one group is ``loss``. ``CurveError`` when the file
    cannot be read, the regex is not valid, or nothing matched."""
    import re

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise CurveError(path, f"cannot be read ({e.strerror or e})") from None
    rx = None
    if pattern:
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise CurveError(path, f"--pattern {pattern!r} is not a valid regex: {e}") from None
        if not rx.groups:
            raise CurveError(path, f"--pattern {pattern!r} has no group: mark the number, e.g. 'loss (\\S+)'")
    loss_rx, step_rx = re.compile(LOSS_PATTERN, re.I), re.compile(STEP_PATTERN, re.I)
    cols: dict[str, tuple[list[float], list[float]]] = {}

    def add(name: str, step: float | None, value: str) -> None:
        y = _num(value)
        if y is None:
            return
        xs, ys = cols.setdefault(name, ([], []))
        xs.append(step if step is not None else float(len(ys)))
        ys.append(y)

    for line in text.splitlines():
        if rx is not None:
            m = rx.search(line)
            if not m:
                continue
            named = {k: v for k, v in m.groupdict().items() if v is not None}
            step = _num(named.pop("step", None))
            if not m.groupdict():
                add("loss", step, m.group(1))
            for k, v in named.items():
                add(k, step, v)
            continue
        found = list(loss_rx.finditer(line))
        if not found:
            continue
        sm = step_rx.search(line)
        step = _num(sm.group("step")) if sm else None
        for m in found:
            prefix = (m.group("prefix") or "").strip(" _").lower()
            name = f"{_PREFIX.get(prefix, prefix)}_loss" if prefix else "loss"
            add(name, step, m.group("value"))
    if not cols:
        how = f"--pattern {pattern!r}" if pattern else "the 'loss X' forms (give --pattern REGEX)"
        raise CurveError(path, f"no values found in the log with {how}")
    h = History(str(path))
    h.series = cols
    return h


def load_history(src: str | Path | dict | list, pattern: str | None = None) -> History:
    """A history from a path (JSON, CSV, TensorBoard file or folder, a training log) or an in-memory dict/list
    (see the module docstring); ``pattern`` reads the file as a log with that regex. Raises ``CurveError``
    naming the file and what is wrong."""
    if pattern is not None and not isinstance(src, (dict, list)):
        return load_log(src, pattern)
    if isinstance(src, (dict, list)):
        if isinstance(src, dict):
            return _from_columns("<dict>", {k: v for k, v in src.items() if isinstance(v, list)})
        return _from_columns("<list>", {"loss": list(src)})
    path = Path(src)
    if not path.exists():
        raise CurveError(path, "no such file or folder")
    if path.is_dir() or path.name.startswith("events.out.tfevents"):
        if path.is_dir() and not any(path.rglob("events.out.tfevents*")):
            hist = path / "history.json"
            if hist.is_file():
                return _load_json(hist)
            raise CurveError(path, "a folder with neither TensorBoard event files nor history.json")
        return _load_tensorboard(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _load_json(path)
    if suffix in (".csv", ".tsv"):
        return _load_csv(path)
    head = path.read_bytes()[:1]
    if head in (b"{", b"["):
        return _load_json(path)
    return load_log(path)


def is_timing(name: str) -> bool:
    n = name.lower()
    return any(w in n for w in TIMING_WORDS)


@dataclass
class CurvesResult:
    """Per-series comparison (``series``: name -> dict) and ``first``: the earliest step outside the band over
    every checked series (None: all inside)."""

    a: str
    b: str
    tolerance: float
    abs_tolerance: float
    series: dict[str, dict[str, Any]] = field(default_factory=dict)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)

    @property
    def first(self) -> dict[str, Any] | None:
        firsts = [
            {"series": k, **v["first_outside"]}
            for k, v in self.series.items()
            if v.get("checked") and v.get("first_outside")
        ]
        return min(firsts, key=lambda f: (f["index"], f["series"])) if firsts else None

    @property
    def verdict(self) -> str:
        if not any(v.get("checked") for v in self.series.values()):
            return "nothing to compare"
        return "divergence" if self.first else "match"

    def to_dict(self) -> dict[str, Any]:
        def clean(v):
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        return clean(
            {
                "a": self.a,
                "b": self.b,
                "tolerance": self.tolerance,
                "abs_tolerance": self.abs_tolerance,
                "verdict": self.verdict,
                "first_outside": self.first,
                "series": self.series,
                "only_in_a": self.only_in_a,
                "only_in_b": self.only_in_b,
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def compare_curves(
    a: str | Path | dict | list | History,
    b: str | Path | dict | list | History,
    *,
    tolerance: float = 0.05,
    abs_tolerance: float = 1e-8,
    series: list[str] | None = None,
    pattern: str | None = None,
) -> CurvesResult:
    """Compare two histories series by series (see the module docstring). ``tolerance`` is relative; ``series``
    restricts the comparison to those names; ``pattern`` reads both as training logs with that regex."""
    ha = a if isinstance(a, History) else load_history(a, pattern)
    hb = b if isinstance(b, History) else load_history(b, pattern)
    res = CurvesResult(ha.source, hb.source, tolerance, abs_tolerance)
    names = [k for k in ha.series if k in hb.series]
    if series:
        missing = [s for s in series if s not in names]
        if missing:
            raise CurveError(ha.source, f"series {', '.join(missing)} not in both histories (have: {', '.join(names)})")
        names = list(series)
    res.only_in_a = [k for k in ha.series if k not in hb.series]
    res.only_in_b = [k for k in hb.series if k not in ha.series]
    for name in names:
        (xa, ya), (_, yb) = ha.series[name], hb.series[name]
        n = min(len(ya), len(yb))
        entry: dict[str, Any] = {
            "steps": n,
            "steps_a": len(ya),
            "steps_b": len(yb),
            "checked": not is_timing(name),
            "x": xa[:n],
            "a": ya[:n],
            "b": yb[:n],
        }
        worst, worst_i, first = 0.0, None, None
        for i in range(n):
            va, vb = ya[i], yb[i]
            if math.isnan(va) or math.isnan(vb):
                bad = not (math.isnan(va) and math.isnan(vb))
                rel = math.inf if bad else 0.0
            else:
                diff = abs(va - vb)
                band = tolerance * max(abs(va), abs(vb)) + abs_tolerance
                bad = diff > band
                rel = diff / max(abs(va), abs(vb), 1e-30)
            if rel > worst:
                worst, worst_i = rel, i
            if bad and first is None:
                first = {"index": i, "step": xa[i], "a": va, "b": vb, "rel_diff": rel}
        entry["max_rel_diff"] = worst
        entry["max_at"] = xa[worst_i] if worst_i is not None else None
        entry["first_outside"] = first
        if not entry["checked"]:
            entry["note"] = "timing: not judged"
        if len(ya) != len(yb):
            entry["note"] = (entry.get("note", "") + f"; lengths differ ({len(ya)} vs {len(yb)})").lstrip("; ")
        res.series[name] = entry
    return res
