"""Train a ResNet-style classifier on (synthetic) ImageNet with CUDA, AMP and DistributedDataParallel.

Single GPU:   python train_imagenet.py --epochs 90 --batch-size 256
Several GPUs: torchrun --nproc_per_node 8 train_imagenet.py --epochs 90 --batch-size 256
Tiny run:     python train_imagenet.py --epochs 1 --steps-per-epoch 3 --batch-size 4 --image-size 32 \
                  --num-classes 10 --workers 0

The last line printed is a JSON summary ``{"final_loss", "param_checksum", "steps"}`` (also written to
``--out-json``).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from data import SyntheticImageNet
from models import ResNetMini
from utils import AverageMeter, accuracy, emit_summary, param_checksum, set_seed

try:  # NVIDIA apex: fused multi-tensor Adam, noticeably faster on large models
    from apex.optimizers import FusedAdam

    HAVE_APEX = True
except ImportError:
    HAVE_APEX = False


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="device for single-process runs (cuda, cuda:1, ...)")
    p.add_argument("--backend", default="nccl", help="torch.distributed backend under torchrun")
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--steps-per-epoch", type=int, default=500, help="optimizer steps per epoch (per rank)")
    p.add_argument("--batch-size", type=int, default=256, help="per-GPU batch size")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--width", type=int, default=16, help="channels of the first stage")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-step", type=int, default=30, help="divide the learning rate by 10 every N epochs")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--amp", action="store_true", help="mixed precision (float16 autocast + GradScaler)")
    p.add_argument("--workers", type=int, default=4, help="DataLoader worker processes")
    p.add_argument("--checkpoint", default="ckpt_cuda.pt", help="checkpoint written after every epoch ('' for none)")
    p.add_argument("--resume", action="store_true", help="resume from --checkpoint if it exists")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-freq", type=int, default=10)
    p.add_argument("--out-json", default=None, help="also write the final JSON summary here")
    return p.parse_args(argv)


def setup_distributed(args):
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; one process per GPU."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=args.backend, init_method="env://")
        device = torch.device("cuda", local_rank)
    else:
        rank, local_rank = 0, 0
        device = torch.device(args.device)
        if device.index is not None:
            torch.cuda.set_device(device)
    return rank, local_rank, world_size, device


def build_optimizer(args, model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "adamw":
        if HAVE_APEX:
            return FusedAdam(groups, lr=args.lr, adam_w_mode=True)
        return torch.optim.AdamW(groups, lr=args.lr)
    return torch.optim.SGD(groups, lr=args.lr, momentum=args.momentum, nesterov=True)


def save_checkpoint(path, model, optimizer, scheduler, scaler, epoch, global_step):
    state = {
        "epoch": epoch,
        "global_step": global_step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
    }
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    rank, local_rank, world_size, device = setup_distributed(args)
    distributed = world_size > 1
    set_seed(args.seed)

    torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick the fastest algorithms
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    if rank == 0:
        print(f"=> running on cuda devices: {torch.cuda.get_device_name(device)} x {world_size}", flush=True)
        print(f"=> CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}", flush=True)

    # ---- data --------------------------------------------------------------------------------------------
    n_train = args.steps_per_epoch * args.batch_size * world_size
    train_set = SyntheticImageNet(n_train, args.image_size, args.num_classes, seed=args.seed)
    val_set = SyntheticImageNet(2 * args.batch_size * world_size, args.image_size, args.num_classes,
                                seed=args.seed + 1)
    loader_gen = torch.Generator()
    if distributed:
        train_sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed, drop_last=True)
        val_sampler = DistributedSampler(val_set, shuffle=False, drop_last=True)
    else:
        train_sampler = None
        val_sampler = None
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=(train_sampler is None),
                              sampler=train_sampler, num_workers=args.workers, pin_memory=True,
                              drop_last=True, generator=loader_gen, persistent_workers=args.workers > 0)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False, sampler=val_sampler,
                            num_workers=args.workers, pin_memory=True)

    # ---- model -------------------------------------------------------------------------------------------
    model = ResNetMini(num_classes=args.num_classes, width=args.width)
    model.cuda()
    criterion = nn.CrossEntropyLoss().cuda()
    optimizer = build_optimizer(args, model)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step, gamma=0.1)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

    start_epoch, global_step = 0, 0
    if args.resume and args.checkpoint and os.path.isfile(args.checkpoint):
        # checkpoints are written by rank 0: remap its GPU onto this process's GPU
        ckpt = torch.load(args.checkpoint, map_location={"cuda:0": f"cuda:{local_rank}"})
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        scaler.load_state_dict(ckpt["scaler"])
        start_epoch, global_step = ckpt["epoch"] + 1, ckpt["global_step"]
        if rank == 0:
            print(f"=> resumed from {args.checkpoint} (epoch {ckpt['epoch']})", flush=True)

    if distributed:
        model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    elif torch.cuda.device_count() > 1:
        print(f"=> using nn.DataParallel over {torch.cuda.device_count()} GPUs", flush=True)
        model = nn.DataParallel(model)

    # ---- train -------------------------------------------------------------------------------------------
    last_loss = float("nan")
    for epoch in range(start_epoch, args.epochs):
        if train_sampler is not None:
            train_sampler.set_epoch(epoch)
        loader_gen.manual_seed(args.seed + epoch)  # same shuffle per epoch, also after a resume
        model.train()
        losses, top1, batch_time = AverageMeter("Loss"), AverageMeter("Acc@1", ":.2f"), AverageMeter("Time")
        running_loss = torch.cuda.DoubleTensor([0.0])  # exact epoch sum, reduced across ranks at the end
        torch.cuda.reset_peak_memory_stats()
        end = time.time()
        for i, (images, target) in enumerate(train_loader):
            images = images.cuda(non_blocking=True)
            target = target.cuda(non_blocking=True)

            with torch.cuda.amp.autocast(enabled=args.amp):
                output = model(images)
                loss = criterion(output, target)

            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            global_step += 1

            running_loss += loss.detach().double() * images.size(0)
            if i % args.print_freq == 0 or i == len(train_loader) - 1:
                acc1 = accuracy(output.float(), target)[0]
                losses.update(loss.item(), images.size(0))
                top1.update(acc1, images.size(0))
                batch_time.update(time.time() - end)
                if rank == 0:
                    print(f"Epoch [{epoch}][{i}/{len(train_loader)}] {losses} {top1} {batch_time}", flush=True)
            end = time.time()

        scheduler.step()
        if distributed:
            dist.all_reduce(running_loss)
        epoch_loss = running_loss.item() / (len(train_loader) * args.batch_size * world_size)

        last = loss.detach().clone()
        if distributed:
            dist.all_reduce(last)
            last /= world_size
        last_loss = last.item()

        val_acc = validate(val_loader, model, device, distributed, args)
        if rank == 0:
            peak = torch.cuda.max_memory_allocated() / 2**20
            print(f"=> epoch {epoch}: train loss {epoch_loss:.4f}, val acc@1 {val_acc:.2f}, "
                  f"peak GPU memory {peak:.1f} MiB", flush=True)
            raw = model.module if isinstance(model, (DDP, nn.DataParallel)) else model
            if args.checkpoint:
                save_checkpoint(args.checkpoint, raw, optimizer, scheduler, scaler, epoch, global_step)
        torch.cuda.empty_cache()

    raw = model.module if isinstance(model, (DDP, nn.DataParallel)) else model
    summary = {"final_loss": last_loss, "param_checksum": param_checksum(raw), "steps": global_step}
    emit_summary(summary, args.out_json, rank)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return summary


def validate(loader, model, device, distributed, args):
    model.eval()
    correct = torch.zeros(2, device=device)  # [correct, seen]
    with torch.no_grad():
        for images, target in loader:
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            with torch.cuda.amp.autocast(enabled=args.amp):
                output = model(images)
            correct[0] += (output.argmax(1) == target).sum()
            correct[1] += target.numel()
    if distributed:
        dist.all_reduce(correct)
    return float(correct[0] / correct[1].clamp(min=1)) * 100.0


if __name__ == "__main__":
    main()
