"""The shared reporting layer: tables that fit, strict JSON, CSV, and a self-contained HTML page."""

from __future__ import annotations

import csv
import json
import os
import re

import pytest

from ascendify import report

COLS = [
    report.Column("file", kind="path"),
    report.Column("sites", kind="number"),
    report.Column("status", kind="status"),
    report.Column("note"),
]
ROWS = [
    {"file": "examples/cuda_project/train_gpt.py", "sites": 12, "status": "ok", "note": "converted " * 8},
    {"file": "examples/cuda_project/train_imagenet.py", "sites": 1234, "status": "fail", "note": "x"},
]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_table_fits_width_and_keeps_file_names_distinct(width):
    text = report.table_text(COLS, ROWS, title="Files", width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    for name in ("train_gpt.py", "train_imagenet.py"):
        assert any(name in line for line in text.splitlines()), (name, text)  # never folded or cut
    assert "1,234" in text


@pytest.mark.parametrize("width", [60, 80])
def test_a_table_too_wide_is_split_into_parts_that_keep_every_value_and_the_row_names(width):
    cols = [report.Column("layer"), report.Column("status", kind="status")] + [
        report.Column(f"metric_{i}", kind="number") for i in range(8)]
    rows = [{"layer": "encoder.layers.0.self_attn.out_proj", "status": "diverged",
             **{f"metric_{i}": 1234567.5 * (i + 1) for i in range(8)}},
            {"layer": "fc", "status": "ok", **{f"metric_{i}": 0.000123 * (i + 1) for i in range(8)}}]
    text = report.table_text(cols, rows, title="Layers", width=width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    parts = [line for line in lines if line.startswith("part ")]  # a line of its own under each part
    assert len(parts) >= 2 and parts[-1].strip() == f"part {len(parts)} of {len(parts)} (split to fit {width} columns)"
    for i in range(8):  # every header and every value whole, on some line
        assert sum(f"metric {i}" in line for line in lines) == 1
        assert report.format_value(1234567.5 * (i + 1)) in text and report.format_value(0.000123 * (i + 1)) in text
    assert sum(line.startswith("fc ") for line in lines) == len(parts)  # the row name repeated in every part
    assert text.count("diverged") == 1 and text.count("Layers") == 1
    titled = report.table_text(cols, rows, title="on npu [emulated: host speed]", width=width)
    assert "on npu [emulated: host speed]" in titled  # a title is text, not rich markup
    # what fits stays one table
    assert "part " not in report.table_text(cols[:4], rows, width=width)


def test_non_terminal_width_follows_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "72")
    assert report.console().width == 72
    monkeypatch.delenv("COLUMNS")
    assert report.console().width == report.tables.DEFAULT_WIDTH  # pytest captures output: not a terminal


def test_shorten_path_drops_leading_folders_only():
    assert report.tables.shorten_path("a/b/c/train_gpt.py", 16) == "…/c/train_gpt.py"
    # a name wider than the column keeps its folders on a first line (they were dropped: which folder's file?)
    assert report.tables.shorten_path("a/b/c/train_gpt.py", 5) == "…/c/\ntrain_gpt.py"
    assert report.tables.shorten_path("speculative_decoding/instruct_hf_assisted_decoding.py", 30) == \
        "speculative_decoding/\ninstruct_hf_assisted_decoding.py"
    assert report.tables.shorten_path("train_gpt.py", 5) == "train_gpt.py"
    assert report.tables.shorten_path("short.py", 40) == "short.py"
    # where only "…/name" would fit, the folders go on a line of their own (the whole directory was lost)
    assert report.tables.shorten_path("csrc_ext/csrc/fused_bias_gelu_kernel.cu", 28) == \
        "csrc_ext/csrc/\nfused_bias_gelu_kernel.cu"
    assert report.tables.shorten_path("a_very_long_folder_name/and_more/fused.cu", 12) == "…/and_more/\nfused.cu"
    assert report.tables.shorten_path("a_very_long_folder_name/fused.cu", 10) == "…der_name/\nfused.cu"


def test_bytes_read_in_the_best_unit():
    # the emulator's summary said "peak device memory 0.00 MiB" for a live 40-byte tensor
    assert [report.format_bytes(n) for n in (0, 40, 1536, 147_639_910, 3 << 30, None)] == [
        "0 B", "40 B", "1.50 KiB", "140.8 MiB", "3.00 GiB", ""]


def test_plural_and_values():
    assert report.plural(1, "file") == "1 file"
    assert report.plural(2, "file") == "2 files"
    assert report.plural(0, "match", "matches") == "0 matches"
    assert report.format_value(1234567) == "1,234,567"
    assert report.format_value(0.000012345) == "1.234e-05"
    assert report.format_value(11774.2) == "11,774" and report.format_value(1234.56) == "1235"  # no 1.177e+04
    assert report.format_value(float("nan")) == "nan"
    assert report.format_value(None) == ""


def test_json_is_strict_and_files_are_0644(tmp_path):
    old = os.umask(0o022)
    try:
        report.write_json(tmp_path / "r.json", {"x": float("nan"), "y": float("inf"), "z": [1.5]})
        report.write_csv(tmp_path / "r.csv", ROWS, ["file", "sites"])
    finally:
        os.umask(old)
    data = json.loads((tmp_path / "r.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert data == {"x": "nan", "y": "inf", "z": [1.5]}
    for name in ("r.json", "r.csv"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows[1] == {"file": "examples/cuda_project/train_imagenet.py", "sites": "1234"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_html_is_self_contained(tmp_path):
    r = report.HtmlReport("Precision <report>", subtitle="golden vs target")
    s = r.section("Verdict")
    s.verdict("fail", "first divergence at layers.1.mlp", "local error 3e-2 > 1e-5")
    s.table(COLS, ROWS * 10, highlight=lambda row: row["status"] == "fail")
    png = report.plots.line_plot({"err": ([0, 1, 2], [1e-7, 1e-6, 1e-2])}, title="error", logy=True, hline=1e-5,
                                 hline_label="threshold", mark_x=2, mark_label="first divergence")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    s.image(png, "error per node")
    s.section("Source").code("x = f(y)\nz = g(x)\n", first_line=41, highlight=42)
    r.section("Verdict")  # duplicate titles get distinct anchors
    r.write(tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "Precision &lt;report&gt;" in page
    assert re.search(r'class="verdict fail"', page)
    assert page.count('<tr class="highlight">') == 10
    assert "data:image/png;base64," in page
    assert 'class="line hl"><span class="ln">42</span>' in page
    assert 'id="verdict"' in page and 'id="verdict-2"' in page
    assert "oninput=" in page  # long tables get a filter box
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from outside


def test_batch_size_axes_tick_at_the_batch_sizes(monkeypatch):
    pytest.importorskip("matplotlib")
    from ascendify.report import plots

    figs = []
    monkeypatch.setattr(plots, "to_png", lambda fig, dpi=110: figs.append(fig) or b"")
    plots.line_plot({"a": ([1, 2], [3.0, 4.0])}, integer_x=True)
    plots.line_plot({"a": ([1, 2], [3.0, 4.0])})
    assert list(figs[0].axes[0].get_xticks()) == [1, 2]  # a bench sweep over batch 1, 2 showed 1.2, 1.4, ...
    assert len(figs[1].axes[0].get_xticks()) > 2


def test_long_lines_wrap_with_an_indent_not_at_column_0():
    import io

    con = report.console(file=io.StringIO(), width=40)
    report.print_wrapped(con, "MATCH: 23 matched calls, none with local error over its limit (cosine 0.999996)")
    report.print_wrapped(con, "  why: [not markup] " + "x" * 50)
    lines = con.file.getvalue().splitlines()
    assert lines[0].startswith("MATCH:") and lines[1].startswith("  ") and "0.999996)" in lines[1]
    assert max(len(line.rstrip()) for line in lines[:2]) <= 40
    assert lines[2] == "  why: [not markup]" and lines[3].startswith("    xxx")  # the long word on a line of its own


@pytest.mark.parametrize("width", [60, 80, 100])
def test_a_folded_text_beside_a_wide_path_column_loses_no_character(width):
    """rich shrinks the widest folding column (the path) and then restores its min_width: the line ran past the
    width and its last characters were cut ('> limi' / 'float32 wh'). The text column is held to the room left."""
    why = "output error 2.50e-01 > limit 1.0e-05 for torch.float32 while inputs agree (input error 0.0e+00)"
    cols = [report.Column("order", "#", kind="number"), report.Column("result", kind="status"),
            report.Column("name", "target call", kind="path"), report.Column("why")]
    rows = [{"order": 80, "result": "error", "name": "Module.blocks.1.attn.Attn.forward.0", "why": why}]
    text = report.table_text(cols, rows, width=width)
    lines = text.splitlines()
    assert all(len(x) <= width for x in lines)
    cells = [x.rsplit("│", 1)[1].strip() for x in lines[2:] if "│" in x]
    assert " ".join(cells) == why  # every word whole, in order
    names = [x.split("│")[2].strip() for x in lines[2:] if "│" in x]
    assert "".join(names) == "Module.blocks.1.attn.Attn.forward.0"  # whole, or folded at narrow widths


@pytest.mark.parametrize("width", [80, 100])
def test_identifiers_stay_whole_while_the_prose_column_wraps_at_spaces(width):
    """At 80 columns `ascendify run`'s Redirected table printed `torch.cuda.manual_seed_a` / `ll`: every text column
    got an equal share, so the column of API names broke mid-word while the prose column beside it had spaces to
    wrap at. A column keeps its widest word when that fits; the prose takes the room left."""
    apis = ["torch.cuda.manual_seed_all", "torch.cuda.get_device_properties", "torch.cuda.synchronize"]
    to = "cpu: the CPU generator stands in for the CUDA one (one device, seeded by manual_seed)"
    cols = [report.Column("api", "API"), report.Column("count", "calls", kind="number"),
            report.Column("first_site", "first call site", kind="path"), report.Column("to")]
    rows = [{"api": a, "count": 3, "first_site": "examples/train.py:12", "to": to} for a in apis]
    lines = report.table_text(cols, rows, title="Redirected", width=width).splitlines()
    assert all(len(x) <= width for x in lines)
    body = [x.split("│") for x in lines if "│" in x]
    assert [c[0].strip() for c in body if c[0].strip()] == apis  # each name whole, on one line
    words = " ".join(c[3].strip() for c in body).split()
    assert words == to.split() * 3  # the prose wrapped at its spaces: no word cut
    # a name wider than any share still folds (nothing is lost), and the table still fits
    long = [{**rows[0], "api": "x" * (width - 20)}]
    text = report.table_text(cols, long, width=width)
    assert all(len(x) <= width for x in text.splitlines())
    assert "".join(x.split("│")[0].strip() for x in text.splitlines() if "│" in x) == "x" * (width - 20)
