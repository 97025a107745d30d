"""Redirection to the emulated NPU (subprocess: the emulator claims PrivateUse1 once per process)."""

from __future__ import annotations

from auto_support import PYTHON, SCRIPTS, last_json, run_cmd


def test_redirection_to_the_emulated_npu():
    r = run_cmd([PYTHON, str(SCRIPTS / "npu_checks.py")])
    assert r.returncode == 0, r.stderr[-3000:]
    o = last_json(r.stdout)
    assert o["target"] == "npu (emulated)"
    assert o["ascend_env"] == "0,1" and o["after_env"] is None  # translated before the device started, undone
    assert o["device"] == "npu:0" and o["isinstance"]
    assert o["cuda()"].startswith("npu") and o["to(0)"] == "npu:0" and o["factory"] == "npu:0"
    assert o["is_cuda"] is True and o["available"] is True and o["count_positive"]
    assert o["hf32_matmul"] is True and o["tf32_read"] is True and o["hf32_matmul_off"] is False
    assert o["hf32_conv"] is True
    assert o["double"] == ["torch.float64", "npu"]
    assert o["autocast"] == "torch.bfloat16"
    assert o["scaler"] == "npu"
    assert o["mem"] and o["event_ms"]
    assert "torch.cuda.get_arch_list is not supported on npu (emulated)" in o["arch_list"]
    assert "npu_checks.py:" in o["arch_list"]
    assert o["backend"] == "hccl"
    assert o["after_device"] == "cuda"
    assert {"torch.device", "Tensor.cuda", "torch.backends.cuda.matmul.allow_tf32", "torch.cuda.DoubleTensor",
            "env CUDA_VISIBLE_DEVICES", "torch.cuda.synchronize"} <= set(o["redirected"])
    assert {"torch.cuda.get_arch_list", "torch.cuda.nvtx.range_push"} <= set(o["unsupported"])
