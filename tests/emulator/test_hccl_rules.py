"""HCCL's rules on the emulated ``hccl`` backend (``ascendify/data/hccl_rules.json``), per chip and CANN version,
and bad input to a group: a collective on another rank's device, ranks beyond a server's NPUs."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

from ascendify.core import knowledge
from ascendify.emulator import NpuFidelityError
from ascendify.emulator.distributed import hccl_rules

pytestmark = pytest.mark.filterwarnings("ignore:.*produced a torch.float64 tensor on npu")


@pytest.fixture
def group(fresh_report):
    """A one-process ``hccl`` group, fidelity ``warn``, default chip (Ascend910B3: A2) and CANN."""
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield fresh_report
    finally:
        dist.destroy_process_group()


def npu(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device="npu")


def test_every_rule_has_a_source_and_a_known_kind():
    rules = knowledge.load("hccl_rules")["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    kinds = {"dtype", "reduce_op", "reduce_op_dtype", "collective", "collective_note", "contiguous", "alltoall",
             "devices_per_node", "same_graph", "argument"}
    for r in rules:
        assert r["kind"] in kinds, r["id"]
        assert r["source"].startswith("https://"), r["id"]
        assert r["message"] and r["chips"] and "raised_by" in r, r["id"]
        hccl_rules.cann_matches(r.get("cann", "*"), "9.1.0")  # every range parses


def test_argument_rules_compare_element_counts_as_torch_npu_does():
    """ProcessGroupHCCL's argument checks (rows of kind "argument"): counts, not shapes; each a named check."""
    for r in knowledge.load("hccl_rules")["rules"]:
        if r["kind"] == "argument":
            assert r["check"] in hccl_rules._ARGUMENT_CHECKS, r["id"]
    check = hccl_rules.check_arguments
    check("all_gather_into_tensor", output=torch.empty(12), input=torch.empty(2, 3), size=2)  # flat: fine
    check("reduce_scatter_tensor", output=torch.empty(2, 3), input=torch.empty(4, 3), size=2)
    check("all_gather", outputs=[torch.empty(1, 2), torch.empty(3)], input=torch.empty(2), size=2)  # AllGatherV
    for op, args, message in (
        ("all_gather_into_tensor", dict(output=torch.empty(11), input=torch.empty(2, 3)),
         "output tensor size must be equal to world_size times input tensor size\nERR02001"),
        ("all_gather_into_tensor", dict(output=torch.empty(12, dtype=torch.half), input=torch.empty(6)),
         "output tensor must have the same type as input tensor"),
        ("all_gather_into_tensor", dict(output=torch.empty(3, 4).t(), input=torch.empty(6)),
         "Tensors must be contiguous\nERR02002"),
        ("reduce_scatter_tensor", dict(output=torch.empty(3), input=torch.empty(7)),
         "input tensor must be the same size as output size times world size"),
        ("all_gather", dict(outputs=[torch.empty(2)] * 3, input=torch.empty(2)),
         "Tensor list input to scatter/gather must match number of collective participants"),
        ("reduce_scatter", dict(output=torch.empty(2), inputs=[torch.empty(2), torch.empty(2, 2)[:, 0]]),
         "Tensors must be non-overlapping and dense"),
    ):
        with pytest.raises(RuntimeError, match=message):
            check(op, size=2, **args)


def test_chip_series_and_cann_order():
    assert [hccl_rules.chip_series(n) for n in ("Ascend910B3", "Ascend910_9391", "Ascend910ProB", "Ascend950PR",
                                                "Ascend310P3")] == ["A2", "A3", "A1", "A5", "other"]
    order = ["8.0.RC1", "8.0.RC3", "8.0.0", "8.1.RC1", "8.5.0", "9.0.0", "9.1.0"]
    assert sorted(order, key=hccl_rules.cann_key) == order
    assert hccl_rules.cann_matches(">=8.0.0", "8.5.0") and not hccl_rules.cann_matches("<8.0.0", "8.0.0")


