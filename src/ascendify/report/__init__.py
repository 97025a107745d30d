"""One reporting layer for every verb: terminal tables, JSON, CSV, plots and a self-contained HTML page.

Importing this package is cheap: rich and matplotlib load only when a table is drawn or a plot is made.

>>> from ascendify import report
>>> cols = [report.Column("file", kind="path"), report.Column("sites", kind="number")]
>>> report.table_text(cols, [{"file": "src/train_gpt.py", "sites": 12}], width=40).splitlines()[1].split()
['file', 'sites']

- :mod:`ascendify.report.tables`: :class:`Column`, :func:`console`, :func:`table`, :func:`print_table`.
- :func:`write_json`, :func:`write_csv`, :func:`dumps_json`: atomic files, mode 0644 (umask permitting); they live
  in :mod:`ascendify.core.fileio`, below every layer that writes one.
- :mod:`ascendify.report.plots`: PNG line and bar plots (matplotlib, Agg).
- :mod:`ascendify.report.html`: :class:`HtmlReport`, one self-contained page (inline CSS, images as data URIs).
"""

from __future__ import annotations

from ascendify.core.fileio import dumps_json, write_csv, write_json
from ascendify.report import plots
from ascendify.report.html import HtmlReport, Section
from ascendify.report.tables import (
    STATUS_STYLES,
    Column,
    console,
    fold,
    format_bytes,
    format_value,
    plural,
    print_table,
    print_wrapped,
    status_style,
    table,
    table_text,
)

__all__ = [
    "STATUS_STYLES",
    "Column",
    "HtmlReport",
    "Section",
    "console",
    "fold",
    "dumps_json",
    "format_bytes",
    "format_value",
    "plots",
    "plural",
    "print_table",
    "print_wrapped",
    "status_style",
    "table",
    "table_text",
    "write_csv",
    "write_json",
]
