"""Run-time redirection of CUDA APIs to the CPU, in process (each test enables and fully disables)."""

from __future__ import annotations

import os
import pickle
import sys

import pytest
import torch
import torch.nn as nn

from ascendify.auto.record import UnsupportedOnTarget

# ---------------------------------------------------------------------------------------------- devices


def test_torch_device_cuda_is_redirected_and_still_a_torch_device(auto_cpu):
    d = torch.device("cuda")
    assert d == torch.device("cpu") and d.type == "cpu"
    assert torch.device("cuda", 1).type == "cpu"
    assert torch.device("cuda:0").type == "cpu"
    assert torch.device(type="cuda", index=0).type == "cpu"
    assert isinstance(d, torch.device)
    assert issubclass(type(d), torch.device)
    assert torch.device("cpu") == torch.device("cpu")
    assert "torch.device" in auto_cpu.rec.redirected


def test_pickled_devices_load_without_ascendify(auto_cpu, tmp_path):
    blob = pickle.dumps({"dev": torch.device("cuda", 0), "other": torch.device("meta")})
    path = tmp_path / "cfg.pt"
    torch.save({"dev": torch.device("cuda")}, path)
    import ascendify.auto

    ascendify.auto.disable()
    back = pickle.loads(blob)
    assert back["dev"] == torch.device("cpu") and type(back["dev"]) is torch.device
    assert back["other"] == torch.device("meta")
    assert torch.load(path)["dev"] == torch.device("cpu")


def test_factories_and_tensor_methods(auto_cpu):
    x = torch.zeros(2, 3, device="cuda")
    assert x.device.type == "cpu"
    assert torch.ones(2, device=torch.device("cuda", 0)).device.type == "cpu"
    assert torch.arange(3, device=0).device.type == "cpu"  # an int device is a CUDA index
    assert torch.randn(2, device="cuda:1").device.type == "cpu"
    assert x.to("cuda").device.type == "cpu"
    assert x.to("cuda:0", torch.float64).dtype == torch.float64
    assert x.to(0).device.type == "cpu"
    assert x.to(device="cuda", dtype=torch.float16).dtype == torch.float16
    assert x.to(torch.float64).dtype == torch.float64  # dtypes pass through
    assert x.cuda().device.type == "cpu" and x.cuda(0).device.type == "cpu"
    assert x.new_zeros(4, device="cuda").device.type == "cpu"
    assert x.new_tensor([1.0], device="cuda:0").device.type == "cpu"
    rec = auto_cpu.rec.redirected
    for api in ("torch.zeros", "torch.device", "torch.arange", "Tensor.to", "Tensor.cuda", "Tensor.new_zeros"):
        assert api in rec, api


def test_modules_cuda_and_to(auto_cpu):
    m = nn.Linear(2, 2)
    assert m.cuda() is m and m.cuda(0) is m
    assert m.to("cuda:0") is m and m.to(0) is m
    assert next(m.parameters()).device.type == "cpu"
    assert "Module.cuda" in auto_cpu.rec.redirected


def test_is_cuda_answers_for_user_code_and_tells_libraries_the_truth(auto_cpu):
    x = torch.zeros(1)
    assert x.is_cuda is True  # user code: "is it on the target accelerator?"
    lib_file = os.path.join(os.path.dirname(torch.__file__), "_ascendify_fake_lib.py")
    ns: dict = {}
    exec(compile("def probe(t):\n    return t.is_cuda\n", lib_file, "exec"), ns)
    assert ns["probe"](x) is False


# ---------------------------------------------------------------------------------------------- torch.cuda


def test_is_available_per_caller(auto_cpu):
    assert torch.cuda.is_available() is True
    assert torch.cuda.device_count() >= 1
    lib_file = os.path.join(os.path.dirname(torch.__file__), "_ascendify_fake_lib.py")
    ns: dict = {}
    exec(compile("import torch\ndef probe():\n    return torch.cuda.is_available(), torch.cuda.device_count()\n",
                 lib_file, "exec"), ns)
    assert ns["probe"]() == (False, 0)


