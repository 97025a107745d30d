"""``ascendify train``: the reference trainer (see ``docs/train.md``)."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "train an image classifier the right way: AMP, DDP, exact resume (ResNet-50 recipe)"
DESCRIPTION = """\
Train an image classifier on the NPU (emulated where no NPU exists), CUDA or
the CPU: SGD with momentum, a step or cosine schedule, cross-entropy with label
smoothing, AMP (bf16, or fp16 with a GradScaler), gradient accumulation and
clipping, activation checkpointing, channels-last, torch.compile, validation
every epoch, best/last checkpoints written atomically, and --resume that
continues bit-identically.

Writes OUT/history.json and .csv (train_loss, train_acc, val_loss, val_acc, lr,
epoch_time, throughput), OUT/curves.png, OUT/tb/ (TensorBoard), OUT/best.pt,
OUT/last.pt and OUT/train.json.

Exit codes: 0 trained, 2 bad arguments, config, data or model (an --out that
another run is writing, or cannot be written), 3 the device is not usable here
(--device cuda without a GPU), 4 the output could not be written (a full disk).

Several processes: --nproc N, or under torchrun yourself:
  torchrun --nproc-per-node N -m ascendify train ...

examples:
  ascendify train --model resnet18 --data digits --epochs 5 --out runs/digits
  ascendify train --model resnet50 --data synthetic --amp bf16 --channels-last \\
      --device npu
  ascendify train --config train.toml --lr 0.01 --resume
"""

# option -> (TrainConfig field, type, help); bools are --flag / --no-flag
_OPTIONS: list[tuple[str, type, str]] = [
    ("model", str, "resnet50 | resnet18 | efficientnet_b0 | FILE.py:FACTORY (default resnet18)"),
    ("data", str, "synthetic | digits | DIR of class sub-folders (default synthetic)"),
    ("device", str, ""),  # add_device_argument: the words every verb takes
    ("amp", str, "bf16 | fp16 | off (default off)"),
    ("epochs", int, "epochs (default 5)"),
    ("batch_size", int, "batch size per process (default 64)"),
    ("lr", float, "learning rate (default 0.05)"),
    ("momentum", float, "SGD momentum (default 0.9)"),
    ("weight_decay", float, "weight decay (default 1e-4)"),
    ("sched", str, "step | cosine (default cosine)"),
    ("step_size", int, "StepLR period in epochs (default: a third of the epochs)"),
    ("gamma", float, "StepLR factor (default 0.1)"),
    ("label_smoothing", float, "label smoothing (default 0)"),
    ("grad_accum", int, "micro-batches per optimizer step (default 1)"),
    ("clip_grad", float, "clip the gradient norm to this (default 0: off)"),
    ("activation_checkpointing", bool, "recompute the blocks' activations in backward"),
    ("channels_last", bool, "channels-last memory format"),
    ("compile", bool, "torch.compile the model"),
    ("image_size", int, "image side in pixels (default 32)"),
    ("num_classes", int, "classes (default: from the data)"),
    ("val_fraction", float, "share of the data held out for validation (default 0.2)"),
    ("synthetic_size", int, "samples in the synthetic data set (default 1024)"),
    ("workers", int, "DataLoader worker processes (default 0)"),
    ("seed", int, "random seed (default 0)"),
    ("out", str, "output folder (default runs/train)"),
    ("resume", bool, "continue from OUT/last.pt"),
    ("log_every", int, "progress line every N steps when not on a terminal (default 100)"),
    ("max_steps", int, "stop after N optimizer steps, writing OUT/last.pt (default 0: no limit)"),
    ("tensorboard", bool, "write TensorBoard event files (default on)"),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="a TOML file of these settings; options given here override it")
    from ascendify.commands import add_device_argument

    for name, kind, text in _OPTIONS:
        flag = "--" + name.replace("_", "-")
        if name == "device":  # checked when resolved: the word may come from --config too
            add_device_argument(p, "train", default=None, validate=False, help="where to train")
        elif kind is bool:
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            metavar = {int: "N", float: "X"}.get(kind, name.upper())
            p.add_argument(flag, dest=name, type=kind, default=None, metavar=metavar, help=text)
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="run N processes (DDP) on this machine through torchrun")
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def run(args: argparse.Namespace) -> int:
    if args.nproc < 1:
        print(f"ascendify train: --nproc must be at least 1, not {args.nproc}", file=sys.stderr)
        return 2
    if args.nproc > 1 and "LOCAL_RANK" not in os.environ:
        return _relaunch(args)
    from ascendify import report
    from ascendify.device import placement
    from ascendify.train import ConfigError, TrainConfig, train
    from ascendify.train.checkpoint import CheckpointError
    from ascendify.train.config import OutputError
    from ascendify.train.data import DataError
    from ascendify.workloads import models

    overrides = {name: getattr(args, name) for name, _, _ in _OPTIONS}
    try:
        cfg = TrainConfig.from_sources(args.config, overrides)
        history = train(cfg, show_progress=not args.quiet)
    except (ConfigError, DataError, CheckpointError, OutputError, models.ModelError, placement.DeviceError) as e:
        print(f"ascendify train: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    if args.json:
        sys.stdout.write(report.dumps_json({"out": cfg.out, "history": history}))
    elif not args.quiet and history and os.environ.get("RANK", "0") == "0":
        best = max(h["val_acc"] for h in history)
        report.console(stderr=True).print(
            f"best validation accuracy {100 * best:.2f}%; history, curves and checkpoints in {cfg.out}/")
    return 0


def _relaunch(args: argparse.Namespace) -> int:
    """Start ``--nproc`` copies of this command under torchrun (one per process), without ``--nproc``."""
    from ascendify.program import children

    argv = sys.argv[1:] if sys.argv[1:2] == ["train"] else ["train", *sys.argv[sys.argv.index("train") + 1:]]
    cleaned, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        cleaned.append(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
           "-m", "ascendify", *cleaned]
    return children.call(cmd)  # torchrun and its workers die with this process; Ctrl-C is passed on
