"""The benchmark harness: one configuration in, one record out; a sweep is a loop over configurations.

>>> from ascendify.bench.harness import BenchConfig, run_one
>>> rec = run_one(BenchConfig(model="resnet18", mode="infer", batch_size=2, image_size=32))  # doctest: +SKIP
>>> rec.throughput, rec.latency_ms["p50"]                                                    # doctest: +SKIP

What a run does, in order (``run_one``):

1. free the device's cache and reset its peak-memory counter, so the peak is this run's alone (on the CPU, after
   paying the process's one-off growth once: ``device.warm_host``);
2. build the model (``ascendify.workloads.models``), move it (``channels_last`` if asked), build the optimizer, the
   GradScaler (fp16 training) and the batch; count the FLOPs of one step with ``torch.utils.flop_counter``
   on the eager model; then ``torch.compile`` it if asked;
3. warm-up steps, timed apart (the first includes compilation and allocator growth) and excluded;
4. ``repeats`` windows of ``steps`` steps: each window's wall time between two device synchronisations gives a
   throughput, each step's time (device events on CUDA/NPU, ``perf_counter`` where the device is synchronous)
   gives the latency percentiles;
5. the peak device memory, MFU = FLOPs per step x steps per second / the device's published peak for the
   precision (``ascendify.core.knowledge.device_peak``; none on the CPU or the emulated NPU, whose speed is the
   host's).

An out-of-memory error at any point is caught: the record says ``status="oom"``, everything the run held is
released, and a sweep goes on. Precision ``fp16``/``bf16`` means automatic mixed precision (fp32 weights,
``torch.autocast``, and for fp16 training a ``GradScaler``), never ``model.half()``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
import statistics
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from ascendify.bench.device import EMULATED_LABEL, BenchDevice, is_oom

MODES = ("train", "infer")
PRECISIONS = ("fp32", "fp16", "bf16")


@dataclasses.dataclass
class BenchConfig:
    """Everything one run depends on (the device is opened beforehand: see ``BenchDevice.open``)."""

    model: str = "resnet50"
    mode: str = "train"
    precision: str = "fp32"
    batch_size: int = 32
    steps: int = 20  # timed steps per repeat
    warmup: int = 5  # untimed steps before the first repeat
    repeats: int = 3  # timed windows; their spread is reported
    channels_last: bool = False
    compile: bool = False
    compile_backend: str | None = None  # None: inductor (on the emulated npu: CPU inductor on the npu memory)
    image_size: int | None = None  # None: the model's default (224)
    seq_len: int | None = None
    num_classes: int | None = None
    config_overrides: dict[str, Any] | None = None  # shrink a transformers model (tests)
    loader_workers: int | None = None  # None: batches made on the device; N: a DataLoader with N workers
    count_flops: bool = True
    lr: float = 0.01

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        for name in ("batch_size", "steps", "repeats"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")


@dataclasses.dataclass
class Record:
    """One run's result; ``to_dict()`` is the JSON record."""

    model: str
    mode: str
    precision: str
    batch_size: int
    device: str
    device_name: str
    emulated: bool
    status: str = "ok"  # ok | oom | error
    model_spec: str | None = None  # FILE:FACTORY as given, for a user's model
    throughput: float | None = None  # samples (images, sequences) per second, median over repeats
    throughput_unit: str = "samples/s"
    throughput_spread: dict[str, float] | None = None  # min, max, stdev over repeats
    latency_ms: dict[str, float] | None = None  # p50, p90, p99, mean of single steps
    step_ms_warmup: list[float] | None = None  # the warm-up steps (first: compilation, allocation)
    peak_memory_bytes: int | None = None
    peak_memory_measure: str | None = None  # what peak_memory_bytes is (device allocator, host peak RSS...)
    memory_capacity_bytes: int | None = None
    flops_per_step: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    data_time_fraction: float | None = None  # share of step time spent waiting for the loader
    data_ms: dict[str, float] | None = None
    channels_last: bool = False
    compile: bool = False
    compile_backend: str | None = None
    compile_ms: float | None = None  # --compile: the first compiled call less a steady compiled step
    eager_throughput: float | None = None  # --compile: the eager model, same windows
    eager_latency_p50_ms: float | None = None
    compile_speedup: float | None = None  # throughput compiled / eager
    steps: int = 0
    warmup: int = 0
    repeats: int = 0
    input_shape: list[int] | None = None  # the (first) input tensor's shape
    inputs: str | None = None  # the batch's structure, nesting kept: "(6x3:int64, (1x3x16:float32, ...))"
    num_params: int | None = None
    model_source: str | None = None
    timer: str | None = None
    threads: int | None = None
    torch_version: str | None = None
    label: str | None = None  # "emulated: host speed, not NPU speed"
    notes: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    started: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def display_name(model: str) -> str:
    """``resnet50`` stays; ``path/to/my_model.py:build`` becomes ``my_model.py:build``."""
    from ascendify.workloads import factory

    if factory.is_spec(model):
        s = factory.parse_spec(model)
        return f"{os.path.basename(s.file)}:{s.expr}"
    return model


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _autocast_dtype(precision: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)


