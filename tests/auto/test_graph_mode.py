"""Issue 19 (graph mode) under ``ascendify run``: the objects device queries hand back are complete for
what inductor, Dynamo and profilers read, and a compiled CUDA trainer gives the plain-CPU compiled losses."""

from __future__ import annotations

import math
import os

import pytest
import torch
from auto_support import PYTHON, SCRIPTS, ascendify_run, last_json, run_cmd

from ascendify.auto.redirects import cpu_cuda

# fields of CUDA's _CudaDeviceProperties (torch 2.x) plus ROCm's gcnArchName, as inductor/dynamo read them
CUDA_FIELDS = (
    "name", "major", "minor", "total_memory", "multi_processor_count", "is_integrated",
    "is_multi_gpu_board", "max_threads_per_multi_processor", "max_threads_per_block", "warp_size",
    "regs_per_multiprocessor", "shared_memory_per_block", "shared_memory_per_block_optin",
    "shared_memory_per_multiprocessor", "L2_cache_size", "gcnArchName", "uuid",
    "pci_bus_id", "pci_device_id", "pci_domain_id",
)


def test_cpu_device_properties_have_every_cuda_field(auto_cpu):
    p = torch.cuda.get_device_properties(0)
    missing = [f for f in CUDA_FIELDS if not hasattr(p, f)]
    assert not missing
    assert p.gcnArchName == p.name and p.type == "cpu"
    assert p.total_memory > 0 and p.multi_processor_count >= 1
    assert (p.major, p.minor) == torch.cuda.get_device_capability(0) == (0, 0)
    assert "name=" in repr(p)


def test_device_properties_reject_unknown_fields():
    with pytest.raises(TypeError):
        cpu_cuda.DeviceProperties(nonsense=1)


def test_cpu_streams_and_events_carry_the_fields_profilers_read(auto_cpu):
    s = torch.cuda.current_stream()
    assert s.device == torch.device("cpu") and s.device_index == 0
    assert s.device_type == torch.Stream(device="cpu").device_type
    assert isinstance(s.stream_id, int) and isinstance(s.cuda_stream, int)
    e = torch.cuda.Event(enable_timing=True)
    assert e.enable_timing and not e.blocking and not e.interprocess
    s.record_event(e)
    assert e.query()


def test_compiled_cuda_trainer_gives_plain_cpu_compiled_losses_under_run_and_migrated(tmp_path):
    script = SCRIPTS / "compiled_gpt.py"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    ref = run_cmd([PYTHON, str(script)], env={**env, "COMPILED_GPT_DEVICE": "cpu"}, timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]
    got = ascendify_run("--to", "cpu", str(script), env=env, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:] + got.stdout[-3000:]
    want, have = last_json(ref.stdout), last_json(got.stdout)
    assert len(have["losses"]) == len(want["losses"]) == 3
    for a, b in zip(have["losses"], want["losses"], strict=True):
        assert math.isclose(a, b, rel_tol=1e-4)
    assert have["device"] == "cpu" and have["props"]
    assert os.path.isdir(tmp_path / "inductor")  # it really went through inductor
    # the emulated npu: Dynamo + AOTAutograd trace (SDPA included), CPU inductor compiles on the npu memory
    npu = ascendify_run("--to", "npu", str(script), env=env, timeout=600)
    assert npu.returncode == 0, npu.stderr[-3000:] + npu.stdout[-3000:]
    have = last_json(npu.stdout)
    assert have["device"] == "npu:0"
    for a, b in zip(have["losses"], want["losses"], strict=True):
        assert math.isclose(a, b, rel_tol=1e-4)
    assert "aot_eager" not in npu.stderr  # inductor itself compiled it, on the CPU aliases
    # migrated (ascendify migrate --to npu), then on the emulated npu (ascendify emulate): the same losses
    mig = run_cmd([PYTHON, "-m", "ascendify", "migrate", str(script), "-o", str(tmp_path / "npu"), "--to", "npu"])
    assert mig.returncode in (0, 1), mig.stderr[-3000:]
    # the script's device comes from os.environ.get("COMPILED_GPT_DEVICE", "cuda"): migrate rewrites that default
    assert 'os.environ.get("COMPILED_GPT_DEVICE", "npu")' in (tmp_path / "npu" / script.name).read_text()
    emu = run_cmd([PYTHON, "-m", "ascendify", "emulate", "--", PYTHON, str(tmp_path / "npu" / script.name)],
                  env={**env, "COMPILED_GPT_DEVICE": None}, timeout=600)
    assert emu.returncode == 0, emu.stderr[-3000:] + emu.stdout[-3000:]
    have = last_json(emu.stdout)
    assert have["device"] == "npu:0" and have["props"] == "Ascend910B3"  # torch.npu.get_device_properties
    for a, b in zip(have["losses"], want["losses"], strict=True):
        assert math.isclose(a, b, rel_tol=1e-4)
    assert "graphs compiled" in emu.stderr  # the emulator's summary counts them


def test_cudagraphs_backend_and_reduce_overhead_run_without_graphs_and_are_noted(auto_cpu):
    m = torch.nn.Linear(3, 2).cuda()
    x = torch.randn(4, 3).cuda()
    c = torch.compile(m, backend="cudagraphs")
    assert torch.allclose(c(x), m(x))
    torch.compile(m, mode="reduce-overhead", fullgraph=False)
    torch.compile(m, options={"triton.cudagraphs": True, "epilogue_fusion": True})
    noted = auto_cpu.rec.no_effect
    assert "aot_eager" in noted["torch.compile(backend='cudagraphs')"][2]
    assert "default mode" in noted["torch.compile(mode='reduce-overhead')"][2]
    assert "torch.compile(options={'triton.cudagraphs'})" in noted


def test_compile_is_restored_after_run():
    import ascendify.auto

    before = torch.compile
    ascendify.auto.enable("cpu")
    try:
        assert torch.compile is not before
    finally:
        ascendify.auto.disable()
    assert torch.compile is before


NPU_CHECK = """
import json, torch, ascendify.auto
from test_graph_mode import CUDA_FIELDS
ascendify.auto.enable("npu")
p, own = torch.cuda.get_device_properties(0), torch.npu.get_device_properties(0)
st = torch.cuda.current_stream()
print(json.dumps({"missing": [f for f in CUDA_FIELDS if not hasattr(p, f)], "type": p.type,
                  "same_name": p.name == own.name, "cube": p.cube_core_num == own.cube_core_num,
                  "mp": p.multi_processor_count == own.vector_core_num, "mem": p.total_memory > 0,
                  "cap": list(torch.cuda.get_device_capability(0)), "stream": st.device.type,
                  "stream_id": isinstance(st.stream_id, int)}))
"""


def test_npu_device_queries_answer_complete_objects():
    # its own process: the emulated npu must be enabled before any backward() of the process
    r = run_cmd([PYTHON, "-c", NPU_CHECK],
                env={"PYTHONPATH": os.pathsep.join([str(SCRIPTS.parent), os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stderr[-3000:]
    got = last_json(r.stdout)
    assert got == {"missing": [], "type": "npu", "same_name": True, "cube": True, "mp": True, "mem": True,
                   "cap": [0, 0], "stream": "npu", "stream_id": True}
