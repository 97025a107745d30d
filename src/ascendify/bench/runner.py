"""The work behind ``ascendify bench`` (the front-end is ``ascendify/commands/bench.py``)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from ascendify.bench.device import EMULATED_LABEL, DeviceError


def _err(msg: str) -> None:
    print(f"ascendify bench: {msg}", file=sys.stderr)


def _output_problem(args) -> str | None:
    """Why ``--json FILE`` / ``--out DIR`` cannot be written, or ``--emulate-memory`` is no size, found before
    anything is measured (a bad size was said only after the emulator's start, as an unusable device, exit 3)."""
    from ascendify.core.fileio import folder_problem, output_problem

    if getattr(args, "emulate_memory", None):
        from ascendify.emulator.settings import parse_bytes

        try:
            parse_bytes(args.emulate_memory)
        except ValueError as e:
            return f"--emulate-memory: {e}"

    if getattr(args, "json", None):
        problem = output_problem(args.json)
        if problem:
            return f"--json {args.json}: {problem}"
    out = getattr(args, "out", None)
    if out and Path(out).exists() and not Path(out).is_dir():
        return f"--out {out}: is a file; give a folder"
    problem = folder_problem(out) if out else None  # a folder under a file, no permission
    return f"--out {out}: {problem}" if problem else None


def _open_device(args, err=None):
    """The :class:`BenchDevice` of ``--device`` (see ``BenchDevice.open``) with ``--threads`` set, or the exit
    status after saying why: 2 for a word the bench does not take, 3 for a device that is not here. With ``err``
    (a console), says so there when the device is the emulated NPU."""
    from ascendify.bench.device import BenchDevice, set_threads

    try:
        dev = BenchDevice.open(args.device, emulate_memory=args.emulate_memory)
    except DeviceError as e:
        _err(str(e))
        return e.exit_code
    set_threads(args.threads)
    if err is not None and dev.emulated:
        err.print(f"[yellow]device npu is the emulated NPU ({dev.name}): {EMULATED_LABEL}[/yellow]")
    return dev


def _timing(args) -> dict:
    quick = args.quick
    return dict(
        steps=args.steps if args.steps is not None else (3 if quick else 20),
        warmup=args.warmup if args.warmup is not None else (1 if quick else 5),
        repeats=args.repeats if args.repeats is not None else (1 if quick else 3),
    )


def _configs(args) -> list:
    from ascendify.bench.harness import BenchConfig

    quick = args.quick
    batch_sizes = args.batch_size or ([2] if quick else [32])
    base = dict(
        **_timing(args),
        channels_last=args.channels_last, compile=args.compile, compile_backend=args.compile_backend,
        image_size=args.image_size or (64 if quick else None),
        seq_len=args.seq_len or (32 if quick else None), num_classes=args.num_classes,
        loader_workers=args.loader_workers, count_flops=not args.no_flops,
    )
    out = []
    for model in args.model:
        for mode in args.mode:
            for prec in args.precision:
                for b in batch_sizes:
                    cfg = BenchConfig(model=model, mode=mode, precision=prec, batch_size=b, **base)
                    cfg.validate()
                    out.append(cfg)
    return out


def _meta(dev, args) -> dict:
    import platform

    import torch

    return {"device": dev.describe(), "torch_version": torch.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "argv": sys.argv[1:]}


def run_bench(args) -> int:
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ascendify import report
    from ascendify.bench import harness, render
    from ascendify.workloads import factory, models

    problem = _output_problem(args)
    if problem:
        _err(problem)
        return 2
    if getattr(args, "inputs", None) or getattr(args, "loss", None):
        return _run_with_inputs(args)
    try:
        configs = _configs(args)
        for m in args.model:
            if not factory.is_spec(m):
                models.info(m)  # unknown names fail before any device work
    except (ValueError, models.ModelError) as e:
        _err(str(e))
        return 2
    err = report.console(stderr=True)
    dev = _open_device(args, err)  # before any backward (emulator)
    if isinstance(dev, int):
        return dev
    records: list[dict] = []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True)
    overall = progress.add_task("runs", total=len(configs))
    steps_task = progress.add_task("", total=1, visible=False)

    def view():
        parts = [render.render_table(records)] if records else []
        return Group(*parts, progress)

    def on_step(phase, i, n):
        progress.update(steps_task, description=f"  {phase}", completed=i, total=n, visible=True)
        live.update(view())

    def on_record(rec):
        records.append(rec.to_dict())
        progress.advance(overall)
        live.update(view())

    try:
        with Live(view(), console=err, refresh_per_second=4, transient=True, redirect_stdout=False) as live:
            for cfg in configs:
                progress.update(overall, description=f"{cfg.model} {cfg.mode} {cfg.precision} batch {cfg.batch_size}")
                harness.sweep([cfg], dev, on_record=on_record, on_step=on_step)
            if args.find_max_batch:
                for cfg in {(c.model, c.mode, c.precision): c for c in configs}.values():
                    progress.update(overall, description=f"largest batch: {cfg.model} {cfg.mode} {cfg.precision}")
                    best, probes = harness.find_max_batch(cfg, dev, start=max(1, min(c.batch_size for c in configs)))
                    records.append({**dataclasses.asdict(_max_record(cfg, dev, best, probes))})
                    live.update(view())
    except (ValueError, models.ModelError) as e:
        _err(str(e))
        return 2
    report.console().print(render.render_table([r for r in records if r.get("status") != "max-batch"]))
    for r in records:
        if render.compile_line(r):
            report.console().print(render.compile_line(r), markup=False, highlight=False)
        if r.get("status") == "max-batch":
            fits = r["batch_size"]
            msg = (f"largest batch that fits: {fits} ({r['model']} {r['mode']} {r['precision']}, "
                   f"{len(r['probes'])} probes)") if fits else f"{r['model']}: even the first probe ran out of memory"
            report.console().print(msg)
        elif r.get("status") == "ok" and r.get("data_time_fraction") is not None:
            report.console().print(f"{r['model']} {r['mode']} {r['precision']} batch {r['batch_size']}: "
                                   f"{r['data_time_fraction']:.1%} of the time waiting for the DataLoader")
        elif r.get("status") != "ok":
            report.console().print(f"[red]{r['model']} {r['mode']} {r['precision']} batch {r['batch_size']}: "
                                   f"{r['status']}: {r.get('error')}[/red]")
    return _finish(records, dev, args, err)