def test_cuda_module_functions_on_cpu(auto_cpu):
    torch.cuda.set_device(0)
    assert torch.cuda.current_device() == 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() == 0
    free, total = torch.cuda.mem_get_info()
    assert total > 0 and 0 <= free <= total
    torch.cuda.manual_seed(123)
    a = torch.rand(3)
    torch.cuda.manual_seed_all(123)
    assert torch.equal(a, torch.rand(3))  # the CUDA generator is the CPU generator here
    state = torch.cuda.get_rng_state()
    b = torch.rand(2)
    torch.cuda.set_rng_state(state)
    assert torch.equal(b, torch.rand(2))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    end.record()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    with torch.cuda.device(0), torch.cuda.stream(torch.cuda.Stream()):
        pass
    assert "torch.cuda.memory_allocated" in auto_cpu.rec.no_effect
    assert "torch.cuda.synchronize" in auto_cpu.rec.redirected


def test_from_import_of_submodule_functions_is_covered(auto_cpu):
    from torch.cuda.memory import memory_allocated
    from torch.cuda.random import manual_seed

    assert memory_allocated() == 0
    manual_seed(0)


def test_unsupported_name_raises_naming_api_and_call_site(auto_cpu):
    with pytest.raises(UnsupportedOnTarget) as e:
        torch.cuda.get_arch_list()
    msg = str(e.value)
    assert "torch.cuda.get_arch_list" in msg and "test_redirects_cpu.py:" in msg
    assert "torch.cuda.get_arch_list" in auto_cpu.rec.unsupported


def test_nvtx_is_skipped_but_recorded_and_strict_raises(auto_cpu):
    torch.cuda.nvtx.range_push("step")
    torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("block"):
        pass
    assert auto_cpu.rec.unsupported["torch.cuda.nvtx.range_push"][0] == 1


def test_strict_raises_for_annotations(auto_cpu_strict):
    with pytest.raises(UnsupportedOnTarget, match="nvtx"):
        torch.cuda.nvtx.range_push("x")


def test_legacy_tensor_types_keep_their_dtype(auto_cpu):
    d = torch.cuda.DoubleTensor(2, 3)
    assert d.dtype == torch.float64 and d.shape == (2, 3)
    f = torch.cuda.FloatTensor([1.0, 2.0])
    assert f.dtype == torch.float32 and f.tolist() == [1.0, 2.0]
    assert isinstance(d, torch.cuda.DoubleTensor) and not isinstance(f, torch.cuda.DoubleTensor)
    assert torch.cuda.LongTensor(3).dtype == torch.int64
    assert f.type(torch.cuda.DoubleTensor).dtype == torch.float64
    assert f.type("torch.cuda.HalfTensor").dtype == torch.float16
    assert f.type() == "torch.FloatTensor"


def test_jit_script_is_not_disabled(auto_cpu):
    assert not hasattr(torch.jit.script, "_ascendify_unsupported")

    @torch.jit.script
    def f(x: torch.Tensor, d: torch.device) -> torch.Tensor:
        return x.to(d) * 2

    assert isinstance(f, torch.jit.ScriptFunction)
    assert f(torch.ones(2), torch.device("cuda")).tolist() == [2.0, 2.0]


def test_compile_eager_backend_still_works(auto_cpu):
    def f(x):
        return torch.zeros(2, device="cuda") + x.cuda() * 2

    out = torch.compile(f, backend="eager")(torch.ones(2))
    assert out.tolist() == [2.0, 2.0]


# ---------------------------------------------------------------------------------------------- amp, load


def test_autocast_cuda_keeps_cuda_dtype_on_the_target(auto_cpu):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cuda"):
        assert (a @ b).dtype == torch.float16
        assert torch.is_autocast_enabled("cuda") and torch.is_autocast_enabled()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16
    with torch.cuda.amp.autocast():
        assert (a @ b).dtype == torch.float16
    with torch.autocast("cuda", enabled=False):
        assert (a @ b).dtype == torch.float32


def test_grad_scaler_defaults_to_the_target(auto_cpu):
    assert torch.amp.GradScaler()._device == "cpu"
    assert torch.amp.GradScaler("cuda")._device == "cpu"
    assert torch.cuda.amp.GradScaler()._device == "cpu"
    assert torch.amp.GradScaler("cuda").is_enabled()


