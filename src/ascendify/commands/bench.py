"""``ascendify bench``: training/inference speed, latency percentiles, peak memory and MFU; batch sweeps that
survive OOM; the data-loader bench; side-by-side comparison of two runs. Torch-free at import."""

from __future__ import annotations

import argparse
import sys

HELP = "measure training/inference speed, memory and MFU on cpu, cuda, npu or the emulated npu"
DESCRIPTION = """\
Measure a model's training or inference speed the right way: warm-up excluded, device synchronisation or
device events, repeated windows with their spread, latency p50/p90/p99, peak device memory (reset per run),
MFU against the device's published peak. Precision fp16/bf16 is automatic mixed precision (with a GradScaler
for fp16 training). A batch-size list is a sweep that records an OOM and goes on; --find-max-batch finds the
largest batch that fits. --device npu uses the emulated NPU where no real one exists: its figures are the
host's speed, and are labelled so.

examples:
  ascendify bench --model resnet50 --mode train --batch-size 32,64 \\
      --precision fp32,bf16 --out bench_out
  ascendify bench --model gpt2 --mode infer --device npu --quick --json npu.json
  ascendify bench --model my_model.py:build --batch-size 8 --find-max-batch
  # any forward signature: an LSTM's model(x, (h, c)), its own batch and loss
  ascendify bench --model lm.py:WordLM --loss lm.py:loss \\
      --inputs '35x20:int64:1000, (2x20x200, 2x20x200)'
  ascendify bench compare gpu.json npu.json
  ascendify bench compare orig.json port.json --pair-by config
  ascendify bench loader --data ./images --workers 0,2,4 --bench-json gpu.json

exit status: 0 every run measured (an OOM in a sweep is a result), 2 bad arguments, 3 device unusable,
4 a run failed with an error.
"""


def _csv(text: str) -> list[str]:
    return [t.strip() for t in str(text).split(",") if t.strip()]


def _names(text: str) -> list[str]:
    vals = _csv(text)
    if not vals:  # --model "" ran nothing and exited 0 with an empty table
        raise argparse.ArgumentTypeError(f"{text!r}: expected a model name or FILE.py:FACTORY")
    return vals


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:  # 0 was read as "the default" and ignored in silence
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not vals or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return vals


def _pos_int_list(text: str) -> list[int]:
    vals = _int_list(text)
    if any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {text!r}")
    return vals


def _choice_list(choices):
    def parse(text: str) -> list[str]:
        vals = [v.lower() for v in _csv(text)]
        bad = [v for v in vals if v not in choices]
        if not vals or bad:
            raise argparse.ArgumentTypeError(f"{text!r}: expected one or more of {', '.join(choices)}")
        return vals

    return parse


def _bool_choice(text: str) -> list[bool]:
    t = text.strip().lower()
    table = {"yes": [True], "no": [False], "both": [False, True], "true": [True], "false": [False]}
    if t not in table:
        raise argparse.ArgumentTypeError(f"{text!r}: expected yes, no or both")
    return table[t]


