"""msprobe's dump (``PrecisionDebugger``, tasks "statistics" and "tensor") of a small training step runs end to
end on the emulated npu, and what it records is what the same step computes on the CPU. (Before the emulator
had ``torch_npu.get_npu_format`` the statistics dump died at its first tensor.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("msprobe")

SCRIPT = """\
import copy, json, sys
import torch
import torch_npu  # noqa: F401  (the emulator's shim, through ASCENDIFY_EMULATE=npu)
from msprobe.pytorch import PrecisionDebugger

task, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
model = copy.deepcopy(cpu_model).npu()
x = torch.randn(3, 8)
debugger = PrecisionDebugger(task=task, dump_path=out, level="L1")
debugger.start(model)
loss = model(x.npu()).pow(2).mean()
loss.backward()
debugger.stop()
debugger.step()
y = cpu_model(x)
print("REF", json.dumps({"y": y.tolist(), "loss": y.pow(2).mean().item(), "device": str(loss.device)}))
"""


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCENDIFY_", "TORCH_NPU_"))}
    env.update(ASCENDIFY_EMULATE="npu", OMP_NUM_THREADS="1")
    return env


@pytest.mark.slow
def test_msprobe_dump_runs_on_the_emulated_npu_and_records_the_cpu_values(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(SCRIPT)
    runs = {task: subprocess.Popen([sys.executable, str(script), task, str(tmp_path / task)], cwd=tmp_path,
                                   env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for task in ("statistics", "tensor")}
    refs = {}
    for task, p in runs.items():
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        assert "Enable torch_npu pickle compatibility failed" not in out + err
        (line,) = [ln for ln in out.splitlines() if ln.startswith("REF ")]
        refs[task] = json.loads(line[4:])
        assert refs[task]["device"] == "npu:0"
    y = torch.tensor(refs["statistics"]["y"])

    (dump,) = (tmp_path / "statistics").glob("step0/*/dump.json")
    data = json.loads(dump.read_text())
    assert data["task"] == "statistics" and data["framework"] == "pytorch"
    (stat,) = data["data"]["Functional.linear.1.forward"]["output"]
    assert stat["shape"] == [3, 4] and stat["dtype"] == "torch.float32"
    assert stat["Max"] == y.max().item() and stat["Min"] == y.min().item()
    assert stat["Mean"] == pytest.approx(y.mean().item(), rel=1e-6)
    assert stat["Norm"] == pytest.approx(y.norm().item(), rel=1e-6)
    assert "Functional.linear.0.backward" in data["data"]  # the backward was dumped too

    (saved,) = (tmp_path / "tensor").glob("step0/*/dump_tensor_data/Functional.linear.1.forward.output.0.pt")
    t = torch.load(saved, map_location="cpu", weights_only=False)
    assert torch.equal(t, y)  # the emulated npu computed exactly the CPU's output