def _finish(records: list[dict], dev, args, err) -> int:
    """The emulated-NPU label, the output files, and the exit status (4 when a run failed)."""
    from ascendify import report
    from ascendify.bench import render

    if dev.emulated:
        report.console().print(f"[yellow]{EMULATED_LABEL}[/yellow]")
    written = render.write_all(records, json_path=args.json, out_dir=args.out, meta=_meta(dev, args))
    for w in written:
        err.print(f"wrote {w}")
    return 4 if any(r.get("status") == "error" for r in records) else 0


def _run_with_inputs(args) -> int:
    """``bench --model FILE:FACTORY --inputs SPEC [--loss FILE:FUNC]``: each model on the batch ``--inputs``
    makes, through ``harness.bench_module`` (any forward signature, nested inputs, the user's loss or the output's
    first floating tensor)."""
    from ascendify import report
    from ascendify.bench import harness, render
    from ascendify.precision import loading
    from ascendify.workloads import factory, models

    if not args.inputs:
        _err("--loss needs --inputs (a zoo model trains on its own loss)")
        return 2
    for flag, on in (("--find-max-batch", args.find_max_batch), ("--loader-workers", args.loader_workers),
                     ("--channels-last", args.channels_last)):  # fmt: skip
        if on:
            _err(f"{flag} does not combine with --inputs (the batch is the one --inputs makes)")
            return 2
    if args.batch_size and len(args.batch_size) > 1:
        _err("--inputs makes one batch: give one --batch-size (how many samples it holds), or none")
        return 2
    try:
        loss_fn = factory.load_function(args.loss) if args.loss else None
    except ValueError as e:
        _err(str(e))
        return 2
    err = report.console(stderr=True)
    dev = _open_device(args, err)  # before any backward (emulator)
    if isinstance(dev, int):
        return dev
    records: list[dict] = []
    for spec in args.model:
        for mode in args.mode:
            for prec in args.precision:
                try:
                    if factory.is_spec(spec):
                        model = factory.load_model(spec)
                    else:
                        model = models.build_model(spec, num_classes=args.num_classes, image_size=args.image_size,
                                                   seq_len=args.seq_len)  # fmt: skip
                    batch, kwargs = loading.batch(args.inputs, model)
                except (ValueError, models.ModelError) as e:
                    _err(str(e))
                    return 2
                err.print(f"{harness.display_name(spec)} {mode} {prec} ...", highlight=False)
                rec = harness.bench_module(
                    model, batch, kwargs, loss_fn=loss_fn, mode=mode, precision=prec, device=dev,
                    batch_size=args.batch_size[0] if args.batch_size else None, compile=args.compile,
                    compile_backend=args.compile_backend, count_flops=not args.no_flops,
                    name=harness.display_name(spec), **_timing(args),
                )
                rec["model_spec"] = spec
                records.append(rec)
    report.console().print(render.render_table(records))
    for r in records:
        if render.compile_line(r):
            report.console().print(render.compile_line(r), markup=False, highlight=False)
        if r.get("status") != "ok":
            report.console().print(f"[red]{r['model']} {r['mode']} {r['precision']}: {r['status']}: "
                                   f"{r.get('error')}[/red]")
    return _finish(records, dev, args, err)