def _peak_dtype_key(precision: str, dev: BenchDevice) -> str:
    if precision != "fp32":
        return precision
    import torch

    if dev.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    if dev.type == "npu" and not dev.emulated:
        try:
            if torch.npu.matmul.allow_hf32:
                return "hf32"
        except Exception:
            pass
    return "fp32"


def _default_backend(dev: BenchDevice) -> str:
    return "inductor"  # torch_npu routes it to the NPU; the emulator compiles it on the CPU aliases


class _Run:
    """The objects of one run, so that an OOM can drop them all."""

    def __init__(self):
        self.model = None
        self.optimizer = None
        self.scaler = None
        self.batch = None
        self.loader_iter = None
        self.loader = None

    def clear(self):
        self.__init__()


def run_one(cfg: BenchConfig, dev: BenchDevice, *, on_step: Callable[[str, int, int], None] | None = None) -> Record:
    """Run one configuration on ``dev`` and return its :class:`Record` (``status`` oom/error instead of raising,
    except for bad configurations, which raise ``ValueError``/``ModelError``)."""
    import torch

    from ascendify.workloads import factory, models

    cfg.validate()
    name = models.canonical_name(cfg.model)
    rec = Record(model=display_name(name), mode=cfg.mode, precision=cfg.precision, batch_size=int(cfg.batch_size),
                 device=dev.type, device_name=dev.name, emulated=dev.emulated, channels_last=cfg.channels_last,
                 compile=cfg.compile, steps=cfg.steps, warmup=cfg.warmup, repeats=cfg.repeats,
                 timer=dev.timer().kind, threads=torch.get_num_threads(), torch_version=torch.__version__,
                 label=EMULATED_LABEL if dev.emulated else None,
                 started=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
    if factory.is_spec(name):
        rec.model_spec = name
    else:
        rec.throughput_unit = f"{models.info(name).sample_unit}/s"
    held = _Run()
    _guarded(rec, cfg, dev, held, lambda: _run_into(rec, cfg, dev, held, on_step))
    return rec


def _guarded(rec: Record, cfg: BenchConfig, dev: BenchDevice, held: _Run, work: Callable[[], None]) -> None:
    """Run ``work``; an OOM or an error becomes the record's status, and everything the run held is released
    (a bad configuration, raised before a model exists, propagates)."""
    from ascendify.workloads import models

    try:
        work()
    except Exception as e:
        if is_oom(e):
            rec.status = "oom"
            rec.error = _first_line(e)
        elif isinstance(e, (ValueError, models.ModelError)) and held.model is None:
            raise  # a bad configuration, not a failed measurement
        else:
            rec.status = "error"
            rec.error = f"{type(e).__name__}: {_first_line(e)}" + _hint(e, cfg)
            rec.notes.append(traceback.format_exc(limit=3).strip().splitlines()[-1])
        e.__traceback__ = None  # the frames hold the run's tensors
    finally:
        held.clear()
        if dev.type != "cpu":
            try:
                dev.synchronize()
            except Exception:
                pass
        dev.free_memory()


def _hint(exc: BaseException, cfg) -> str:
    """What to do about a known failure, appended to the record's error ('' when none is known)."""
    if "Expected more than 1 value per channel when training" in str(exc):
        return (f" (BatchNorm cannot train on a batch of {cfg.batch_size} when a layer's output is 1x1: use a "
                "batch size of 2 or more, or --mode infer)")
    return ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _run_into(rec: Record, cfg: BenchConfig, dev: BenchDevice, held: _Run, on_step) -> None:
    import torch

    from ascendify.workloads import models

    dev.free_memory()
    dev.reset_peak_memory(_autocast_dtype(cfg.precision))
    model = models.build_model(cfg.model, num_classes=cfg.num_classes, image_size=cfg.image_size,
                               seq_len=cfg.seq_len, config_overrides=cfg.config_overrides)
    held.model = model
    rec.model_source = getattr(model, "ascendify_source", None)
    rec.num_params = models.count_parameters(model)
    image_input = models.task_of(model) == "image-classification"
    fmt = torch.channels_last if (cfg.channels_last and image_input) else torch.contiguous_format
    if cfg.channels_last and not image_input:
        rec.notes.append("channels_last ignored: the input is not an image batch")
    model = model.to(dev.torch_device, memory_format=fmt) if image_input else model.to(dev.torch_device)
    held.model = model
    model.train(cfg.mode == "train")
    loss_of = models.loss_fn(model)
    amp_dtype = _autocast_dtype(cfg.precision)

    # the batch: made once on the device, or streamed by a DataLoader
    x, y = models.example_batch(model, cfg.batch_size, image_size=cfg.image_size, seq_len=cfg.seq_len)
    rec.input_shape = list(x.shape)
    next_batch = _batch_source(cfg, dev, x, y, fmt, held)

    if cfg.mode == "train":
        held.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
        if cfg.precision == "fp16":
            held.scaler = torch.amp.GradScaler(dev.type)
    opt, scaler = held.optimizer, held.scaler

    def step(m, xb, yb):
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            out = m(xb)
            loss = loss_of(out, yb) if cfg.mode == "train" else None
        if cfg.mode == "train":
            _update(loss, opt, scaler)
        return out

    _measure(rec, cfg, dev, model, lambda m, b: step(m, *b), next_batch, held, on_step)


def _measure(rec: Record, cfg: BenchConfig, dev: BenchDevice, model, step, next_batch, held: _Run,
             on_step) -> None:
    """Time ``step(model, next_batch())`` as the module docstring says (FLOP count, compile, warm-up, repeated
    windows) and fill ``rec``'s throughput, latency, memory and MFU; ``cfg.batch_size`` samples per step."""
    import torch

    from ascendify.core import knowledge

    ctx = torch.no_grad if cfg.mode == "infer" else _nullctx
    runner = model
    with ctx():
        if cfg.count_flops:
            from torch.utils.flop_counter import FlopCounterMode

            b = next_batch()
            counter = FlopCounterMode(display=False)
            with counter:
                step(model, b)
            rec.flops_per_step = float(counter.get_total_flops())
            del b
        eager = None
        if cfg.compile:
            # the eager model first, the same warm-up and windows: the speed-up is over this
            _warm_up(cfg, dev, model, step, next_batch, on_step)
            eager = _windows(cfg, dev, model, step, next_batch, held, None)
            rec.compile_backend = cfg.compile_backend or _default_backend(dev)
            runner = torch.compile(model, backend=rec.compile_backend)

        rec.step_ms_warmup = _warm_up(cfg, dev, runner, step, next_batch, on_step,
                                      at_least=1 if cfg.compile else 0)
        rates, step_ms, data_ms = _windows(cfg, dev, runner, step, next_batch, held, on_step)

    rec.throughput = statistics.median(rates)
    if eager is not None:
        rec.eager_throughput = statistics.median(eager[0])
        rec.eager_latency_p50_ms = percentile(eager[1], 50)
        rec.compile_speedup = rec.throughput / rec.eager_throughput
        # the first compiled call compiles (Dynamo, AOTAutograd, the backend: forward and backward) and runs
        # one step; the compile time is that call less a steady compiled step
        rec.compile_ms = max(0.0, rec.step_ms_warmup[0] - percentile(step_ms, 50))
    rec.throughput_spread = {"min": min(rates), "max": max(rates),
                             "stdev": statistics.stdev(rates) if len(rates) > 1 else 0.0, "repeats": rates}
    rec.latency_ms = {"p50": percentile(step_ms, 50), "p90": percentile(step_ms, 90),
                      "p99": percentile(step_ms, 99), "mean": statistics.fmean(step_ms)}
    if data_ms:
        total_data = sum(data_ms)
        rec.data_ms = {"p50": percentile(data_ms, 50), "p90": percentile(data_ms, 90), "total": total_data}
        rec.data_time_fraction = total_data / (total_data + sum(step_ms))
    dev.synchronize()
    rec.peak_memory_bytes = dev.peak_memory_bytes()
    rec.peak_memory_measure = dev.peak_memory_measure
    rec.memory_capacity_bytes = dev.memory_capacity_bytes()
    if rec.flops_per_step:
        steps_per_s = rec.throughput / cfg.batch_size
        rec.achieved_tflops = rec.flops_per_step * steps_per_s / 1e12
        if dev.emulated:
            rec.notes.append("no MFU on the emulated npu: the speed is the host's")
        else:
            peak = knowledge.device_peak(dev.name, _peak_dtype_key(cfg.precision, dev))
            if peak:
                rec.peak_tflops = peak / 1e12
                rec.mfu = rec.flops_per_step * steps_per_s / peak
            elif dev.type != "cpu":
                rec.notes.append(f"no published {cfg.precision} peak for {dev.name}: MFU not computed")


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _warm_up(cfg: BenchConfig, dev: BenchDevice, runner, step, next_batch, on_step, at_least: int = 0
             ) -> list[float]:
    """The untimed steps (each one's wall time kept, in ms); ``at_least`` of them even with ``--warmup 0``."""
    warm: list[float] = []
    n = max(cfg.warmup, at_least)
    for i in range(n):
        b = next_batch()
        dev.synchronize()
        t0 = time.perf_counter()
        step(runner, b)
        dev.synchronize()
        warm.append(round((time.perf_counter() - t0) * 1e3, 3))
        if on_step:
            on_step("warmup", i + 1, n)
    return warm


def _windows(cfg: BenchConfig, dev: BenchDevice, runner, step, next_batch, held, on_step):
    """``cfg.repeats`` timed windows of ``cfg.steps`` steps: (samples/s per window, ms per step, data-wait ms)."""
    rates: list[float] = []
    step_ms: list[float] = []
    data_ms: list[float] = []
    done = 0
    for _r in range(cfg.repeats):
        timer = dev.timer()
        dev.synchronize()
        t0 = time.perf_counter()
        for _s in range(cfg.steps):
            td = time.perf_counter()
            b = next_batch()
            if held.loader is not None:
                data_ms.append((time.perf_counter() - td) * 1e3)
            timer.start()
            step(runner, b)
            timer.stop()
            done += 1
            if on_step:
                on_step("measure", done, cfg.repeats * cfg.steps)
        dev.synchronize()
        wall = time.perf_counter() - t0
        rates.append(cfg.batch_size * cfg.steps / wall)
        step_ms.extend(timer.times_ms())
    return rates, step_ms, data_ms


def _update(loss, opt, scaler) -> None:
    """One optimizer update from ``loss``: backward and step, through the GradScaler when there is one."""
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


def _batch_source(cfg: BenchConfig, dev: BenchDevice, x, y, fmt, held: _Run):
    """A function returning the next ``(input, target)`` on the device."""
    import torch

    if cfg.loader_workers is None:
        xd = x.to(dev.torch_device)
        if xd.dim() == 4:
            xd = xd.contiguous(memory_format=fmt)
        yd = y.to(dev.torch_device)
        held.batch = (xd, yd)
        return lambda: held.batch

    from ascendify.bench.loader import SyntheticTensors
    from ascendify.program import children

    ds = SyntheticTensors(x[0], y[0], length=cfg.batch_size * 8)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=cfg.batch_size, shuffle=False, drop_last=True, num_workers=cfg.loader_workers,
        pin_memory=dev.type != "cpu" and not dev.emulated, persistent_workers=cfg.loader_workers > 0,
        worker_init_fn=children.worker_init() if cfg.loader_workers else None)  # workers die with the bench
    held.loader = loader
    nb = dev.type != "cpu"

    def next_batch():
        try:
            xb, yb = next(held.loader_iter)
        except (StopIteration, TypeError):
            held.loader_iter = iter(held.loader)
            xb, yb = next(held.loader_iter)
        xb = xb.to(dev.torch_device, non_blocking=nb)
        if xb.dim() == 4:
            xb = xb.contiguous(memory_format=fmt)
        return xb, yb.to(dev.torch_device, non_blocking=nb)

    return next_batch


