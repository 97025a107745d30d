"""What the trainer shows while it runs: a rich progress bar on a terminal, a line every ``log_every`` steps
(or every :data:`QUIET_S` seconds, whichever comes first) otherwise, and one line per epoch. Only rank 0 shows
anything."""

from __future__ import annotations

import sys
import time

from ascendify import report

QUIET_S = 30.0  # off a terminal, never longer than this without a line


class Progress:
    def __init__(self, cfg, ctx, device: str, emulated: bool, enabled: bool) -> None:
        self.cfg, self.enabled = cfg, enabled
        self.console = report.console(stderr=True)
        self.live = enabled and sys.stderr.isatty()
        self.bar = None
        self.task = None
        where = f"{device} (emulated: host speed, not NPU speed)" if emulated else device
        procs = f", {ctx.world_size} processes" if ctx.world_size > 1 else ""
        self.header = (f"ascendify train: {cfg.model} on {cfg.data}, {where}{procs}, amp {cfg.amp}, "
                       f"batch {cfg.batch_size}x{ctx.world_size}, {report.plural(cfg.epochs, 'epoch')}")

    def __enter__(self):
        if self.enabled:
            self.console.print(self.header)
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[stats]}"), TimeRemainingColumn(),
                                console=self.console, transient=True)
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def start_epoch(self, epoch: int, steps: int, done: int) -> None:
        self.epoch, self.steps = epoch, steps
        self._last = time.monotonic()
        if self.bar is not None:
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task = self.bar.add_task(f"epoch {epoch + 1}/{self.cfg.epochs}", total=steps, completed=done,
                                          stats="")

    def step(self, step: int, loss: float, acc: float, rate: float) -> None:
        stats = f"loss {loss:.4f}  acc {100 * acc:.1f}%  {rate:,.0f} samples/s"
        if self.bar is not None:
            self.bar.update(self.task, completed=step, stats=stats)
        elif self.enabled and ((self.cfg.log_every and step % self.cfg.log_every == 0)
                               or time.monotonic() - self._last >= QUIET_S):
            self._last = time.monotonic()
            self.console.print(f"  epoch {self.epoch + 1} step {step}/{self.steps}: {stats}")

    def end_epoch(self, row: dict) -> None:
        if self.enabled:
            report.print_wrapped(
                self.console,
                f"epoch {row['epoch']}/{self.cfg.epochs}: train loss {row['train_loss']:.4f} "
                f"acc {100 * row['train_acc']:.2f}% | val loss {row['val_loss']:.4f} acc {100 * row['val_acc']:.2f}% "
                f"| lr {row['lr']:.4g} | {row['epoch_time']:.1f}s, {row['throughput']:,.0f} samples/s")

    def note(self, text: str) -> None:
        if self.enabled:
            report.print_wrapped(self.console, text)