def _common_device(p: argparse.ArgumentParser) -> None:
    from ascendify.commands import add_device_argument

    add_device_argument(p, "bench", help="device to measure (npu: the real NPU, else the emulated one)")
    p.add_argument("--emulate-memory", metavar="SIZE", default=None,
                   help="capacity of the emulated npu, e.g. 64G (default: ASCENDIFY_EMULATE_MEMORY or 64G)")
    p.add_argument("--threads", type=_positive, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--out", metavar="DIR", help="write JSON, CSV and PNG plots into DIR")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="resnet50", type=_names,
                        help="resnet50, resnet18, efficientnet_b0, bert-large, bert-base, gpt2, or FILE.py:FACTORY; "
                             "several separated by commas (default resnet50)")
    parser.add_argument("--mode", default=["train"], type=_choice_list(("train", "infer")),
                        help="train or infer, or both: train,infer (default train)")
    parser.add_argument("--batch-size", default=None, type=_pos_int_list, metavar="B[,B...]",
                        help="batch size(s) to sweep (default 32; --quick: 2)")
    parser.add_argument("--precision", default=["fp32"], type=_choice_list(("fp32", "fp16", "bf16")),
                        help="fp32, fp16 (AMP + GradScaler), bf16 (AMP); several: fp32,bf16 (default fp32)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per repeat (default 20; --quick 3)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed warm-up steps (default 5; --quick 1)")
    parser.add_argument("--repeats", type=int, default=None, help="timed windows (default 3; --quick 1)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-run preset: batch 2, image 64, sequence 32, 1 warm-up, 3 steps, 1 repeat")
    parser.add_argument("--image-size", type=_positive, default=None, help="image side (default 224; --quick 64)")
    parser.add_argument("--seq-len", type=_positive, default=None, help="sequence length (default: the model's)")
    parser.add_argument("--num-classes", type=_positive, default=None, help="classifier outputs (default: the model's)")
    parser.add_argument("--channels-last", action="store_true", help="channels_last memory format (image models)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model; also times the eager model: compile time and speed-up reported")
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend (default inductor)")
    parser.add_argument("--find-max-batch", action="store_true",
                        help="also find the largest batch that fits in device memory (doubling, then bisection)")
    parser.add_argument("--loader-workers", type=int, default=None, metavar="N",
                        help="feed batches through a DataLoader with N workers and report the time spent waiting "
                             "for data (default: batches already on the device)")
    parser.add_argument("--no-flops", action="store_true", help="skip the FLOP count (and MFU)")
    parser.add_argument("--inputs", metavar="SPEC|FILE:FUNC",
                        help="the model's batch, for any forward signature: shapes nested in (tuples), [lists], "
                             "{name=dicts} and name= keyword inputs, e.g. '6x3:int64:40, (1x3x16, 1x3x16)', or "
                             "FILE:FUNC returning them (--batch-size then says how many samples it holds)")
    parser.add_argument("--loss", metavar="FILE:FUNC",
                        help="with --inputs: loss(output) to train on (default: the output's first floating "
                             "tensor, .float().mean())")
    _common_device(parser)
    sub = parser.add_subparsers(dest="bench_action", metavar="{compare,loader}",
                                title="actions (default: run the bench)")
    c = sub.add_parser("compare", help="two bench JSON files side by side, with ratios B/A",
                       description="Put two 'ascendify bench --json' files side by side (GPU vs NPU, before vs "
                                   "after): throughput, p50 latency and memory, with ratios B/A.")
    c.add_argument("a", metavar="A.json")
    c.add_argument("b", metavar="B.json")
    c.add_argument("--json", metavar="FILE", help="write the comparison as JSON")
    c.add_argument("--out", metavar="DIR", help="write compare.json, compare.csv and a ratio plot into DIR")
    c.add_argument("--pair-by", choices=("model", "config"), default="model",
                   help="pair runs by model label and configuration (default), or by configuration alone (an "
                        "original and its migrated copy, whose labels differ)")
    ld = sub.add_parser("loader", help="sweep DataLoader settings; compare CPU-side and device-side augmentation",
                        description="Sweep num_workers, pin_memory, prefetch_factor, persistent_workers and batch "
                                    "size on an image folder (DIR/<class>/<image>) or a synthetic JPEG "
                                    "decode-and-augment workload; recommend a setting; say whether it feeds the "
                                    "compute rate; compare augmentation in the workers with augmentation on the "
                                    "device.")
    ld.add_argument("--data", metavar="DIR", help="image folder (default: synthetic JPEGs made in memory)")
    ld.add_argument("--samples", type=int, default=None, help="synthetic images (default 512; --quick 32)")
    ld.add_argument("--workers", type=_int_list, default=None, help="num_workers values (default 0,1,2,4 <= cores)")
    ld.add_argument("--pin-memory", type=_bool_choice, default=None,
                    help="yes, no or both (default both on an accelerator, no on the cpu)")
    ld.add_argument("--prefetch", type=_pos_int_list, default=None,
                    help="prefetch_factor values (default 2,4; --quick 2)")
    ld.add_argument("--persistent", type=_bool_choice, default=None,
                    help="persistent_workers: yes, no or both (default both; --quick yes)")
    ld.add_argument("--batch-size", type=_pos_int_list, default=None, help="batch size(s) (default 32; --quick 8)")
    ld.add_argument("--batches", type=int, default=None, help="batches per epoch (default 16; --quick 3)")
    ld.add_argument("--epochs", type=int, default=2, help="epochs per setting (default 2)")
    ld.add_argument("--image-size", type=_positive, default=None, help="output image side (default 224; --quick 64)")
    ld.add_argument("--augment", default="both", choices=["cpu", "device", "both", "none"],
                    help="where the augmentation runs in the comparison (default both)")
    ld.add_argument("--compute-rate", type=float, default=None, metavar="SAMPLES_PER_S",
                    help="the training step's rate, to say whether the loader keeps up")
    ld.add_argument("--bench-json", metavar="FILE", help="take the compute rate from a bench JSON (its fastest run)")
    ld.add_argument("--quick", action="store_true", help="smoke-run preset (tiny dataset, few settings)")
    _common_device(ld)


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "bench_action", None)
    if action == "compare":
        return _run_compare(args)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("ascendify bench: needs PyTorch (pip install 'ascendify[ml]')", file=sys.stderr)
        return 3
    if action == "loader":
        from ascendify.bench.runner import run_loader

        return run_loader(args)
    from ascendify.bench.runner import run_bench

    return run_bench(args)


def _run_compare(args) -> int:
    from ascendify.bench.runner import run_compare

    return run_compare(args)
