"""PNG plots for reports: matplotlib with the Agg backend, imported on first use.

Every function returns PNG bytes, ready for :meth:`ascendify.report.Section.image` or a file.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def to_png(fig: Any, dpi: int = 110) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    plt = _plt()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def line_plot(
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    logy: bool = False,
    mark_x: float | None = None,
    mark_label: str | None = None,
    hline: float | None = None,
    hline_label: str | None = None,
    markers: bool = True,
    integer_x: bool = False,
    size: tuple[float, float] = (7.0, 3.6),
) -> bytes:
    """Lines (one per label, ``(xs, ys)``); ``mark_x`` draws a vertical marker, ``hline`` a threshold line;
    ``integer_x`` for counts (batch sizes): ticks at the values themselves, never 1.5."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=size)
    for i, (label, (xs, ys)) in enumerate(series.items()):
        ax.plot(list(xs), list(ys), label=label, color=PALETTE[i % len(PALETTE)], marker="o" if markers else None,
                markersize=3, linewidth=1.4)
    if logy:
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline, color="#888", linestyle="--", linewidth=1, label=hline_label)
    if mark_x is not None:
        ax.axvline(mark_x, color="#d62728", linestyle=":", linewidth=1.5, label=mark_label)
    if integer_x:
        xs_all = sorted({x for xs, _ in series.values() for x in xs})
        if 0 < len(xs_all) <= 12:
            ax.set_xticks(xs_all)
        else:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1 or hline_label or mark_label:
        ax.legend(fontsize=8)
    return to_png(fig)


def bar_plot(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str = "",
    ylabel: str = "",
    colors: Sequence[str] | None = None,
    size: tuple[float, float] = (7.0, 3.6),
) -> bytes:
    """Vertical bars with their values written on top."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=size)
    bars = ax.bar(list(labels), list(values), color=list(colors) if colors else PALETTE[0])
    for b, v in zip(bars, values, strict=False):
        ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                    fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if len(labels) > 6:
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    return to_png(fig)
