"""Training metrics: the history with the guide's keys, written as JSON, CSV, TensorBoard events and a PNG.

``history.json`` is a list of epochs, each ``{"epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr",
"epoch_time", "throughput"}`` (accuracies in [0, 1], throughput in samples/s over all processes); ``ascendify
compare --curves`` reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendify import report
from ascendify.core.fileio import write_atomic

KEYS = ["epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "epoch_time", "throughput"]


class Running:
    """Sums over an epoch (loss x samples, correct, samples), kept as floats so they checkpoint and reduce."""

    def __init__(self, state: dict[str, float] | None = None) -> None:
        self.loss = float((state or {}).get("loss", 0.0))
        self.correct = float((state or {}).get("correct", 0.0))
        self.count = float((state or {}).get("count", 0.0))

    def add(self, loss_sum: float, correct: float, count: float) -> None:
        self.loss += loss_sum
        self.correct += correct
        self.count += count

    def state(self) -> dict[str, float]:
        return {"loss": self.loss, "correct": self.correct, "count": self.count}

    def means(self) -> tuple[float, float]:
        n = max(self.count, 1.0)
        return self.loss / n, self.correct / n


class Writer:
    """Writes the history after every epoch (JSON, CSV, PNG) and scalars to TensorBoard, on rank 0 only."""

    def __init__(self, out: Path, enabled: bool, tensorboard: bool) -> None:
        self.out, self.enabled, self.tb = out, enabled, None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(out / "tb"))
            except ImportError:  # tensorboard not installed: the other outputs still come
                self.tb = None

    def scalar(self, tag: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(tag, value, step)

    def epoch(self, history: list[dict[str, Any]]) -> None:
        if not self.enabled:
            return
        row = history[-1]
        for key in KEYS[1:]:
            self.scalar(f"epoch/{key}", row[key], row["epoch"])
        if self.tb is not None:
            self.tb.flush()
        report.write_json(self.out / "history.json", history)
        report.write_csv(self.out / "history.csv", history, KEYS)
        write_atomic(self.out / "curves.png", curves_png(history))  # never a half-written picture

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def curves_png(history: list[dict[str, Any]]) -> bytes:
    """Loss and accuracy per epoch, train and validation, in one picture."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(epochs, [h["train_loss"] for h in history], "o-", label="train")
    a.plot(epochs, [h["val_loss"] for h in history], "s-", label="validation")
    a.set_title("loss")
    a.set_xlabel("epoch")
    b.plot(epochs, [100 * h["train_acc"] for h in history], "o-", label="train")
    b.plot(epochs, [100 * h["val_acc"] for h in history], "s-", label="validation")
    b.set_title("accuracy (%)")
    b.set_xlabel("epoch")
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return report.plots.to_png(fig)