@dataclasses.dataclass
class _MaxBatch:
    model: str
    mode: str
    precision: str
    batch_size: int | None
    device: str
    device_name: str
    emulated: bool
    status: str
    probes: list
    label: str | None


def _max_record(cfg, dev, best, probes) -> _MaxBatch:
    return _MaxBatch(cfg.model, cfg.mode, cfg.precision, best, dev.type, dev.name, dev.emulated, "max-batch",
                     [{"batch_size": p.batch_size, "status": p.status, "peak_memory_bytes": p.peak_memory_bytes}
                      for p in probes], EMULATED_LABEL if dev.emulated else None)


# ------------------------------------------------------------------------------------------------ compare


def run_compare(args) -> int:
    from ascendify import report
    from ascendify.bench import render

    try:
        a = [r for r in render.load_records(args.a) if r.get("status") != "max-batch"]
        b = [r for r in render.load_records(args.b) if r.get("status") != "max-batch"]
    except render.CompareError as e:
        _err(str(e))
        return 2
    rows = render.compare(a, b, pair_by=getattr(args, "pair_by", "model") or "model")
    name_a, name_b = render.side_label(a, args.a), render.side_label(b, args.b)
    title = f"A = {name_a} ({args.a})  B = {name_b} ({args.b})"
    con = report.console()
    cols = render.shown_columns(render.compare_columns("A", "B"), rows, ("memory_ratio", "note"))
    con.print(report.table(cols, rows, title=title))
    if any(r.get("emulated") for r in a + b):
        con.print(f"[yellow]a side was measured on the emulated NPU: {EMULATED_LABEL}[/yellow]")
    doc = {"schema": "ascendify.bench.compare/1", "a": {"file": str(args.a), "label": name_a},
           "b": {"file": str(args.b), "label": name_b}, "pair_by": getattr(args, "pair_by", "model") or "model",
           "rows": rows}
    if args.json:
        report.write_json(args.json, doc)
    if args.out:
        d = Path(args.out)
        report.write_json(d / "compare.json", doc)
        report.write_csv(d / "compare.csv", rows)
        ok = [r for r in rows if r["throughput_ratio"]]
        if ok:
            from ascendify.core.fileio import write_atomic

            png = report.plots.bar_plot(
                [f"{r['model']} {r['mode']} {r['precision']} b{r['batch_size']}" for r in ok],
                [r["throughput_ratio"] for r in ok], title=f"Throughput B/A: {name_b} over {name_a}",
                ylabel="ratio")
            write_atomic(d / "compare_throughput_ratio.png", png, mode=0o644)
    return 0


# ------------------------------------------------------------------------------------------------ loader


