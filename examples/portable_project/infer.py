"""Measure inference latency of the ResNet-style classifier on any device.

Device-agnostic port of ``cuda_project/infer.py``: device events for timing (host clock on the CPU), a side
stream to overlap host-to-device copies with compute, ``record_function`` ranges (they show in any profiler
trace), and optionally the PyTorch profiler with every activity the build supports.

    python infer.py --batch-size 64 --iters 100 [--device cpu] [--checkpoint ckpt.pt] [--half] [--profile]
Tiny run:
    python infer.py --batch-size 4 --image-size 32 --num-classes 10 --iters 3 --warmup 1

The last line printed is a JSON summary ``{"output_checksum", "iters", "latency_ms"}`` (also written to
``--out-json``). ``output_checksum`` is the float64 sum of all logits of the last batch.
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import nullcontext

import torch
from torch.profiler import profile, record_function, supported_activities

from data import SyntheticImageNet
from models import ResNetMini
from utils import default_device_type, emit_summary, memory_allocated_mib, set_seed, synchronize


class HostTimer:
    """Stands in for a device event on the CPU: ``record()`` reads the clock, ``elapsed_time`` is in ms."""

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: HostTimer) -> float:
        return (end.t - self.t) * 1000.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="default: the accelerator, else cpu")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--half", action="store_true", help="run the model in float16")
    p.add_argument("--checkpoint", default=None, help="weights from train_imagenet.py (e.g. ckpt.pt)")
    p.add_argument("--profile", action="store_true", help="profile a few iterations and print the top ops")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-json", default=None)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    set_seed(args.seed)
    device = torch.device(args.device or default_device_type())
    print(f"inference on {device}", flush=True)

    model = ResNetMini(num_classes=args.num_classes, width=args.width)
    if args.checkpoint and os.path.isfile(args.checkpoint):
        state = torch.load(args.checkpoint, map_location="cpu")  # the model is still on the host
        model.load_state_dict(state["model"])
        print(f"loaded weights from {args.checkpoint}", flush=True)
    model = model.to(device).eval()
    if args.half:
        model = model.half()

    on_device = device.type != "cpu"
    copy_stream = torch.Stream(device) if on_device else None
    start = torch.Event(device, enable_timing=True) if on_device else HostTimer()
    end = torch.Event(device, enable_timing=True) if on_device else HostTimer()

    data = SyntheticImageNet(args.batch_size * (args.iters + args.warmup), args.image_size,
                             args.num_classes, seed=args.seed)
    host_batches = []
    for b in range(args.iters + args.warmup):
        imgs = torch.stack([data[b * args.batch_size + j][0] for j in range(args.batch_size)])
        host_batches.append(imgs.pin_memory() if on_device else imgs)

    latencies = []
    output = None
    with torch.inference_mode():
        for it, host in enumerate(host_batches):
            # copy the batch on a side stream, then make the compute stream wait for it
            with copy_stream if on_device else nullcontext():
                x = host.to(device, non_blocking=True)
                if args.half:
                    x = x.half()
            if on_device:
                torch.accelerator.current_stream(device).wait_stream(copy_stream)
                x.record_stream(torch.accelerator.current_stream(device))  # x was allocated on the copy stream
            assert x.device.type == device.type, f"inputs must live on the {device.type} device"

            with record_function(f"iter{it}"):
                start.record()
                output = model(x)
                end.record()
            synchronize(device)
            if it >= args.warmup:
                latencies.append(start.elapsed_time(end))

    if args.profile:
        with profile(activities=sorted(supported_activities(), key=int), record_shapes=True) as prof:
            with torch.inference_mode():
                for host in host_batches[:3]:
                    x = host.to(device, non_blocking=True)
                    model(x.half() if args.half else x)
            synchronize(device)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))

    latencies.sort()
    mean_ms = sum(latencies) / max(1, len(latencies))
    p50 = latencies[len(latencies) // 2] if latencies else float("nan")
    print(f"latency: mean {mean_ms:.3f} ms, p50 {p50:.3f} ms over {len(latencies)} iterations "
          f"(batch {args.batch_size}, {args.batch_size / max(mean_ms, 1e-9) * 1000:.0f} img/s)", flush=True)
    print(f"max memory allocated: {memory_allocated_mib(device)[1]:.1f} MiB", flush=True)
    # float64 on the host: not every device has float64
    summary = {"output_checksum": float(output.cpu().double().sum()), "iters": len(latencies),
               "latency_ms": mean_ms}
    emit_summary(summary, args.out_json)
    return summary


if __name__ == "__main__":
    main()
