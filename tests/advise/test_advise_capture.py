"""The capture ascendify port uses in its own runs: ASCENDIFY_ADVISE=DIR traces the program run by
ascendify.program (in this process here) and writes DIR/trace.json and DIR/advise.json when it ends."""

from __future__ import annotations

import json

from ascendify.advise import runner
from ascendify.program import Program

SCRIPT = """
import torch
net = torch.nn.Linear(16, 16)
opt = torch.optim.AdamW(net.parameters(), foreach=False)
for _ in range(4):
    loss = net(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(loss.item())
"""


def test_capture_from_env_writes_the_trace_and_the_analysis(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASCENDIFY_ADVISE_PID", "")  # capture_from_env sets it; undone after the test
    env = {"ASCENDIFY_ADVISE": str(tmp_path / "adv"), "ASCENDIFY_ADVISE_DEVICE": "910B4"}
    tracer = runner.capture_from_env(env)
    assert tracer is not None and runner.capture_from_env(env) is tracer  # once per process
    assert Program.parse(["train.py"]).run_in_process() == 0
    assert runner._ACTIVE is None  # switched off when the program ended
    trace = json.loads((tmp_path / "adv" / "trace.json").read_text())
    assert trace["schema"] == "ascendify.advise.trace/1" and len(trace["steps"]) == 4
    doc = json.loads((tmp_path / "adv" / "advise.json").read_text())
    assert doc["meta"]["device"] == "Ascend 910B4"
    assert {f["rule"] for f in doc["findings"] + doc["minor_findings"]} >= {"ADV405"}
    assert runner.capture_from_env({}) is None  # nothing without the variable
