"""Both directions with the real msprobe (mindstudio-probe): msprobe's dumps load into our model, and
``msprobe compare`` reads our dumps (statistics and tensor mode), ignoring the keys we add."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ascendify.precision import dump, load_dump

pytest.importorskip("msprobe", reason="mindstudio-probe is not installed")
pytestmark = pytest.mark.slow  # two msprobe runs in subprocesses (~20 s each here)

MODEL = textwrap.dedent(
    """
    import torch, torch.nn as nn, torch.nn.functional as F

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 8)
            self.ln = nn.LayerNorm(8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            h = F.gelu(self.fc(x), approximate="tanh")
            h = self.ln(h)
            return self.head(h)

    def build():
        torch.manual_seed(0)
        model = Tiny()
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
        return model, x
    """
)

MSPROBE_RUN = textwrap.dedent(
    """
    import json, logging, sys
    sys.path.insert(0, sys.argv[3])
    from tiny_model import build
    from msprobe.pytorch import PrecisionDebugger
    task, out = sys.argv[1], sys.argv[2]
    cfg = {"task": task, "dump_path": out, "rank": [], "step": [], "level": "mix", "async_dump": False,
           task: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "statistics":
        cfg[task]["summary_mode"] = "statistics"
    json.dump(cfg, open(out + ".json", "w"))
    model, x = build()
    dbg = PrecisionDebugger(config_path=out + ".json")
    dbg.start(model)
    model(x).sum().backward()  # MSPROBE-CALL
    dbg.stop()
    dbg.step()
    """
)


def _msprobe_cli() -> list[str]:
    exe = Path(sys.executable).with_name("msprobe")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("msprobe")
    if found:
        return [found]
    pytest.skip("the msprobe command is not installed")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """msprobe's mix dumps (statistics and tensor) and ours of the same model and input."""
    root = tmp_path_factory.mktemp("msprobe")
    (root / "tiny_model.py").write_text(MODEL)
    (root / "run.py").write_text(MSPROBE_RUN)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = {}
    for task in ("statistics", "tensor"):
        target = root / f"ms_{task}"
        r = subprocess.run([sys.executable, str(root / "run.py"), task, str(target), str(root)], cwd=root,
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        out[f"ms_{task}"] = target
    sys.path.insert(0, str(root))
    try:
        import tiny_model
    finally:
        sys.path.remove(str(root))
    for mode in ("stats", "tensors"):
        model, x = tiny_model.build()
        with dump(model, root / f"ours_{mode}", level="mix", mode=mode):
            model(x).sum().backward()
        out[f"ours_{mode}"] = root / f"ours_{mode}"
    out["root"] = root
    sys.modules.pop("tiny_model", None)
    return out


def _rank_dir(step_dir: Path) -> Path:
    (d,) = [p for p in step_dir.iterdir() if p.is_dir()]
    return d


def test_msprobe_dump_loads_into_our_model(dumps):
    ms = load_dump(dumps["ms_statistics"])
    ours = load_dump(dumps["ours_stats"])
    assert ms.framework == "msprobe" and ms.level == "mix" and ms.mode == "stats" and ms.rank == 0
    by = ms.by_name()
    fc = by["Module.fc.Linear.forward.0"]
    assert fc.kind == "module" and fc.module_path == "fc" and fc.class_name == "Linear"
    assert set(fc.params) == {"weight", "bias"}
    lin = by["Functional.linear.0.forward"]
    assert lin.kind == "api" and lin.api == "torch.nn.functional.linear"
    assert lin.parent == "Module.fc.Linear.forward.0" and lin.module_path == "fc"
    assert by["Functional.gelu.0.forward"].scalars == {"approximate": "tanh"}
    # parameter gradients attach to the module's backward node
    assert set(by["Module.fc.Linear.backward.0"].grads) == {"weight", "bias"}
    # the source line comes from stack.json: the first frame outside torch and msprobe
    assert lin.source and lin.source.split(":")[0].endswith("tiny_model.py")
    # the same model and input: the same numbers in both dumps
    ours_by = ours.by_name()
    # (an API's backward "output" list is in autograd's order in msprobe's dumps, ours in argument order)
    common = [n for n in by if n in ours_by and by[n].outputs and (n.endswith("forward") or ".forward." in n)]
    assert len(common) >= 8
    for name in common:
        a, b = by[name].outputs[0], ours_by[name].outputs[0]
        assert a.shape == b.shape and a.dtype == b.dtype, name
        for field in ("max", "min", "mean"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-5, abs=1e-6), (name, field)
        if a.shape:  # msprobe writes the value itself as the "norm" of a 0-d tensor
            assert a.norm == pytest.approx(b.norm, rel=1e-5), name
    assert not by["Functional.linear.0.forward"].outputs[0].fingerprint  # msprobe has none: compare must cope


def test_msprobe_tensor_dump_loads_with_weights_only(dumps):
    ms = load_dump(dumps["ms_tensor"])
    assert ms.mode == "tensors"
    node = ms.by_name()["Functional.gelu.0.forward"]
    arr = ms.load_tensor(node.outputs[0])
    assert arr.shape == (3, 8)
    assert float(arr.max()) == pytest.approx(node.outputs[0].max, rel=1e-6)


def _compare(tmp: Path, target: Path, golden: Path, label: str) -> list[dict]:
    out = tmp / f"cmp_{label}"
    r = subprocess.run([*_msprobe_cli(), "compare", "-tp", str(target), "-gp", str(golden), "-o", str(out)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (csv_file,) = list(out.rglob("compare_result*.csv"))
    with open(csv_file, newline="") as f:
        return list(csv.DictReader(f))


def test_msprobe_compare_reads_our_statistics_dump(dumps, tmp_path):
    ours = dumps["ours_stats"] / "step0"
    assert (ours / "rank0" / "dump.json").is_file()
    doc = json.loads((ours / "rank0" / "dump.json").read_text())
    assert "fingerprint" in doc["data"]["Functional.gelu.0.forward"]["output"][0]  # our extra keys are there
    # msprobe's folder mode (step folders holding rank folders); its own run wrote proc<pid>/, named rank0/ here
    theirs = tmp_path / "theirs" / "step0"
    shutil.copytree(_rank_dir(dumps["ms_statistics"] / "step0"), theirs / "rank0")
    rows = _compare(dumps["root"], ours, theirs, "stats")
    matched = [r for r in rows if r["Bench Name"] not in ("N/A", "")]
    assert len(matched) >= 40
    by = {r["NPU Name"]: r for r in matched}
    for name in ("Functional.gelu.0.forward.output.0", "Module.fc.Linear.forward.0.parameters.weight",
                 "Module.ln.LayerNorm.parameters_grad.0.weight", "Functional.linear.1.backward.input.0"):  # fmt: skip
        assert name in by, name
        assert by[name]["Result"] == "pass" and float(by[name]["Max diff"]) == 0.0, by[name]
    # every tensor passes, except where the two tools order things differently: an API's backward outputs, and
    # the "norm" msprobe writes for a 0-d tensor (its value)
    tensors = [r for r in matched if r["NPU Dtype"].startswith("torch.") and r["NPU Tensor Shape"] != "[]"
               and "backward.output" not in r["NPU Name"]]  # fmt: skip
    assert len(tensors) >= 30
    assert [r["NPU Name"] for r in tensors if r["Result"] != "pass"] == []


def test_msprobe_compare_reads_our_tensor_dump(dumps):
    ours = _rank_dir(dumps["ours_tensors"] / "step0") / "dump.json"
    theirs = _rank_dir(dumps["ms_tensor"] / "step0") / "dump.json"
    rows = _compare(dumps["root"], ours, theirs, "tensors")
    cos = {r["NPU Name"]: r["Cosine"] for r in rows if r["Bench Name"] not in ("N/A", "")}
    for name in ("Functional.gelu.0.forward.output.0", "Module.head.Linear.forward.0.output.0",
                 "Module.fc.Linear.parameters_grad.0.weight"):  # fmt: skip
        assert float(cos[name]) == pytest.approx(1.0), name