# ------------------------------------------------------------------------------------------------ any module


def first_float_tensor(output):
    """The first floating-point tensor in ``output`` (a tensor, or tuples, lists, dicts and dict-like model
    outputs of any nesting, depth-first in order), or None.

    >>> import torch
    >>> first_float_tensor((torch.tensor([1, 2]), {"logits": torch.ones(2)})).tolist()
    [1.0, 1.0]
    """
    import torch

    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() or output.is_complex() else None
    if isinstance(output, dict) or (hasattr(output, "values") and hasattr(output, "keys")):
        items = list(output.values())
    elif isinstance(output, (tuple, list)):
        items = list(output)
    else:
        return None
    for x in items:
        t = first_float_tensor(x)
        if t is not None:
            return t
    return None


def default_loss(output):
    """The loss ``bench_module`` trains on without a ``loss_fn``: the output's first floating tensor,
    ``.float().mean()`` (a model returning ``(logits, hidden)`` trains on its logits)."""
    t = first_float_tensor(output)
    if t is None:
        raise ValueError("the model's output holds no floating-point tensor to train on: give a loss function "
                         "(loss_fn=, --loss FILE:FUNC)")
    return t.float().mean()


def _first_tensor(obj):
    import torch
    from torch.utils._pytree import tree_flatten

    return next((x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)), None)


