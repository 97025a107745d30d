"""The training loop: read it top to bottom.

    data, model, optimizer, scheduler, scaler  <- config
    resume from last.pt if asked
    for each epoch:
        for each batch: forward under autocast, loss / grad_accum, backward (scaled), every grad_accum
                        micro-batches: unscale, clip, optimizer step, scaler update
        validate; record the epoch; step the scheduler; save last.pt (and best.pt when validation improves)
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

from ascendify import report
from ascendify.core import devices, fileio
from ascendify.device import placement
from ascendify.train import checkpoint, data, distributed, metrics, network
from ascendify.train.config import ConfigError, OutputError, TrainConfig
from ascendify.train.progress import Progress as ProgressView


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every device's generator (the emulated NPU's too)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def make_scheduler(cfg: TrainConfig, optimizer):
    if cfg.sched == "step":
        period = cfg.step_size or max(1, cfg.epochs // 3)
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=period, gamma=cfg.gamma)
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)


def autocast(cfg: TrainConfig, device: str):
    if cfg.amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if cfg.amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.partition(":")[0], dtype=dtype)


@contextlib.contextmanager
def _writing(path: Path):
    """Writes to ``path`` that fail (a full disk) end the run with :class:`OutputError` naming it, not a
    traceback."""
    try:
        yield
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


def train(cfg: TrainConfig, *, show_progress: bool = True) -> list[dict]:
    """Train as ``cfg`` says; returns the history (one dict per finished epoch). The main process holds ``--out``
    while it trains (``core.fileio.output_lock``): a second run into the same folder is refused, never mixed in."""
    r = placement.resolve(cfg.device, purpose="train")
    device, emulated = r.device, r.emulated
    ctx, device = distributed.setup(device, emulated)
    out = Path(cfg.out)
    with contextlib.ExitStack() as held:
        if ctx.is_main:
            if out.exists() and not out.is_dir():
                raise ConfigError(f"--out {out}: is a file, not a folder")
            if problem := fileio.folder_problem(out):  # a read-only place: said now, not at the first epoch's end
                raise ConfigError(f"--out {out}: {problem}")
            try:
                held.enter_context(fileio.output_lock(out, "ascendify train"))
            except fileio.OutputLocked as e:
                raise ConfigError(f"--out {e}") from None
            except OSError as e:
                raise ConfigError(f"--out {out}: cannot be made ({e.strerror or e})") from None
            _check_out(cfg, out)
        return _train(cfg, ctx, device, emulated, out, show_progress)


def _train(cfg: TrainConfig, ctx, device: str, emulated: bool, out: Path, show_progress: bool) -> list[dict]:
    seed_everything(cfg.seed)

    sets = data.build_datasets(cfg.data, image_size=cfg.image_size, val_fraction=cfg.val_fraction, seed=cfg.seed,
                               synthetic_size=cfg.synthetic_size, num_classes=cfg.num_classes)
    sampler = data.ResumableSampler(sets.train, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True,
                                    seed=cfg.seed)
    # the loaders draw worker seeds from their own generators, re-seeded per epoch: a resumed run's workers and
    # its global RNG (dropout...) follow the uninterrupted run's exactly
    loader_rng = torch.Generator()
    train_loader = DataLoader(sets.train, batch_size=cfg.batch_size, sampler=sampler, num_workers=cfg.workers,
                              pin_memory=not device.startswith("cpu"), generator=loader_rng)
    val_loader = DataLoader(torch.utils.data.Subset(sets.val, range(ctx.rank, len(sets.val), ctx.world_size)),
                            batch_size=cfg.batch_size, num_workers=cfg.workers, generator=torch.Generator())

    model = network.build(cfg, sets.num_classes, device, emulated)
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay)
    scheduler = make_scheduler(cfg, optimizer)
    scaler = torch.amp.GradScaler(device.partition(":")[0], enabled=cfg.amp == "fp16")

    progress = checkpoint.Progress()
    if cfg.resume:
        progress = checkpoint.load(out / "last.pt", model=model, optimizer=optimizer, scheduler=scheduler,
                                   scaler=scaler, device=device)
    model = distributed.wrap(model, ctx, device)
    with _writing(out):
        if ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)  # bad data or a bad model leave no empty folder behind
        writer = metrics.Writer(out, enabled=ctx.is_main, tensorboard=cfg.tensorboard)
    view = ProgressView(cfg, ctx, device, emulated, enabled=show_progress and ctx.is_main)
    steps_per_epoch = math.ceil(math.ceil(sampler.num_samples / cfg.batch_size) / cfg.grad_accum)

    def save(path: Path) -> None:
        if ctx.is_main:
            with _writing(path):
                checkpoint.save(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                                progress=progress, config=cfg.to_dict(), device=device)

    stopped = False
    with view:
        if cfg.amp == "bf16" and (emulated or device.startswith("cpu")) and devices.cpu_has_bf16() is False:
            view.note("note: --amp bf16 runs on the host CPU here, which has no bf16 units (no avx512_bf16 or "
                      "amx_bf16): expect it many times slower than --amp off (see `ascendify doctor`'s perf check)")
        for epoch in range(progress.epoch, cfg.epochs):
            sampler.set_epoch(epoch)
            loader_rng.manual_seed(cfg.seed * 1_000_003 + epoch)
            sampler.set_start(progress.step_in_epoch * cfg.batch_size * cfg.grad_accum)
            running = metrics.Running(progress.running)
            model.train()
            view.start_epoch(epoch, steps_per_epoch, progress.step_in_epoch)
            t0, seen = time.perf_counter(), 0
            optimizer.zero_grad(set_to_none=True)
            micro = 0
            for images, labels in train_loader:
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                if cfg.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                with autocast(cfg, device):
                    logits = model(images)
                    loss = criterion(logits.float(), labels)
                scaler.scale(loss / cfg.grad_accum).backward()
                running.add(loss.detach().float().item() * len(labels),
                            (logits.argmax(1) == labels).sum().item(), len(labels))
                seen += len(labels)
                micro += 1
                if micro % cfg.grad_accum:
                    continue
                if cfg.clip_grad:
                    scaler.unscale_(optimizer)
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                progress.step_in_epoch += 1
                progress.global_step += 1
                progress.running = running.state()
                loss_avg, acc_avg = running.means()
                view.step(progress.step_in_epoch, loss_avg, acc_avg, seen / (time.perf_counter() - t0))
                with _writing(out / "tb"):
                    writer.scalar("train/loss", loss.item(), progress.global_step)
                if cfg.max_steps and progress.global_step >= cfg.max_steps:
                    stopped = True
                    break
            if stopped:
                save(out / "last.pt")
                view.note(f"stopped after {report.plural(progress.global_step, 'optimizer step')} (--max-steps); "
                          f"continue with --resume")
                break
            if micro % cfg.grad_accum:  # a last partial accumulation: step with what was gathered
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - t0
            tr_loss, tr_correct, tr_count, seen_all = distributed.sum_all(
                [running.loss, running.correct, running.count, float(seen)], ctx, device)
            val_loss, val_acc = evaluate(model, val_loader, criterion, cfg, ctx, device)
            row = {
                "epoch": epoch + 1,
                "train_loss": tr_loss / max(tr_count, 1),
                "train_acc": tr_correct / max(tr_count, 1),
                "val_loss": val_loss,
                "val_acc": val_acc,
                "lr": optimizer.param_groups[0]["lr"],
                "epoch_time": elapsed,
                "throughput": seen_all / elapsed if elapsed > 0 else 0.0,
            }
            progress.history.append(row)
            scheduler.step()
            progress.epoch, progress.step_in_epoch, progress.running = epoch + 1, 0, {}
            with _writing(out / "history.json"):
                writer.epoch(progress.history)
            view.end_epoch(row)
            if val_acc > progress.best_val_acc:
                progress.best_val_acc = val_acc
                save(out / "best.pt")
            save(out / "last.pt")
    with _writing(out / "tb"):
        writer.close()
    if ctx.is_main:
        summary = {"config": cfg.to_dict(), "device": device, "device_name": devices.device_name(device),
                   "emulated": emulated, "world_size": ctx.world_size, "finished": not stopped,
                   "global_step": progress.global_step, "best_val_acc": progress.best_val_acc,
                   "history": progress.history}
        with _writing(out / "train.json"):
            report.write_json(out / "train.json", summary)
    distributed.cleanup(ctx)
    return progress.history


@torch.no_grad()
def evaluate(model, loader, criterion, cfg: TrainConfig, ctx, device: str) -> tuple[float, float]:
    """Validation loss and accuracy over the whole validation set (summed over ranks)."""
    model.eval()
    loss_sum = correct = count = 0.0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        if cfg.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast(cfg, device):
            logits = model(images)
        loss_sum += criterion(logits.float(), labels).item() * len(labels)
        correct += (logits.argmax(1) == labels).sum().item()
        count += len(labels)
    loss_sum, correct, count = distributed.sum_all([loss_sum, correct, count], ctx, device)
    return loss_sum / max(count, 1), correct / max(count, 1)


def _check_out(cfg: TrainConfig, out: Path) -> None:
    """Refuse to mix runs: --resume needs last.pt; a fresh run must not overwrite another run's files."""
    last = out / "last.pt"
    if cfg.resume:
        if not last.exists():
            raise ConfigError(f"--resume: {last} does not exist (nothing to continue)")
        saved = checkpoint.saved_config(last)
        for key in ("model", "data", "batch_size", "grad_accum", "image_size", "seed", "amp", "sched"):
            if key in saved and saved[key] != getattr(cfg, key):
                raise ConfigError(f"--resume: {key} was {saved[key]!r} in {last}, now {getattr(cfg, key)!r}; "
                                  f"resume with the same settings")
    elif last.exists() or (out / "history.json").exists():
        raise ConfigError(f"{out} holds an earlier run: pass --resume to continue it, or choose another --out")
    else:  # files of the user's that a fresh run would overwrite (a config file beside them is fine)
        taken = [n for n in OUTPUTS if (out / n).exists()]
        if taken:
            raise ConfigError(f"--out {out} holds {', '.join(taken)}, which this run would overwrite: move them, "
                              "or choose another --out")


OUTPUTS = ("best.pt", "last.pt", "history.json", "history.csv", "curves.png", "train.json", "tb")  # what a run writes
