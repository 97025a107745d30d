"""The emulated ``hccl`` backend: collectives on ``npu`` tensors and DDP, in-process and under torchrun."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gloo_teardown import run_again_on_teardown_abort

import ascendify.emulator as emulator
from ascendify.emulator import distributed

HERE = Path(__file__).resolve().parent
WORKER = HERE / "hccl_worker.py"
STEPS = 4


@pytest.fixture(scope="module", autouse=True)
def _enabled():
    emulator.enable()
    distributed.install()


@pytest.fixture
def single_group():
    """A one-process ``hccl`` group in this process (destroyed afterwards)."""
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


# --- registration ---------------------------------------------------------------------------------------------


def test_hccl_is_registered_for_npu():
    assert "hccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["npu"] == "hccl"
    assert dist.Backend.backend_capability["hccl"] == ["npu"]
    assert dist.is_hccl_available() is True
    distributed.install()  # idempotent
    assert dist.Backend.backend_list.count("hccl") == 1


# --- one process ------------------------------------------------------------------------------------------------


def test_single_process_collectives_land_in_place(single_group):
    assert dist.get_backend() == "hccl"
    t = torch.arange(4.0, device="npu")
    ptr = t.data_ptr()
    dist.all_reduce(t)
    assert t.device.type == "npu" and t.data_ptr() == ptr and t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    out = [torch.zeros(4, device="npu")]
    dist.all_gather(out, t)
    assert torch.equal(out[0].cpu(), t.cpu())
    work = dist.broadcast(t, src=0, async_op=True)
    assert work.wait() and work.is_completed()
    fut = dist.all_reduce(t, async_op=True).get_future()
    (value,) = fut.wait()
    assert value.device.type == "npu" and value.data_ptr() == ptr


def test_cpu_tensors_are_refused_like_hccl(single_group):
    with pytest.raises(RuntimeError, match="must be on the npu device"):
        dist.all_reduce(torch.ones(2))
    with pytest.raises(RuntimeError, match="must be on the npu device"):
        dist.all_gather([torch.zeros(2, device="npu")], torch.ones(2))


@pytest.mark.parametrize("backend", ["cpu:gloo,npu:hccl", "npu:hccl,cpu:gloo"])
def test_a_mixed_group_takes_cpu_and_npu_tensors(backend):
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        cpu, npu = torch.ones(2), torch.ones(2, device="npu")
        dist.all_reduce(cpu)
        dist.all_reduce(npu)
        assert cpu.tolist() == npu.cpu().tolist() == [1.0, 1.0] and npu.device.type == "npu"
        with pytest.raises(RuntimeError, match="must be on the npu device"):  # one call mixing both
            dist.all_gather([torch.zeros(2, device="npu")], cpu)
    finally:
        dist.destroy_process_group()


def test_gloo_refuses_npu_tensors_like_on_hardware():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="npu"):
            dist.all_reduce(torch.ones(2, device="npu"))
        cpu = torch.ones(2)
        dist.all_reduce(cpu)
        assert cpu.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_ddp_with_device_ids_in_one_process(single_group):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("npu")
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    ddp(torch.randn(3, 4, device="npu")).sum().backward()
    assert all(p.grad is not None and p.grad.device.type == "npu" for p in model.parameters())


# --- two processes under torchrun -------------------------------------------------------------------------------


def _pinned_memory() -> bool:
    """Whether the workers get pinned host memory: the C++ kernels load in a fresh process."""
    from ascendify.emulator.ops import cfast

    return os.environ.get(cfast.ENV, "1") != "0" and cfast.module(build_if_missing=False) is not None


PINNED = _pinned_memory()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("hccl")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore::FutureWarning")
    proc = run_again_on_teardown_abort(lambda: subprocess.run([  # gloo's abort at exit: see gloo_teardown
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        str(WORKER), str(out), str(STEPS),
    ], env=env, capture_output=True, text=True, timeout=240))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    params = [torch.load(out / f"params{r}.pt") for r in range(2)]
    viewed = [torch.load(out / f"params_bucket_view{r}.pt") for r in range(2)]
    found = [torch.load(out / f"params_find_unused{r}.pt") if (out / f"params_find_unused{r}.pt").exists()
             else None for r in range(2)]
    return reports, params, viewed, found


def test_two_rank_collectives(two_ranks):
    reports, *_ = two_ranks
    world = 2
    for rank, rep in enumerate(reports):
        assert (rep["rank"], rep["world"], rep["backend"], rep["is_hccl_available"]) == (rank, world, "hccl", True)
        assert rep["all_reduce"] == [float(sum(r + 1 for r in range(world)))] * 3
        assert rep["all_reduce_max"] == [float(world)] * 2
        assert rep["all_reduce_avg"] == [sum(r + 1 for r in range(world)) / world] * 2
        assert rep["all_gather"] == [[float(r)] * 2 for r in range(world)]
        assert rep["all_gather_into_tensor"] == [float(r) for r in range(world) for _ in range(2)]
        assert rep["broadcast"] == [11.0, 11.0]
        assert rep["reduce_scatter"] == [float(sum(10 * r + rank for r in range(world)))] * 2
        full = [sum(i + r for r in range(world)) for i in range(2 * world)]
        assert rep["reduce_scatter_tensor"] == [float(v) for v in full[2 * rank:2 * rank + 2]]
        assert rep["ring_received_from"] == [float((rank - 1) % world)]
        assert rep["all_gather_object"] == [{"rank": r} for r in range(world)]
        assert rep["broadcast_object_list"] == [{"from": 1}]
        assert rep["all_to_all_single"] == [float(rank + 10 * r) for r in range(world)]
        assert rep["scatter"] == [10.0 + rank]
        assert rep["subgroup_all_reduce"] == [float(sum(range(world)))] * 2
        assert rep["async_wait"] is True
        assert rep["async_in_place_view"] == [0.0, 3.0, 3.0, 0.0]
        assert "must be on the npu device" in rep["cpu_tensor_error"]
        assert rep["gloo_npu_error"] and "npu" in rep["gloo_npu_error"]
        assert rep["gloo_cpu"] == [float(world)] * 2
        # HCCL's argument rules, not gloo's: element counts, flat buffers, uneven parts; pinned host memory
        assert rep["all_gather_into_flat"] == [float(r) for r in range(world) for _ in range(6)]
        assert rep["all_gather_into_stacked"] == [[float(r)] * 3 for r in range(world)]
        full = [sum(i + r for r in range(world)) for i in range(6 * world)]
        assert rep["reduce_scatter_from_flat"] == [[float(v) for v in full[6 * rank + 2 * k:6 * rank + 2 * k + 2]]
                                                  for k in range(3)]
        assert rep["all_gather_bad_numel"].startswith(
            "output tensor size must be equal to world_size times input tensor size\nERR02001")
        assert rep["all_gather_uneven"] == [[float(r)] * (r + 1) for r in range(world)]
        assert rep["all_gather_reshaped"] == [[[float(r)] * 2] for r in range(world)]
        assert rep["reduce_scatter_uneven"] == [float(sum(r + 1 for r in range(world)))] * (rank + 1)
        if PINNED:
            assert rep["pinned"] == [True, True, False]
        else:
            assert "getPinnedMemoryAllocator" in rep["pinned"]
        assert rep["all_to_all_uneven"] == [[float(10 * j + rank)] * (j + rank + 1) for j in range(world)]
    assert reports[0]["reduce_dst0"] == [float(sum(r + 1 for r in range(world)))] * 2
    assert reports[1]["recv"] == [0.0, 1.0, 2.0]
    assert reports[0]["gather"] == [[float(r)] for r in range(world)]


def _load_worker():
    spec = importlib.util.spec_from_file_location("hccl_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_two_rank_ddp_matches_single_process_reference(two_ranks):
    reports, params, *_ = two_ranks
    for rep in reports:
        assert rep["param_devices"] == ["npu"] and rep["grad_devices"] == ["npu"]
    for k in params[0]:
        assert torch.equal(params[0][k], params[1][k]), f"ranks disagree on {k}"

    worker = _load_worker()
    model = worker.make_model()  # same seed, plain CPU, the whole global batch at once
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in worker.make_data(STEPS):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    reference = model.state_dict()
    initial = worker.make_model().state_dict()
    for k, v in reference.items():
        assert not torch.equal(v, initial[k]), f"{k} did not train"
        torch.testing.assert_close(params[0][k], v, rtol=1e-5, atol=1e-6)



def test_two_rank_ddp_with_gradients_as_bucket_views_is_the_same_training(two_ranks):
    """Small buckets (several allreduces a step) and grads viewing them: bit-identical to the default DDP run."""
    _, params, viewed, _ = two_ranks
    for rank in range(2):
        for k in params[rank]:
            assert torch.equal(viewed[rank][k], params[rank][k]), (rank, k)


def test_a_second_wait_does_not_copy_a_reduce_scatter_again(single_group):
    """gloo's _reduce_scatter_base copies its result into the output in wait(): waited once only (else AVG's
    division, done after the first wait, was undone by any later wait, e.g. a recorder's then the user's)."""
    out, inp = torch.zeros(2, device="npu"), torch.ones(2, device="npu")
    work = dist.reduce_scatter_tensor(out, inp, async_op=True)
    work.get_future().wait()
    assert out.cpu().tolist() == [1.0, 1.0]
    out.fill_(7.0)
    work.wait()
    assert out.cpu().tolist() == [7.0, 7.0]


def test_two_rank_ddp_finding_unused_parameters_trains(two_ranks):
    """find_unused_parameters=True (the Trainer's default under DDP) copies its used-parameter map through pinned
    host memory in the first backward: it trains, and the used parameters end as in the default DDP run."""
    _, params, _, found = two_ranks
    if not PINNED:
        pytest.skip("pinned host memory needs the emulator's C++ kernels, not loaded here")
    for rank in range(2):
        for k in params[rank]:
            assert torch.equal(found[rank][k], params[rank][k]), (rank, k)


def test_groups_take_torch_npu_hccl_options_as_mindspeed_builds_them(single_group):
    """MindSpeed/Megatron: ``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options()`` with a ``hccl_config``
    (a copy on read: updated by assignment, as torch_npu's binding allows), passed as ``pg_options``."""
    import torch_npu
    from torch_npu.utils.collect_env import get_cann_version  # noqa: F401  (imported at import time by MindSpeed)

    options_cls = torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options
    assert hasattr(options_cls, "hccl_config")
    options = options_cls()
    config = options.hccl_config
    config.update({"group_name": "dp"})
    assert options.hccl_config == {}  # no in-place update
    options.hccl_config = config
    assert options.hccl_config == {"group_name": "dp"}
    with pytest.raises(TypeError):
        options.hccl_config = ["group_name"]
    group = dist.new_group(ranks=[0], backend="hccl", pg_options=options)
    t = torch.ones(2, device="npu")
    dist.all_reduce(t, group=group)
    assert t.cpu().tolist() == [1.0, 1.0]


def test_gather_and_scatter_check_sizes_as_process_group_hccl(single_group):
    """HCCL's gather and scatter compare shapes (c10d's assertTypeAndSizesMatch), with ProcessGroupHCCL's name."""
    with pytest.raises(ValueError, match=r"ProcessGroupHCCL::gather: invalid tensor size at index 0 "
                                         r"\(expected \(2, 3\), got \(6,\)\)"):
        dist.gather(torch.ones(2, 3, device="npu"), [torch.empty(6, device="npu")], dst=0)
    with pytest.raises(ValueError, match="ProcessGroupHCCL::scatter: invalid tensor size at index 0"):
        dist.scatter(torch.empty(6, device="npu"), [torch.ones(2, 3, device="npu")], src=0)
