"""Measure inference latency of the ResNet-style classifier on an Ascend NPU.

Hand port of ``cuda_project/infer.py`` to torch_npu: NPU events for timing, a side stream to overlap
host-to-device copies with compute, ``record_function`` ranges instead of NVTX (torch_npu has no NVTX; the
ranges show in torch_npu.profiler traces), and optionally torch_npu's profiler with NPU activity.

    python infer.py --batch-size 64 --iters 100 [--checkpoint ckpt_npu.pt] [--half] [--profile DIR]
Tiny run:
    python infer.py --batch-size 4 --image-size 32 --num-classes 10 --iters 3 --warmup 1

The last line printed is a JSON summary ``{"output_checksum", "iters", "latency_ms"}`` (also written to
``--out-json``). ``output_checksum`` is the float64 sum of all logits of the last batch.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch_npu
from torch.profiler import record_function

from data import SyntheticImageNet
from models import ResNetMini
from utils import emit_summary, set_seed


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--half", action="store_true", help="run the model in float16")
    p.add_argument("--checkpoint", default=None, help="weights from train_imagenet.py (e.g. ckpt_npu.pt)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="profile a few iterations with torch_npu.profiler and write the trace to DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-json", default=None)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    set_seed(args.seed)
    device = torch.device("npu" if torch.npu.is_available() else "cpu")
    print(f"inference on {device}", flush=True)

    model = ResNetMini(num_classes=args.num_classes, width=args.width)
    if args.checkpoint and os.path.isfile(args.checkpoint):
        state = torch.load(args.checkpoint, map_location="npu:0")
        model.load_state_dict(state["model"])
        print(f"loaded weights from {args.checkpoint}", flush=True)
    model = model.to(device).eval()
    if args.half:
        model = model.half()

    copy_stream = torch.npu.Stream()
    start = torch.npu.Event(enable_timing=True)
    end = torch.npu.Event(enable_timing=True)

    data = SyntheticImageNet(args.batch_size * (args.iters + args.warmup), args.image_size,
                             args.num_classes, seed=args.seed)
    host_batches = []
    for b in range(args.iters + args.warmup):
        imgs = torch.stack([data[b * args.batch_size + j][0] for j in range(args.batch_size)])
        host_batches.append(imgs.pin_memory())

    latencies = []
    output = None
    with torch.inference_mode():
        for it, host in enumerate(host_batches):
            # copy the batch on a side stream, then make the compute stream wait for it
            with torch.npu.stream(copy_stream):
                x = host.to(device, non_blocking=True)
                if args.half:
                    x = x.half()
            torch.npu.current_stream().wait_stream(copy_stream)
            x.record_stream(torch.npu.current_stream())  # x was allocated on the copy stream
            assert x.is_npu, "inputs must live on the NPU"

            with record_function(f"iter{it}"):
                start.record()
                output = model(x)
                end.record()
            torch.npu.synchronize()
            if it >= args.warmup:
                latencies.append(start.elapsed_time(end))

    if args.profile:
        activities = [torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU]
        with torch_npu.profiler.profile(activities=activities, record_shapes=True,
                                        on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(args.profile)):
            with torch.inference_mode():
                for host in host_batches[:3]:
                    x = host.npu(non_blocking=True)
                    model(x.half() if args.half else x)
            torch.npu.synchronize()
        print(f"profiler trace written to {args.profile} (open with MindStudio Insight or TensorBoard)")

    latencies.sort()
    mean_ms = sum(latencies) / max(1, len(latencies))
    p50 = latencies[len(latencies) // 2] if latencies else float("nan")
    print(f"latency: mean {mean_ms:.3f} ms, p50 {p50:.3f} ms over {len(latencies)} iterations "
          f"(batch {args.batch_size}, {args.batch_size / max(mean_ms, 1e-9) * 1000:.0f} img/s)", flush=True)
    print(f"max memory allocated: {torch.npu.max_memory_allocated() / 2**20:.1f} MiB", flush=True)
    # float64 on the host: NPU float64 support is partial
    summary = {"output_checksum": float(output.cpu().double().sum()), "iters": len(latencies),
               "latency_ms": mean_ms}
    emit_summary(summary, args.out_json)
    return summary


if __name__ == "__main__":
    main()