def test_torch_load_file_names_with_cuda_are_untouched(auto_cpu, tmp_path):
    """The defect of transfer_to_npu: str.replace('cuda', 'npu') on every positional string."""
    (tmp_path / "ckpt_cuda.pt").write_bytes(b"")
    torch.save({"w": torch.arange(3)}, tmp_path / "ckpt_cuda.pt")
    assert not (tmp_path / "ckpt_npu.pt").exists()
    for ml in ("cuda", "cuda:0", torch.device("cuda"), {"cuda:0": "cuda:0"}, None):
        out = torch.load(str(tmp_path / "ckpt_cuda.pt"), map_location=ml)
        assert out["w"].tolist() == [0, 1, 2] and out["w"].device.type == "cpu"
    out = torch.load(tmp_path / "ckpt_cuda.pt", lambda storage, loc: storage.cuda(0))
    assert out["w"].device.type == "cpu"
    with open(tmp_path / "cuda_log.txt", "w") as f:  # non-device strings elsewhere also untouched
        f.write("cuda")
    assert (tmp_path / "cuda_log.txt").read_text() == "cuda"


# ---------------------------------------------------------------------------------------------- flags


def test_backend_flags_recorded_and_forwarded(auto_cpu):
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        assert torch.backends.cudnn.benchmark is True
        from torch.backends import cudnn

        cudnn.deterministic = False
        torch.backends.cuda.matmul.allow_tf32 = False
    finally:
        torch.backends.cudnn.benchmark = before
    ne = auto_cpu.rec.no_effect
    assert "torch.backends.cudnn.benchmark" in ne and "torch.backends.cudnn.deterministic" in ne
    assert "torch.backends.cuda.matmul.allow_tf32" in ne


def test_profiler_cuda_activity(auto_cpu):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        torch.ones(2).cuda().sum()
    assert p.key_averages() is not None
    assert "torch.profiler.ProfilerActivity.CUDA" in auto_cpu.rec.redirected


def test_nccl_backend_names(auto_cpu):
    import torch.distributed as dist

    from ascendify.auto.redirects.distributed import map_backend

    assert map_backend("nccl", auto_cpu.target, auto_cpu.rec, "x") == "gloo"
    assert map_backend("NCCL", auto_cpu.target, auto_cpu.rec, "x") == "gloo"
    assert map_backend(dist.Backend.NCCL, auto_cpu.target, auto_cpu.rec, "x") == "gloo"
    assert dist.is_nccl_available() is True  # "is the target's backend available?"


def test_distributed_single_process_ddp_with_cuda_device_ids(auto_cpu, tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
        model = DDP(nn.Linear(2, 2).cuda(), device_ids=[0], output_device=0)
        model(torch.ones(1, 2, device="cuda")).sum().backward()
        g = dist.new_group([0], backend="nccl")
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t, group=g)
        assert t.item() == 1.0
    finally:
        dist.destroy_process_group()
    assert "DistributedDataParallel(device_ids)" in auto_cpu.rec.redirected


def test_enable_twice_same_target_is_one_session(auto_cpu):
    import ascendify.auto

    assert ascendify.auto.enable("cpu") is auto_cpu
    assert ascendify.auto.is_enabled()
    rep = ascendify.auto.report()
    assert rep["target"]["device_type"] == "cpu" and rep["patched_attributes"] > 100


def test_import_of_ascendify_auto_in_a_library_does_not_enable():
    assert "ascendify.auto" in sys.modules
    import ascendify.auto

    assert not ascendify.auto.is_enabled()
    assert torch.cuda.is_available() is False


def test_device_factory_is_equal_to_the_real_type(auto_cpu):
    real = type(torch.zeros(1).device)
    assert torch.device == real and real in {torch.device} and torch.device in {real}
    assert {real: 1}[torch.device] == 1


def test_compile_with_device_constants(auto_cpu):
    def f(x):
        return x.to(torch.device("cuda")) + torch.ones(2, device=torch.device("cuda", 0))

    assert torch.compile(f, backend="eager")(torch.ones(2)).tolist() == [2.0, 2.0]


def test_lazy_modules_and_cuda(auto_cpu):
    m = nn.LazyLinear(3).cuda()
    assert m(torch.ones(2, 5, device="cuda")).shape == (2, 3)


def test_user_roots_make_installed_code_the_users(auto_cpu, tmp_path):
    from ascendify.program import frames as record

    lib_file = os.path.join(os.path.dirname(torch.__file__), "_ascendify_fake_pkg", "train.py")
    assert not record.is_user_file(lib_file)
    saved = list(record._USER_ROOTS)
    try:
        record.add_user_root(os.path.dirname(lib_file))
        assert record.is_user_file(lib_file)
        assert not record.is_user_file(os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py"))
    finally:
        record._USER_ROOTS[:] = saved
        record.LIBRARIES.cache.clear()
