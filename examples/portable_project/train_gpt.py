"""Train a small GPT on a synthetic token stream on any device: bf16 autocast (or fp16 + GradScaler), fused
AdamW, gradient clipping, DistributedDataParallel, device memory statistics and synchronized step timing.

Device-agnostic port of ``cuda_project/train_gpt.py``: runs unchanged on CUDA, Ascend NPU, XPU, MPS and CPU.

One device:   python train_gpt.py --steps 2000 [--device cpu]
Several:      torchrun --nproc_per_node 8 train_gpt.py --steps 2000
Tiny run:     python train_gpt.py --steps 4 --batch-size 2 --seq-len 16 --vocab-size 64 --d-model 32 \
                  --n-layers 2 --n-heads 2 --precision fp32

The last line printed is a JSON summary ``{"final_loss", "param_checksum", "steps"}`` (also written to
``--out-json``).
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.parallel import DistributedDataParallel as DDP

from data import make_token_stream
from models import GPT
from utils import (default_device_type, device_name, emit_summary, memory_allocated_mib, param_checksum,
                   reset_peak_memory, set_seed, synchronize)

PTDTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="default: the accelerator, else cpu")
    p.add_argument("--backend", default=None, help="default: the device's backend (nccl, hccl, gloo, ...)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=32, help="per-GPU micro batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro batches per optimizer step")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-layers", type=int, default=6)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--min-lr", type=float, default=6e-5)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--precision", choices=sorted(PTDTYPE), default="bf16")
    p.add_argument("--attn-backend", choices=["auto", "flash", "math"], default="auto",
                   help="which scaled-dot-product-attention kernels may run")
    p.add_argument("--flash-attn", action="store_true", help="use the fused attention of csrc_ext")
    p.add_argument("--fused-gelu", action="store_true", help="use the bias+GELU op of csrc_ext")
    p.add_argument("--no-fused-adamw", dest="fused_adamw", action="store_false")
    p.add_argument("--dataset-tokens", type=int, default=1 << 16)
    p.add_argument("--init-from", default=None, help="load model weights from this checkpoint")
    p.add_argument("--save-checkpoint", default=None, help="write model/optimizer here at the end")
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out-json", default=None)
    return p.parse_args(argv)


def get_lr(step, args):
    """Linear warmup then cosine decay to ``min_lr``."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    ratio = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio))) * (args.lr - args.min_lr)


def attention_context(name):
    if name == "flash":
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    if name == "math":
        return sdpa_kernel(SDPBackend.MATH)
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def main(argv=None):
    args = parse_args(argv)

    device_type = torch.device(args.device or default_device_type()).type
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        local_rank = int(os.environ["LOCAL_RANK"])
        if device_type == "cpu":
            device = torch.device("cpu")
        else:
            device = torch.device(device_type, local_rank)
            torch.accelerator.set_device_index(local_rank)
        dist.init_process_group(backend=args.backend or dist.get_default_backend_for_device(device))
        rank = dist.get_rank()
        world_size = dist.get_world_size()
    else:
        rank, local_rank, world_size = 0, 0, 1
        device = torch.device(args.device or device_type)
    master = rank == 0

    set_seed(args.seed)  # torch.manual_seed also seeds every accelerator
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    if master:
        n_visible = torch.accelerator.device_count() if device.type != "cpu" else 0
        print(f"{n_visible} {device.type} devices visible; training on {device_name(device)}", flush=True)

    ptdtype = PTDTYPE[args.precision]
    if args.precision == "fp32":
        ctx = nullcontext()
    else:
        ctx = torch.autocast(device_type=device.type, dtype=ptdtype)
    # fp16 needs loss scaling; bf16 and fp32 do not
    scaler = torch.amp.GradScaler(device.type, enabled=(args.precision == "fp16"))

    # ---- data --------------------------------------------------------------------------------------------
    data = make_token_stream(args.dataset_tokens, args.vocab_size, seed=args.seed)
    batch_gen = torch.Generator().manual_seed(args.seed + rank)

    def get_batch():
        ix = torch.randint(len(data) - args.seq_len - 1, (args.batch_size,), generator=batch_gen)
        x = torch.stack([data[i : i + args.seq_len] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + args.seq_len] for i in ix])
        if device.type != "cpu":
            # pin the host arrays so the copies to the device are asynchronous
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        return x, y

    # ---- model -------------------------------------------------------------------------------------------
    attn_fn = act = None
    if args.flash_attn:
        from csrc_ext.flash_attention import flash_attention

        attn_fn = flash_attention
    if args.fused_gelu:
        from csrc_ext.fused_ops import fused_bias_gelu

        act = fused_bias_gelu
    model = GPT(args.vocab_size, args.seq_len, args.d_model, args.n_layers, args.n_heads, attn_fn, act)
    if args.init_from:
        ckpt = torch.load(args.init_from, map_location="cpu")  # the model is still on the host here
        model.load_state_dict(ckpt["model"])
    model.to(device)
    if master:
        print(f"model: {model.num_params() / 1e6:.2f}M parameters", flush=True)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
    use_fused = args.fused_adamw and fused_available
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=use_fused)
    if master:
        print(f"using fused AdamW: {use_fused}", flush=True)

    if ddp:
        if device.type == "cpu":
            model = DDP(model)
        else:
            model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    raw_model = model.module if ddp else model

    # ---- train -------------------------------------------------------------------------------------------
    reset_peak_memory(device)
    tokens_per_step = args.batch_size * args.seq_len * args.grad_accum * world_size
    x, y = get_batch()
    loss_value = float("nan")
    with attention_context(args.attn_backend):
        for step in range(args.steps):
            lr = get_lr(step, args)
            for group in optimizer.param_groups:
                group["lr"] = lr

            synchronize(device)
            t0 = time.perf_counter()
            for micro in range(args.grad_accum):
                if ddp:  # all-reduce gradients on the last micro batch only
                    model.require_backward_grad_sync = micro == args.grad_accum - 1
                with ctx:
                    _, loss = model(x, y)
                    loss = loss / args.grad_accum
                x, y = get_batch()  # prefetch the next batch while the GPU works
                scaler.scale(loss).backward()
            if args.grad_clip > 0.0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            synchronize(device)
            dt = time.perf_counter() - t0

            loss_t = loss.detach() * args.grad_accum
            if ddp:
                loss_t = loss_t.clone()  # every backend reduces tensors of its own device in place
                dist.all_reduce(loss_t)
                loss_t /= world_size
            loss_value = loss_t.item()
            if master and (step % args.log_interval == 0 or step == args.steps - 1):
                mem, peak = memory_allocated_mib(device)
                print(f"step {step:5d} | loss {loss_value:.4f} | lr {lr:.2e} | {dt * 1000:.1f} ms | "
                      f"{tokens_per_step / dt:,.0f} tok/s | mem {mem:.1f} MiB (peak {peak:.1f})", flush=True)

    if master and args.save_checkpoint:
        torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "step": args.steps},
                   args.save_checkpoint)
    summary = {"final_loss": loss_value, "param_checksum": param_checksum(raw_model), "steps": args.steps}
    emit_summary(summary, args.out_json, rank)
    if ddp:
        dist.barrier()  # no rank tears the group down while a peer still talks to it
        dist.destroy_process_group()
    return summary


if __name__ == "__main__":
    main()