def bench_module(
    model,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    loss_fn: Callable | None = None,
    mode: str = "train",
    precision: str = "fp32",
    device: BenchDevice | str = "auto",
    batch_size: int | None = None,
    steps: int = 20,
    warmup: int = 5,
    repeats: int = 3,
    compile: bool = False,
    compile_backend: str | None = None,
    count_flops: bool = True,
    lr: float = 0.01,
    name: str | None = None,
    on_step: Callable[[str, int, int], None] | None = None,
) -> dict:
    """Benchmark ``model`` (any ``nn.Module``) on one batch, ``model(*args, **kwargs)`` with inputs of any nesting
    (tuples, lists, dicts: an LSTM's ``(x, (h, c))``), and return the record dict ``ascendify bench`` writes.

    ``mode``: ``"train"`` (forward, ``loss_fn(output)``, backward, an SGD step with momentum 0.9 and ``lr``) or
    ``"infer"`` (forward under ``no_grad``). ``loss_fn`` defaults to :func:`default_loss` (the output's first
    floating tensor, ``.float().mean()``). ``precision`` ``fp16``/``bf16`` is autocast (with a GradScaler for fp16
    training). ``device``: a ``BenchDevice`` or a ``--device`` word (``auto``, ``cpu``, ``cuda``, ``npu``:
    :meth:`BenchDevice.open`); the model and the batch are moved there (training updates the model's parameters: pass a copy to
    keep them; the model's training flag is restored). ``batch_size`` is the number of samples in the batch, for
    the throughput (default: the first dimension of its first tensor). ``name`` labels the record (default: the
    model's class name). An OOM or an error is the record's ``status`` (``oom``/``error``), as in a sweep.
    """
    import torch
    from torch.utils._pytree import tree_map

    from ascendify.workloads import batchspec, models

    kwargs = dict(kwargs or {})
    dev = device if isinstance(device, BenchDevice) else BenchDevice.open(str(device))
    first = _first_tensor((args, kwargs))
    inferred = batch_size is None
    if batch_size is None:
        batch_size = int(first.shape[0]) if first is not None and first.dim() > 0 else 1
    cfg = BenchConfig(model=name or type(model).__name__, mode=mode, precision=precision, batch_size=batch_size,
                      steps=steps, warmup=warmup, repeats=repeats, compile=compile, compile_backend=compile_backend,
                      count_flops=count_flops, lr=lr)
    cfg.validate()
    rec = Record(model=cfg.model, mode=mode, precision=precision, batch_size=int(batch_size), device=dev.type,
                 device_name=dev.name, emulated=dev.emulated, compile=compile, steps=steps, warmup=warmup,
                 repeats=repeats, timer=dev.timer().kind, threads=torch.get_num_threads(),
                 torch_version=torch.__version__, label=EMULATED_LABEL if dev.emulated else None,
                 started=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                 input_shape=list(first.shape) if first is not None else None,
                 inputs=batchspec.describe(tuple(args), kwargs), num_params=models.count_parameters(model))
    if inferred and first is not None:
        rec.notes.append(f"batch size {batch_size}: the first dimension of the first input tensor")
    held = _Run()
    was_training = model.training
    loss_of = loss_fn or default_loss

    def work():
        dev.free_memory()
        dev.reset_peak_memory(_autocast_dtype(precision))  # this run's peak alone (the model is the caller's)
        held.model = model.to(dev.torch_device)
        model.train(mode == "train")
        held.batch = tree_map(lambda x: x.to(dev.torch_device) if isinstance(x, torch.Tensor) else x,
                              (tuple(args), kwargs))
        if mode == "train":
            held.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
            if precision == "fp16":
                held.scaler = torch.amp.GradScaler(dev.type)
        amp_dtype = _autocast_dtype(precision)

        def step(m, batch):
            a, kw = batch
            opt, scaler = held.optimizer, held.scaler
            with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                out = m(*a, **kw)
                loss = loss_of(out) if mode == "train" else None
            if mode == "train":
                _update(loss, opt, scaler)
            return out

        _measure(rec, cfg, dev, model, step, lambda: held.batch, held, on_step)

    try:
        _guarded(rec, cfg, dev, held, work)
    finally:
        model.train(was_training)
    return rec.to_dict()