def run_loader(args) -> int:
    from ascendify import report
    from ascendify.bench import loader as L
    from ascendify.bench import render
    from ascendify.bench.device import cpu_count

    problem = _output_problem(args)
    if problem:
        _err(problem)
        return 2
    quick = args.quick
    image_size = args.image_size or (64 if quick else 224)
    batch_sizes = args.batch_size or ([8] if quick else [32])
    batches = args.batches or (3 if quick else 16)
    if batches < 2 or args.epochs < 1:
        _err("--batches must be >= 2 and --epochs >= 1")
        return 2
    compute_rate = args.compute_rate
    if args.bench_json:
        try:
            recs = [r for r in render.load_records(args.bench_json) if r.get("status") == "ok"]
        except render.CompareError as e:
            _err(str(e))
            return 2
        if not recs:
            _err(f"{args.bench_json}: no successful run to take a compute rate from")
            return 2
        compute_rate = max(r["throughput"] for r in recs)
    dev = _open_device(args)
    if isinstance(dev, int):
        return dev
    n_samples = args.samples or (32 if quick else 512)

    def make(augment: str):
        if args.data:
            return L.ImageFolder(args.data, image_size=image_size, augment=augment)
        return L.SyntheticJpegs(n_samples, source_size=max(96, image_size * 3 // 2), image_size=image_size,
                                augment=augment)

    try:
        dataset = make("cpu")
    except (FileNotFoundError, ValueError) as e:
        _err(str(e))
        return 2
    cores = cpu_count()
    workers = args.workers or sorted({w for w in (0, 1, 2, 4) if w <= max(cores, 1)})
    pin = args.pin_memory or ([False, True] if dev.type != "cpu" else [False])
    prefetch = args.prefetch or ([2] if quick else [2, 4])  # what the user gives wins over --quick
    persistent = args.persistent or ([True] if quick else [False, True])
    settings = L.grid(workers=workers, pin_memory=pin, prefetch=prefetch, persistent=persistent,
                      batch_sizes=batch_sizes)
    err = report.console(stderr=True)
    if dev.emulated:
        err.print(f"[yellow]device npu is the emulated NPU: {EMULATED_LABEL}[/yellow]")
    err.print(f"{len(settings)} loader settings, {batches} batches x {args.epochs} epochs each, "
              f"{'folder ' + args.data if args.data else f'{n_samples} synthetic JPEGs'}, {cores} cpu cores")
    from rich.progress import Progress

    with Progress(console=err, transient=True) as prog:
        task = prog.add_task("loader settings", total=len(settings))
        rows = L.loader_sweep(dataset, settings, device=dev, batches=batches, epochs=args.epochs,
                              on_result=lambda r: prog.advance(task))
    rec = L.recommend(rows)
    from ascendify.report import Column

    cols = [Column("label", "setting"), Column("status", kind="status"),
            Column("samples_per_s", "samples/s", "number"), Column("startup_s", "startup s", "number")]
    con = report.console()
    con.print(report.table(cols, rows, title=f"DataLoader settings on {dev.type} ({dev.name})"))
    result: dict = {"schema": "ascendify.bench.loader/1", "device": dev.describe(), "image_size": image_size,
                    "dataset": args.data or f"synthetic JPEGs ({n_samples})", "cpu_cores": cores, "rows": rows,
                    "recommendation": rec}
    if rec:
        con.print(f"recommended: [bold]{rec['label']}[/bold] ({rec['samples_per_s']:.1f} samples/s, {rec['why']})")
        fed = L.feeds(rec["samples_per_s"], compute_rate)
        result["feeds_compute"] = fed
        if fed:
            style = {"ok": "green", "warn": "yellow", "fail": "red"}[fed["status"]]
            con.print(f"[{style}]{fed['verdict']}[/{style}] (loader {fed['loader_samples_per_s']:.1f}/s, "
                      f"compute {fed['compute_samples_per_s']:.1f}/s)")
        if args.augment != "none":
            setting = L.LoaderSetting(**rec["setting"])
            err.print("comparing CPU-side and device-side augmentation...")
            aug: dict = {}
            cmp = L.compare_augmentation(make, setting, device=dev, image_size=image_size, batches=batches,
                                         epochs=args.epochs)
            for side in ("cpu", "device"):
                if args.augment in (side, "both"):
                    aug[side] = cmp[side]["samples_per_s"]
            aug["speedup_device_over_cpu"] = cmp["speedup_device_over_cpu"]
            result["augmentation"] = aug
            con.print(f"augmentation in the loader (cpu): {aug.get('cpu', float('nan')):.1f} samples/s; on the device "
                      f"({dev.type}{', emulated' if dev.emulated else ''}, batched): "
                      f"{aug.get('device', float('nan')):.1f} samples/s "
                      f"(x{aug['speedup_device_over_cpu']:.2f})")
    if dev.emulated:
        con.print(f"[yellow]{EMULATED_LABEL}[/yellow]")
    if args.json:
        report.write_json(args.json, result)
    if args.out:
        d = Path(args.out)
        report.write_json(d / "loader.json", result)
        report.write_csv(d / "loader.csv", [{"setting": r["label"], **r["setting"], "status": r["status"],
                                              "samples_per_s": r.get("samples_per_s"),
                                              "startup_s": r.get("startup_s")} for r in rows])
        ok = [r for r in rows if r.get("samples_per_s")]
        if ok:
            from ascendify.core.fileio import write_atomic

            png = report.plots.bar_plot([r["label"] for r in ok], [r["samples_per_s"] for r in ok],
                                        title=f"DataLoader settings on {dev.type}", ylabel="samples/s")
            write_atomic(d / "loader.png", png, mode=0o644)
    return 0 if rec else 4
