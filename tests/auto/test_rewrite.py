"""The in-memory rewrite of device checks: only `<x>.type ==/!= "cuda"` and `get_backend() ==/!= "nccl"`
(also `get_default_backend_for_device(...) ==/!= "nccl"`)."""

from __future__ import annotations

import pytest

from ascendify.auto.record import Recorder
from ascendify.auto.rewrite import compile_user_source, rewrite_source


@pytest.mark.parametrize("before, after", [
    ("a = x.type == 'cuda'", "a = x.type == 'npu'"),
    ("a = 'cuda' != x.device.type", "a = 'npu' != x.device.type"),
    ("a = dist.get_backend() == 'nccl'", "a = dist.get_backend() == 'hccl'"),
    ("a = get_backend(g) != 'nccl'", "a = get_backend(g) != 'hccl'"),
    # device-generic code: the accelerator is the target, its backend the target's
    ("a = dist.get_default_backend_for_device(acc) == 'nccl'",
     "a = dist.get_default_backend_for_device(acc) == 'hccl'"),
    ("a = torch.accelerator.current_accelerator().type == 'cuda'",
     "a = torch.accelerator.current_accelerator().type == 'npu'"),
    ("if d.type == 'cuda' and e.type == 'cuda':\n    pass", "if d.type == 'npu' and e.type == 'npu':\n    pass"),
])
def test_rewritten(before, after):
    out, lines = rewrite_source(before + "\n", "npu", "hccl")
    assert out == after + "\n" and lines


@pytest.mark.parametrize("src", [
    "a = name == 'cuda'",              # a plain string: may hold an unmapped "cuda" value
    "a = 'cuda' in str(device)",       # containment: reported, not rewritten
    "a = x.type == 'cuda:0'",          # not a device type
    "a = x.type is 'cuda'",
    "a = x.type == 'cpu'",
    "a = backend == 'nccl'",
    "path = 'ckpt_cuda.pt'",
    "a = x.type < 'cuda'",
])
def test_not_rewritten(src):
    out, lines = rewrite_source(src + "\n", "npu", "hccl")
    assert out == src + "\n" and not lines


def test_compiled_code_runs_and_findings_name_lines():
    rec = Recorder("npu")
    src = "class D:\n    type = 'npu'\n\nok = D().type == 'cuda'\nother = 'cuda' in 'cuda:0'\n"
    ns: dict = {}
    exec(compile_user_source(src, "user_script.py", "npu", "hccl", rec), ns)
    assert ns["ok"] is True and ns["other"] is True
    assert [(f["line"], "rewritten" in f["message"]) for f in rec.findings] == [(4, True), (5, False)]
    assert "at run time it is 'cuda:0'" in rec.findings[1]["message"]  # 'cuda' in 'cuda:0': the CUDA branch


def test_a_check_of_a_device_object_takes_the_other_branch_and_says_so_without_watching():
    rec = Recorder("npu")
    src = "import torch\nx = torch.zeros(1)\nok = 'cuda' in str(x.device)\n"
    code = compile_user_source(src, "user_script.py", "npu", "hccl", rec)
    assert "probe" not in code.co_names  # nothing watched: the operand comes from a (redirected) device
    [f] = rec.findings
    assert f["message"].endswith("the device type is the target's, so this takes its non-CUDA branch")


def test_plain_operands_are_watched_and_the_finding_follows_the_run():
    rec = Recorder("npu")
    src = ("def fused(device_type):\n    return device_type == 'cuda'\n\n\n"
           "def never(backend):\n    return backend == 'nccl'\n")
    ns: dict = {}
    exec(compile_user_source(src, "user_script.py", "npu", "hccl", rec), ns)
    first, unused = rec.findings
    assert "may take its non-CUDA branch" in first["message"]  # not run yet
    assert "may take its non-CUDA branch" in unused["message"] and "'nccl'" in unused["message"]
    assert ns["fused"]("cuda") is True
    assert first["message"] == ("compares `device_type` with 'cuda': at run time it is 'cuda', a plain value that "
                                "still says 'cuda' (not redirected), so the CUDA branch runs (its CUDA calls are "
                                "redirected)")
    assert ns["fused"]("npu") is False and ns["fused"]("cuda") is True
    assert "both branches ran ('cuda' kept the CUDA branch, 'npu' took the other)" in first["message"]
    assert "may take" in unused["message"]  # never reached: still "may"