def test_warn_counts_each_violation_and_the_collective_runs(group):
    emu = group
    t = npu(2, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="HCCL allreduce: Unsupported data type at::kDouble"):
        dist.all_reduce(t)
    assert t.cpu().tolist() == [1.0, 1.0]
    with pytest.warns(RuntimeWarning, match=r"HcclAllReduce.*error code is 5.*prod on at::kBFloat16"):
        dist.all_reduce(npu(2, dtype=torch.bfloat16), op=dist.ReduceOp.PRODUCT)
    with pytest.warns(RuntimeWarning, match="Cannot use ReduceOp.BAND with HCCL"):
        dist.all_reduce(npu(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    with pytest.warns(RuntimeWarning, match="Tensors must be contiguous"):
        dist.all_reduce(npu(3, 2).t())
    with pytest.warns(RuntimeWarning, match="HCCL doesn't support gather"):
        dist.gather(npu(2), [torch.zeros(2, device="npu")], dst=0)
    f64_out, f64_in = torch.zeros(2, device="npu", dtype=torch.float64), npu(2, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # what HCCL takes passes silently
        dist.all_reduce(npu(2, dtype=torch.bfloat16))  # SUM on bf16
        dist.all_reduce(npu(2, dtype=torch.bool))  # cast to int32 by torch_npu
        dist.all_reduce(npu(2, dtype=torch.float16), op=dist.ReduceOp.PRODUCT)
        dist.all_reduce(npu(2), op=dist.ReduceOp.AVG)
        dist.all_gather_into_tensor(f64_out, f64_in)  # all-gather moves any dtype
    counts = emu.report()["hccl_rule_violations"]
    assert counts == {"dtype.reducing": 1, "reduce_op.prod_dtypes": 1, "reduce_op.bitwise": 1,
                      "tensor.contiguous": 1, "collective.gather": 1}


def test_error_raises_what_the_npu_raises(group):
    emu = group
    emu.settings.fidelity = "error"
    with pytest.raises(NpuFidelityError, match=r"(?s)HCCL _reduce_scatter_base: Unsupported data type at::kDouble"
                                               r"\nERR02007 DIST feature not supported"):
        dist.reduce_scatter_tensor(torch.zeros(2, device="npu", dtype=torch.float64), npu(2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="Cannot use ReduceOp.BXOR with HCCL"):
        dist.all_reduce(npu(2, dtype=torch.int64), op=dist.ReduceOp.BXOR)
    assert emu.report()["rejected"] == {"hccl:dtype.reducing": 1, "hccl:reduce_op.bitwise": 1}


def test_rules_follow_the_chip_and_the_cann_version(group):
    emu = group
    emu.settings.fidelity = "error"
    emu.settings.device_name = "Ascend910ProB"  # Atlas training series (A1)
    emu.settings.cann_version = "8.0.RC1"  # documents int16 for A1
    dist.all_reduce(npu(2, dtype=torch.int16))
    emu.settings.cann_version = "8.0.0"  # does not
    with pytest.raises(NpuFidelityError, match="HcclAllReduce.*at::kShort on Atlas training series"):
        dist.all_reduce(npu(2, dtype=torch.int16))
    with pytest.raises(NpuFidelityError, match="kBFloat16"):
        dist.all_reduce(npu(2, dtype=torch.bfloat16))
    emu.settings.device_name = "Ascend950PR"  # Atlas 350: float64 reduces
    dist.all_reduce(npu(2, dtype=torch.float64))
    emu.settings.device_name = "Ascend910B3"
    with pytest.raises(NpuFidelityError, match="kDouble"):
        dist.all_reduce(npu(2, dtype=torch.float64))


def test_all_to_all_splits():
    rule_args = dict(group_size=2, split_sizes=False)
    ok = [torch.zeros(4, device="npu")]
    hccl_rules.check_collective("all_to_all_single", ok, **rule_args)
    import ascendify.emulator as emu

    saved = emu.settings.fidelity
    emu.settings.fidelity = "error"
    try:
        with pytest.raises(NpuFidelityError, match="dim 0 does not divide equally across group size"):
            hccl_rules.check_collective("all_to_all_single", [torch.zeros(3, device="npu")], **rule_args)
        with pytest.raises(NpuFidelityError, match="0-dim"):
            hccl_rules.check_collective("all_to_all_single", [torch.zeros((), device="npu")], **rule_args)
        # uneven splits with split sizes: HcclAlltoAllV takes them
        hccl_rules.check_collective("all_to_all_single", [torch.zeros(3, device="npu")], group_size=2,
                                    split_sizes=True)
    finally:
        emu.settings.fidelity = saved
        emu.reset_report()


def test_more_ranks_on_a_server_than_its_npus(fresh_report, monkeypatch):
    fresh_report.settings.fidelity = "error"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")  # torchrun --nproc-per-node 16 on an A2 server (8 NPUs)
    with pytest.raises(NpuFidelityError, match="16 ranks on one server; an Atlas A2 server has at most 8"):
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()
    fresh_report.settings.device_name = "Ascend910_9391"  # an A3 server holds 16
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    dist.destroy_process_group()


def test_a_collective_on_another_device_than_the_ranks_own(group):
    group.settings.single_device = False
    torch.npu.set_device(0)
    other = torch.ones(2, device="npu:1")
    with pytest.raises(RuntimeError, match=r"a tensor on npu:1, but this rank's device is npu:0.*set_device"):
        dist.all_reduce(other)
    dist.all_reduce(npu(2))  # its own device is fine
