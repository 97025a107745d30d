"""PyTorch's OpInfo samples agree on the emulated ``npu`` and on the CPU: a fast subset of the full sweep.

The full sweep (every float32 entry of ``op_db``) is ``benchmarks/opinfo_sweep.py``; this test imports its
harness and runs ~50 common entries with a few samples each, forward and backward.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import ascendify.emulator as emulator

SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "opinfo_sweep.py"
MAX_SAMPLES = 3

SUBSET = [
    # pointwise and binary
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sigmoid",
    "tanh", "clamp", "where", "lerp", "addcmul", "masked_fill",
    # reductions and scans
    "sum", "mean", "var", "std", "amax", "argmax", "max.reduction_with_dim", "cumsum", "logsumexp",
    "sort", "topk",
    # linear algebra
    "mm", "bmm", "addmm", "matmul", "einsum",
    # shapes, indexing
    "cat", "stack", "reshape", "transpose", "permute", "index_select", "gather", "scatter_add", "nonzero",
    # nn.functional
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.relu", "nn.functional.gelu",
    "nn.functional.silu", "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "nn.functional.cross_entropy", "nn.functional.mse_loss", "nn.functional.embedding",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.scaled_dot_product_attention",
    # random (same seed) and uninitialised (metadata only)
    "nn.functional.dropout", "bernoulli", "empty_like",
]


def _load_sweep():
    spec = importlib.util.spec_from_file_location("opinfo_sweep", SWEEP)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


sweep = _load_sweep()


@pytest.fixture(scope="module")
def entries():
    import warnings

    import torch.backends as backends

    emulator.enable()
    # importing torch's OpInfo database (torch.testing._internal.common_utils) freezes the cuDNN flags
    # (disable_global_flags) and silences every warning: neither may leak into the tests that run after this one
    flags = backends.flags_frozen.__globals__  # the module globals the flag check reads
    flag = flags["__allow_nonbracketed_mutation_flag"]
    with warnings.catch_warnings():
        ops = sweep.float32_entries(sweep.load_op_db(), SUBSET)
    flags["__allow_nonbracketed_mutation_flag"] = flag
    return {sweep.entry_id(op): op for op in ops}


def test_subset_names_exist(entries):
    missing = [name for name in SUBSET if name not in entries]
    assert not missing, f"not float32 OpInfo entries in this torch: {missing}"


@pytest.mark.parametrize("name", SUBSET)
def test_forward_and_backward_agree_with_cpu(entries, name):
    op = entries[name]
    result = sweep.check_entry(op, max_samples=MAX_SAMPLES)
    assert result.forward.status == "agree", f"{result.forward.reason} on {result.forward.sample}"
    if result.backward is not None and result.backward.status != "not_runnable":
        assert result.backward.status == "agree", f"{result.backward.reason} on {result.backward.sample}"


def test_the_harness_sees_a_wrong_result(entries, monkeypatch):
    """The comparison is not vacuous: an npu result that is off by one ulp somewhere is a miss."""
    import torch

    op = entries["exp"]
    real = op.op

    def off_on_npu(x, *args, **kwargs):
        out = real(x, *args, **kwargs)
        if out.device.type == "npu" and out.numel():
            out = out.clone()
            out.view(-1)[0] += 1.0
        return out

    monkeypatch.setattr(op, "op", off_on_npu)
    result = sweep.check_entry(op, max_samples=MAX_SAMPLES, backward=False)
    assert result.forward.status == "miss" and "mismatch" in result.forward.reason
    assert torch.float32 in op.supported_dtypes("cpu")


def test_summary_counts(entries):
    fake = [
        {"entry": "a", "forward": {"status": "agree", "samples": 2, "agreed": 2, "exact": 2, "reason": "",
                                   "sample": ""}, "backward": None},
        {"entry": "b", "forward": {"status": "miss", "samples": 2, "agreed": 1, "exact": 1, "reason": "x",
                                   "sample": "(s)"},
         "backward": {"status": "agree", "samples": 1, "agreed": 1, "exact": 0, "reason": "", "sample": ""}},
        {"entry": "c", "forward": {"status": "not_runnable", "samples": 0, "agreed": 0, "exact": 0, "reason": "",
                                   "sample": ""}, "backward": None},
    ]
    s = sweep.summarise(fake)
    assert (s["forward"]["runnable"], s["forward"]["agreed"], s["forward"]["percent"]) == (2, 1, 50.0)
    assert (s["backward"]["runnable"], s["backward"]["agreed"], s["backward"]["bit_exact_entries"]) == (1, 1, 0)
    assert s["misses"] == [{"entry": "b", "phase": "forward", "reason": "x", "sample": "(s)"}]
