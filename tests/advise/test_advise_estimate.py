"""The step estimate: work per op, the chip's figures (published peaks, the assumptions where none are), an op's
bound, and a step's time cut at its synchronisations."""

from __future__ import annotations

import pytest

from ascendify.advise import estimate as est
from ascendify.advise.trace import Op


def op(name, ins, outs=(), scalars=(), extra=None, phase="f"):
    return Op(0, phase, name, -1, tuple(ins), tuple(outs), tuple(range(len(ins))), (), tuple(scalars), extra)


F32 = "float32"


def test_work_of_the_ops_that_run_on_the_cube():
    assert est.flops(op("mm", [((64, 128), F32, "npu"), ((128, 32), F32, "npu")]))[0] == 2 * 64 * 128 * 32
    assert est.flops(op("bmm", [((4, 8, 16), F32, "npu"), ((4, 16, 8), F32, "npu")])) == (2.0 * 4 * 8 * 16 * 8,
                                                                                          "matmul")
    f, kind = est.flops(op("addmm", [((32,), F32, "npu"), ((10, 20), F32, "npu"), ((20, 32), F32, "npu")]))
    assert kind == "matmul" and f == 2 * 10 * 20 * 32 + 10 * 32
    conv = op("convolution", [((2, 3, 8, 8), F32, "npu"), ((16, 3, 3, 3), F32, "npu")], [((2, 16, 6, 6), F32, "npu")])
    assert est.flops(conv) == (2.0 * 2 * 16 * 6 * 6 * 3 * 9, "conv")
    sdpa = op("_scaled_dot_product_flash_attention_for_cpu", [((2, 4, 32, 16), F32, "npu")] * 3)
    assert est.flops(sdpa) == (2.0 * 8 * 32 * 32 * 32, "attention")
    assert est.flops(op("relu", [((10, 10), F32, "npu")], [((10, 10), F32, "npu")])) == (100.0, None)


def test_chip_figures_and_their_assumptions():
    h100 = est.chip("NVIDIA H100 80GB HBM3")
    assert h100.kind == "cuda" and h100.peaks["bf16"] == pytest.approx(989.4e12) and h100.bandwidth == 3350e9
    npu = est.chip("Ascend910B3")
    assert npu.kind == "npu" and npu.peaks["fp16"] == 280e12
    assert npu.peaks["fp32"] == pytest.approx(280e12 * 0.0625)  # unpublished: the assumption, said in the notes
    assert any("fp32 peak not published" in n for n in npu.notes)
    assert any("third_party" in n for n in npu.notes)
    assert est.chip("910B3", dispatch_us=7).dispatch_s == pytest.approx(7e-6)
    with pytest.raises(ValueError, match="no published peaks"):
        est.chip("TPU v9")


def test_which_peak_a_matmul_runs_at():
    assert est.matmul_peak_dtype("bfloat16", {}, "npu") == "bf16"
    assert est.matmul_peak_dtype("float32", {}, "npu") == "fp32"  # torch_npu: matmul allow_hf32 off by default
    assert est.matmul_peak_dtype("float32", {}, "npu", conv=True) == "hf32"  # ... conv on
    assert est.matmul_peak_dtype("float32", {"npu_matmul_allow_hf32": True}, "npu") == "hf32"
    assert est.matmul_peak_dtype("float32", {"float32_matmul_precision": "high"}, "cuda") == "tf32"
    assert est.matmul_peak_dtype("float32", {"float32_matmul_precision": "highest"}, "cuda") == "fp32"


def test_an_ops_bound_and_time():
    c = est.chip("Ascend910B3")
    big = op("mm", [((4096, 4096), "bfloat16", "npu"), ((4096, 4096), "bfloat16", "npu")],
             [((4096, 4096), "bfloat16", "npu")])
    k = est.op_cost(big, c, {})
    assert k.bound == "compute" and k.device_s == pytest.approx(2 * 4096 ** 3 / (280e12 * 0.6))
    small = op("add", [((1000,), F32, "npu"), ((1000,), F32, "npu")], [((1000,), F32, "npu")])
    k = est.op_cost(small, c, {})
    assert k.bound == "memory" and k.device_s == c.floor_s and k.host_s == c.dispatch_s
    view = est.op_cost(op("view", [((10,), F32, "npu")]), c, {})
    assert view.device_s == 0 and view.host_s == c.view_s and not view.sync
    item = est.op_cost(op("_local_scalar_dense", [((), F32, "npu")]), c, {})
    assert item.sync
    assert not est.op_cost(op("_local_scalar_dense", [((), F32, "cpu")]), c, {}).sync  # a CPU value: no sync
    mask = op("index", [((100,), F32, "npu"), ((100,), "bool", "npu")])
    assert est.op_cost(mask, c, {}).sync  # a boolean mask: nonzero inside
    fb = est.op_cost(small, c, {}, fallback=True)  # on the host CPU: a sync and the host link
    assert fb.sync and fb.device_s == pytest.approx(12000 / c.host_link + c.floor_s)


def test_a_step_is_cut_at_its_syncs():
    c = est.chip("Ascend910B3")
    tiny = [est.OpCost(i, 1e-6, 20e-6, 1.0, 8, "memory", None, False) for i in range(100)]
    s = est.summarize(c, 0, tiny)
    assert s.total_s == pytest.approx(100 * 20e-6) and s.host_s == pytest.approx(100 * 19e-6)  # host-bound
    heavy = [est.OpCost(i, 100e-6, 20e-6, 1.0, 8, "compute", "bf16", False) for i in range(10)]
    s = est.summarize(c, 0, heavy)
    assert s.total_s == pytest.approx(10 * 100e-6) and s.host_s == 0  # device-bound: delivery hidden
    synced = list(heavy)
    synced[4] = est.OpCost(4, 100e-6, 20e-6, 1.0, 8, "compute", "bf16", True)
    s2 = est.summarize(c, 0, synced)
    assert s2.syncs == 1 and s2.total_s == pytest.approx(s.total_s + c.sync_s)
