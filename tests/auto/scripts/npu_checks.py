"""In-process checks of redirection to the emulated NPU (run in a subprocess: the emulator renames PrivateUse1
once per process). Prints one JSON object of observations; the test asserts on them."""

import json
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
os.environ.pop("ASCEND_RT_VISIBLE_DEVICES", None)

import torch  # noqa: E402

import ascendify.auto  # noqa: E402
from ascendify.auto import UnsupportedOnTarget  # noqa: E402

s = ascendify.auto.enable("npu")
obs = {"target": s.target.name, "ascend_env": os.environ.get("ASCEND_RT_VISIBLE_DEVICES")}
d = torch.device("cuda", 0)
obs["device"] = str(d)
obs["isinstance"] = isinstance(d, torch.device)
x = torch.ones(2, 2).cuda()
obs["cuda()"] = str(x.device)
obs["to(0)"] = str(torch.zeros(1).to(0).device)
obs["factory"] = str(torch.zeros(1, device="cuda:0").device)
obs["is_cuda"] = x.is_cuda
obs["available"] = torch.cuda.is_available()
obs["count_positive"] = torch.cuda.device_count() >= 1
torch.backends.cuda.matmul.allow_tf32 = True
obs["hf32_matmul"] = bool(torch.npu.matmul.allow_hf32)
obs["tf32_read"] = bool(torch.backends.cuda.matmul.allow_tf32)
torch.backends.cuda.matmul.allow_tf32 = False
obs["hf32_matmul_off"] = bool(torch.npu.matmul.allow_hf32)
torch.backends.cudnn.allow_tf32 = True
obs["hf32_conv"] = bool(torch.npu.conv.allow_hf32)
dt = torch.cuda.DoubleTensor(2)
obs["double"] = [str(dt.dtype), dt.device.type]
with torch.autocast("cuda", dtype=torch.bfloat16):
    obs["autocast"] = str((x @ x).dtype)
obs["scaler"] = torch.amp.GradScaler()._device
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
obs["mem"] = torch.cuda.max_memory_allocated() > 0
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
end.record()
end.synchronize()
obs["event_ms"] = start.elapsed_time(end) >= 0
try:
    torch.cuda.get_arch_list()
    obs["arch_list"] = "no error"
except UnsupportedOnTarget as e:
    obs["arch_list"] = str(e)
torch.cuda.nvtx.range_push("x")
torch.cuda.nvtx.range_pop()
from ascendify.auto.redirects.distributed import map_backend  # noqa: E402

obs["backend"] = map_backend("nccl", s.target, s.rec, "x")
rep = ascendify.auto.disable()
obs["after_device"] = torch.device("cuda").type
obs["after_env"] = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
obs["redirected"] = sorted(r["api"] for r in rep["redirected"])
obs["unsupported"] = sorted(r["api"] for r in rep["unsupported"])
print(json.dumps(obs))
