"""The in-memory rewrite of device checks: only `<x>.type ==/!= "cuda"` and `get_backend() ==/!= "nccl"`."""

from __future__ import annotations

import pytest

from ascendify.auto.record import Recorder
from ascendify.auto.rewrite import compile_user_source, rewrite_source


@pytest.mark.parametrize("before, after", [
    ("a = x.type == 'cuda'", "a = x.type == 'npu'"),
    ("a = 'cuda' != x.device.type", "a = 'npu' != x.device.type"),
    ("a = dist.get_backend() == 'nccl'", "a = dist.get_backend() == 'hccl'"),
    ("a = get_backend(g) != 'nccl'", "a = get_backend(g) != 'hccl'"),
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