# ------------------------------------------------------------------------------------------------ sweeps


def sweep(configs: Iterable[BenchConfig], dev: BenchDevice, *,
          on_record: Callable[[Record], None] | None = None,
          on_step: Callable[[str, int, int], None] | None = None) -> list[Record]:
    """Run every configuration; an OOM is recorded and the sweep goes on."""
    out = []
    for cfg in configs:
        rec = run_one(cfg, dev, on_step=on_step)
        out.append(rec)
        if on_record:
            on_record(rec)
    return out


def find_max_batch(base: BenchConfig, dev: BenchDevice, *, start: int = 1, limit: int = 1 << 16,
                   on_record: Callable[[Record], None] | None = None) -> tuple[int | None, list[Record]]:
    """The largest batch size that runs without OOM: double from ``start`` until an OOM (or ``limit``), then
    bisect between the last fit and the first OOM. Each probe is one warm-up step and one timed step.

    Returns ``(largest fitting batch or None when even start fails, the probe records)``.
    """
    probes: list[Record] = []

    def fits(b: int) -> bool:
        cfg = dataclasses.replace(base, batch_size=b, warmup=1, steps=1, repeats=1, count_flops=False)
        rec = run_one(cfg, dev)
        rec.notes.append("max-batch probe")
        probes.append(rec)
        if on_record:
            on_record(rec)
        if rec.status == "error":
            raise RuntimeError(f"batch {b}: {rec.error}")
        return rec.status == "ok"

    if not fits(start):
        return None, probes
    good, bad = start, None
    while bad is None:
        nxt = good * 2
        if nxt > limit:
            return good, probes
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good, probes
