"""``ascendify port --overflow``: the migrated run under the overflow watch (ascendify.precision.overflow), switched
on in the observer by ASCENDIFY_OBSERVE_OVERFLOW; read back into the train step's facts, the checklist item
``prec.overflow``, report.json's ``overflow``, the page and the terminal. The observer runs in this process on
tiny float16 models; one end-to-end port on tests/port/projects/amp_overflow (about 8 s)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from ascendify.port import checklist as cl
from ascendify.port import observe
from ascendify.port.observation import Observation
from ascendify.port.options import Context
from ascendify.port.stages.base import StageResult, number_text
from ascendify.port.stages.overflow import read_overflow

from .port_support import make_context

PROJECTS = Path(__file__).parent / "projects"


class Scores(nn.Module):
    def __init__(self, gain: float):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gain = gain

    def forward(self, x):
        h = self.proj(x)
        with torch.no_grad():  # attention weights with no gradient: only the forward can overflow
            g = h * self.gain
            s = torch.matmul(g, g.transpose(-1, -2))  # OVERFLOW-LINE
            w = s.clamp(-1e4, 1e4).float().softmax(-1).to(h.dtype)
        return (w @ h).float().mean(-1)


class Tiny(nn.Module):
    def __init__(self, gain: float):
        super().__init__()
        self.scores = Scores(gain)

    def forward(self, x):
        return self.scores(x)


def _line(path: Path, marker: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


def _watched_run(tmp_path: Path, gain: float, steps: int = 2) -> tuple[Context, StageResult]:
    """A float16 training loop under the observer with the overflow watch on, as the migrated run of a port
    writes it (runs/target), and the train step's result as read_train would hold it."""
    torch.manual_seed(0)
    model = Tiny(gain).half()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    out = tmp_path / "runs" / "target"
    obs = observe.Observer(str(out), steps=steps, seconds=None, seed=0, root=str(tmp_path), overflow=True)
    obs.install()
    try:
        with pytest.raises(observe.StopRun):
            for _ in range(10):
                loss = model(torch.randn(2, 4, 8, dtype=torch.float16)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        data = obs.finish(0)
    ctx = make_context(tmp_path, tmp_path, tmp_path, ["python", "t.py"], overflow=True)
    train = StageResult("train", status="ok", headline="x", facts={
        "runs": {"target": {"returncode": 0}}, "models": {"target": Observation.from_dict(data).model_rows()}})
    return ctx, train


def test_an_fp16_overflow_is_named_with_its_module_file_line_and_dtype(tmp_path):
    ctx, train = _watched_run(tmp_path, gain=300.0)
    raw = json.loads((tmp_path / "runs" / "target" / "overflow.json").read_text())
    assert raw["overflows"] >= 2 and raw["steps_seen"] == 2  # each step's forward overflows
    assert [f["iteration"] for f in raw["findings"] if f["direction"] == "forward"][:2] == [0, 1]
    o = train.facts["overflow"] = read_overflow(ctx, train)
    first = o["first"]
    assert first["api"] in ("bmm", "mm") and first["direction"] == "forward" and first["dtype"] == "float16"
    assert first["module"] == "Tiny.scores" and first["module_class"] == "Scores"
    assert Path(first["file"]).name == Path(__file__).name
    assert first["line"] == _line(Path(__file__), "# OVERFLOW-LINE")
    assert first["outputs"][0]["inf"] > 0 and all(i["finite"] for i in first["inputs"])
    v = cl.evaluate_item("prec.overflow", {"train": train}, "emulated")
    assert v.mark == cl.FAIL
    assert f"in Tiny.scores (Scores) at {first['file']}:{first['line']}, float16" in v.evidence
    # the item is listed only when --overflow asked for it
    assert "prec.overflow" not in [i["id"] for i in cl.evaluate({"train": train}, "emulated")]
    rows = {i["id"]: i for i in cl.evaluate({"train": train}, "emulated", flags=frozenset({"--overflow"}))}
    assert rows["prec.overflow"]["mark"] == cl.FAIL and rows["prec.overflow"]["anchor"] == "train"


def test_a_clean_run_passes_and_a_missing_run_says_why(tmp_path):
    ctx, train = _watched_run(tmp_path / "clean", gain=1.0)
    o = train.facts["overflow"] = read_overflow(ctx, train)
    assert o["first"] is None and o["overflows"] == 0 and o["calls_checked"] > 50  # forward, backward and SGD, two steps
    v = cl.evaluate_item("prec.overflow", {"train": train}, "emulated")
    assert v.mark == cl.PASS and v.evidence.startswith("no new inf/NaN in ")
    # under the emulated NPU's saturation mode nothing turns inf: not a pass
    o["npu_overflow_mode"] = {"mode": "saturation", "device": "Ascend910A", "note": ""}
    v = cl.evaluate_item("prec.overflow", {"train": train}, "emulated")
    assert v.mark == cl.NA and "ASCENDIFY_EMULATE_OVERFLOW_MODE=inf_nan" in v.evidence
    # the migrated run never started: no overflow.json, said, not a crash
    empty = make_context(tmp_path / "none", tmp_path, tmp_path, [], overflow=True)
    skipped = StageResult("train", status="ok", facts={"runs": {"target": {"skipped": "skipped (--skip)"}}})
    o = skipped.facts["overflow"] = read_overflow(empty, skipped)
    assert o["skipped"].startswith("the migrated run did not run")
    assert cl.evaluate_item("prec.overflow", {"train": skipped}, "emulated").mark == cl.NA


def test_port_overflow_end_to_end_names_the_op_and_the_skipped_steps(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PROJECTS / "amp_overflow", src)
    out, rep = tmp_path / "npu", tmp_path / "report"
    p = subprocess.run([sys.executable, "-m", "ascendify", "port", str(src), "-o", str(out), "--report", str(rep),
                        "-q", "--steps", "2", "--skip", "doctor,compare,bench", "--overflow", "--", "python",
                        "train.py", "--cuda", "--iters", "3", "--init-scale", "1e9"],
                       capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "COLUMNS": "80"})
    assert p.returncode == 1, p.stdout + p.stderr  # a finding
    data = json.loads((rep / "report.json").read_text())
    o = data["overflow"]
    first = o["first"]
    line = _line(out / "train.py", "torch.matmul(h, h.transpose")  # a line of the migrated copy
    assert (first["api"], first["direction"], first["file"], first["line"]) == ("bmm", "forward", "train.py", line)
    assert first["module"] == "Net.attn" and first["dtype"] == "float16"
    assert o["npu_overflow_mode"]["mode"] == "inf_nan"
    # GradScaler at scale 1e9: every step's gradients overflow, each update halves the scale
    assert o["gradscaler_updates"] >= 2 and len(o["skipped_steps"]) == o["gradscaler_updates"]
    assert o["skipped_steps"][0]["where"]["code"] == "scaler.update()"
    train = next(s for s in data["steps"] if s["id"] == "train")
    assert train["facts"]["overflow"] == o and "runs/target/overflow.json" in train["files"]
    assert not (rep / "runs" / "golden" / "overflow.json").exists()  # only the migrated run is watched
    item = next(i for i in data["checklist"]["items"] if i["id"] == "prec.overflow")
    assert item["mark"] == "✗" and f"at train.py:{line}" in item["evidence"]
    # the watch's own reductions on GradScaler's float64 bookkeeping are not the program's float64 events
    dtype_item = next(i for i in data["checklist"]["items"] if i["id"] == "prec.dtype-events")
    assert dtype_item["mark"] == "✓", dtype_item["evidence"]
    assert f"overflow (migrated run): {o['overflows']} new inf/NaN" in " ".join(p.stdout.split())
    page = (rep / "report.html").read_text()
    assert 'id="train-overflow"' in page and "GradScaler steps skipped" in page


def test_a_loss_that_went_nan_is_said_not_a_crash():
    """A float16 run whose loss turned NaN: JSON gives it back as a string; the checklist says it, as a finding
    where the original's loss stayed finite (never a ✓ on a NaN loss), and not a crash."""
    run = {"returncode": 0, "training": True, "history": {"step": [0, 1], "loss": [0.5, "NaN"]}}
    fine = {"returncode": 0, "training": True, "history": {"step": [0, 1], "loss": [0.5, 0.4]}}
    train = StageResult("train", status="ok", facts={"runs": {"target": run, "golden": fine}})
    v = cl.evaluate_item("code.runs-on-target", {"train": train}, "emulated")
    assert v.mark == cl.FAIL and v.evidence.endswith("but the loss is NaN from step 1")
    assert number_text("NaN") == "NaN" and number_text(0.5) == "0.5"
