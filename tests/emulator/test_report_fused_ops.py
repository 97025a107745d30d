"""The emulate report counts torch_npu's fused operators by name (JSON ``fused_ops`` and a terminal table),
beside the ATen ops they ran, so that a user can tell the fused path ran."""

import io

import pytest
import torch

from ascendify.emulator import render

torch_npu = pytest.importorskip("torch_npu")


def test_fused_operators_are_counted_by_name_in_json_and_terminal(fresh_report):
    q = torch.randn(1, 8, 2, 16).npu()
    for _ in range(2):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", scale=0.25)
    x, w = torch.randn(4, 16).npu(), torch.ones(16).npu()
    torch.ops.npu.npu_rms_norm(x, w)  # the dispatcher spelling counts once too
    with pytest.raises(RuntimeError):
        torch_npu.npu_rms_norm(x, w.half())  # refused: not a call that ran
    rep = fresh_report.report()
    assert rep["fused_ops"] == {"npu_fusion_attention": 2, "npu_rms_norm": 1}
    assert rep["ops_run"] > 3  # the ATen ops they became are still counted
    from rich.console import Console

    buf = io.StringIO()
    render.render(rep, console=Console(file=buf, width=80, force_terminal=False))
    text = buf.getvalue()
    assert "torch_npu fused operators" in text and "3 (2 distinct)" in text
    assert "npu_fusion_attention" in text and max(len(line) for line in text.splitlines()) <= 80
    fresh_report.reset_report()
    assert fresh_report.report()["fused_ops"] == {}
