"""A small training script written the torch_npu way (device, AMP, GradScaler, events, memory statistics,
checkpoint save and reload). Run by the tests under `ascendify emulate`; prints one JSON line."""

import argparse
import json
import os

import torch
import torch_npu  # noqa: F401  (the emulator's shim under `ascendify emulate`)
from torch_npu.npu import amp


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--ckpt", required=True)
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.npu.set_device(local_rank)
    device = torch.device(f"npu:{local_rank}")
    torch.npu.manual_seed(0)
    torch.manual_seed(0)
    torch.npu.config.allow_internal_format = False
    torch.npu.set_compile_mode(jit_compile=False)

    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = amp.GradScaler()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    torch.npu.reset_peak_memory_stats()
    start.record()
    losses = []
    for _ in range(args.steps):
        x = torch.randn(4, 3, 8, 8).npu(non_blocking=True)
        y = torch.randint(0, 4, (4,)).to(device)
        with amp.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    end.record()
    torch.npu.synchronize()

    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "scaler": scaler.state_dict()}, args.ckpt)
    ckpt = torch.load(args.ckpt, map_location=f"npu:{local_rank}")
    fresh = Net().npu()
    fresh.load_state_dict(ckpt["model"])
    same = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(model.state_dict().values(),
                                                          fresh.state_dict().values(), strict=True))
    print(json.dumps({
        "device": str(next(model.parameters()).device),
        "losses": losses,
        "elapsed_ms": start.elapsed_time(end),
        "peak_bytes": torch.npu.max_memory_allocated(),
        "reloaded_same": same,
        "ckpt_device": str(next(iter(ckpt["model"].values())).device),
        "is_available": torch.npu.is_available(),
    }))


if __name__ == "__main__":
    main()
