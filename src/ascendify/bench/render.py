"""What ``ascendify bench`` writes: the terminal table, JSON (one record per run), CSV, PNG plots, and the side by
side comparison of two JSON files (``ascendify bench compare A.json B.json``).

Figures measured on the emulated NPU carry ``emulated: true`` and the label "emulated: host speed, not NPU
speed" in every output: the table's title, the JSON, the CSV column and each plot's title.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ascendify.bench.device import EMULATED_LABEL

SCHEMA = "ascendify.bench/1"

CSV_COLUMNS = [
    "model", "mode", "precision", "batch_size", "device", "device_name", "emulated", "status", "throughput",
    "throughput_unit", "throughput_min", "throughput_max", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms",
    "peak_memory_bytes", "peak_memory_measure", "mfu", "achieved_tflops", "flops_per_step", "data_time_fraction",
    "channels_last", "compile", "compile_backend", "compile_ms", "compile_speedup", "eager_throughput", "steps",
    "warmup", "repeats", "threads", "label", "error",
]


def _columns():
    from ascendify.report import Column

    return [
        Column("model", kind="path"), Column("run"), Column("batch_size", "batch", "number"),
        Column("status", kind="status"), Column("throughput", "samples/s", "number"), Column("spread", "±"),
        Column("latency", "p50/99 ms", align="right"), Column("memory", "MiB", "number"),
        Column("mfu", "MFU %", "number"),
    ]


def fmt_ms(ms: float) -> str:
    """Milliseconds with 3-4 significant digits and no exponent: 0.123, 12.3, 9479."""
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def table_row(rec: dict) -> dict:
    lat = rec.get("latency_ms") or {}
    spread = rec.get("throughput_spread") or {}
    thr = rec.get("throughput")
    rel = None
    if thr and spread.get("max") is not None:
        rel = round(100.0 * (spread["max"] - spread["min"]) / thr, 1)
    mem = rec.get("peak_memory_bytes")
    return {
        "model": rec.get("model"), "run": f"{rec.get('mode')} {rec.get('precision')}",
        "batch_size": rec.get("batch_size"),
        "status": rec.get("status") if rec.get("status") == "ok" else f"{rec.get('status')}",
        "throughput": thr, "spread": None if rel is None else f"{rel / 2:.1f}%",
        "latency": f"{fmt_ms(lat['p50'])}/{fmt_ms(lat['p99'])}" if lat else None,
        "memory": None if mem is None else round(mem / 2**20, 1),
        "mfu": None if rec.get("mfu") is None else round(100 * rec["mfu"], 2),
    }


def compile_line(rec: dict) -> str | None:
    """``--compile``: compile time apart from step time, and the speed-up over the eager model."""
    if rec.get("status") != "ok" or rec.get("compile_speedup") is None:
        return None
    lat = rec.get("latency_ms") or {}
    return (f"{rec['model']} {rec['mode']} {rec['precision']} batch {rec['batch_size']}: torch.compile "
            f"(backend {rec.get('compile_backend')}): compile {rec['compile_ms'] / 1e3:.2f} s, step p50 "
            f"{fmt_ms(lat['p50'])} ms against eager {fmt_ms(rec['eager_latency_p50_ms'])} ms: "
            f"{rec['compile_speedup']:.2f}x the eager throughput")


def title_for(records: list[dict]) -> str:
    if not records:
        return "ascendify bench"
    r = records[0]
    title = f"ascendify bench on {r.get('device')} ({r.get('device_name')})"
    if any(x.get("emulated") for x in records):
        title += f"  [{EMULATED_LABEL}]"
    return title


def render_table(records: list[dict], title: str | None = None):
    from ascendify import report

    rows = [table_row(r) for r in records]
    # MFU needs a known peak (not on the CPU or the emulated NPU); memory a device allocator: no empty columns;
    # the status only where a run did not end "ok" (an OOM in a sweep): the table fits 80 columns in one part
    optional = ("mfu", "memory") if any(r.get("status") != "ok" for r in rows) else ("mfu", "memory", "status")
    cols = shown_columns(_columns(), [{**r, "status": None} if r.get("status") == "ok" else r for r in rows],
                         optional)
    return report.table(cols, rows, title=title or title_for(records))


def document(records: list[dict], meta: dict | None = None) -> dict:
    """The JSON document: ``records`` (one per run) plus where and how they were measured."""
    emulated = any(r.get("emulated") for r in records)
    doc = {"schema": SCHEMA, "tool": "ascendify bench", "emulated": emulated,
           "label": EMULATED_LABEL if emulated else None}
    doc.update(meta or {})
    doc["records"] = records
    return doc


def csv_rows(records: Iterable[dict]) -> list[dict]:
    rows = []
    for r in records:
        lat = r.get("latency_ms") or {}
        spread = r.get("throughput_spread") or {}
        row = {k: r.get(k) for k in CSV_COLUMNS}
        row.update({"throughput_min": spread.get("min"), "throughput_max": spread.get("max"),
                    "latency_p50_ms": lat.get("p50"), "latency_p90_ms": lat.get("p90"),
                    "latency_p99_ms": lat.get("p99")})
        rows.append(row)
    return rows


def _series_key(r: dict) -> str:
    parts = [r["model"], r["mode"], r["precision"]]
    if r.get("channels_last"):
        parts.append("channels_last")
    if r.get("compile"):
        parts.append("compiled")
    return " ".join(parts)


def plots(records: list[dict]) -> dict[str, bytes]:
    """PNG plots by file name: throughput and latency against batch size, and AMP against FP32."""
    from ascendify.report import plots as P

    ok = [r for r in records if r.get("status") == "ok" and r.get("throughput")]
    if not ok:
        return {}
    suffix = f"\n({EMULATED_LABEL})" if any(r.get("emulated") for r in ok) else ""
    dev = f"{ok[0]['device']} ({ok[0]['device_name']})"
    series: dict[str, list[dict]] = {}
    for r in sorted(ok, key=lambda r: r["batch_size"]):
        series.setdefault(_series_key(r), []).append(r)
    out: dict[str, bytes] = {}
    out["throughput_vs_batch.png"] = P.line_plot(
        {k: ([r["batch_size"] for r in v], [r["throughput"] for r in v]) for k, v in series.items()},
        title=f"Throughput on {dev}{suffix}", xlabel="batch size", ylabel="samples/s", integer_x=True)
    lat = {}
    for k, v in series.items():
        lat[f"{k} p50"] = ([r["batch_size"] for r in v], [r["latency_ms"]["p50"] for r in v])
        lat[f"{k} p99"] = ([r["batch_size"] for r in v], [r["latency_ms"]["p99"] for r in v])
    out["latency_vs_batch.png"] = P.line_plot(lat, title=f"Step latency on {dev}{suffix}", xlabel="batch size",
                                              ylabel="ms per step", logy=True, integer_x=True)
    precisions = {r["precision"] for r in ok}
    if "fp32" in precisions and len(precisions) > 1:
        by_key = {(r["model"], r["mode"], r["batch_size"], r["precision"]): r for r in ok}
        labels, values, colors = [], [], []
        palette = {"fp32": "#7f7f7f", "fp16": "#1f77b4", "bf16": "#2ca02c"}
        for (model, mode, bs, prec), r in sorted(by_key.items()):
            if (model, mode, bs, "fp32") not in by_key:
                continue
            labels.append(f"{model} {mode} b{bs} {prec}")
            values.append(r["throughput"])
            colors.append(palette.get(prec, "#ff7f0e"))
        if labels:
            out["amp_vs_fp32.png"] = P.bar_plot(labels, values, title=f"AMP against FP32 on {dev}{suffix}",
                                                ylabel="samples/s", colors=colors)
    return out


def write_all(records: list[dict], *, json_path: str | None = None, out_dir: str | None = None,
              meta: dict | None = None) -> list[str]:
    """Write the JSON (``json_path`` and/or ``out_dir/bench.json``), ``out_dir/bench.csv`` and the plots;
    returns the paths written."""
    from ascendify import report
    from ascendify.core.fileio import write_atomic

    doc = document(records, meta)
    written = []
    if json_path:
        report.write_json(json_path, doc)
        written.append(str(json_path))
    if out_dir:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        report.write_json(d / "bench.json", doc)
        report.write_csv(d / "bench.csv", csv_rows(records), CSV_COLUMNS)
        written += [str(d / "bench.json"), str(d / "bench.csv")]
        for name, png in plots(records).items():
            write_atomic(d / name, png, mode=0o644)
            written.append(str(d / name))
    return written


# ------------------------------------------------------------------------------------------------ compare


class CompareError(ValueError):
    """A file that is not a bench JSON; the message names it."""


def load_records(path: str | os.PathLike) -> list[dict]:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CompareError(f"{p}: not a JSON file ({e})") from None
    recs = doc.get("records") if isinstance(doc, dict) else doc
    if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
        raise CompareError(f"{p}: no 'records' list: write it with 'ascendify bench --json FILE'")
    for i, r in enumerate(recs):
        missing = [k for k in ("model", "mode", "precision", "batch_size") if k not in r]
        if missing:
            raise CompareError(f"{p}: record {i} lacks {', '.join(missing)}")
    return recs


def _key(r: dict) -> tuple:
    return (r["model"], r["mode"], r["precision"], r["batch_size"], bool(r.get("channels_last")),
            bool(r.get("compile")))


def _ratio(a: Any, b: Any) -> float | None:
    if not a or not b:
        return None
    return float(b) / float(a)


PAIR_BY = ("model", "config")


def config_key(r: dict) -> tuple:
    """A run's configuration without its model label: mode, precision, batch size, channels_last, compile and
    the batch (its shape, and its structure for ``--inputs`` runs)."""
    return (r["mode"], r["precision"], r["batch_size"], bool(r.get("channels_last")), bool(r.get("compile")),
            tuple(r.get("input_shape") or ()), r.get("inputs"))


def _paired(records: list[dict], pair_by: str) -> dict[tuple, dict]:
    """Records by pairing key: ``model`` (model label and configuration) or ``config`` (the configuration alone;
    the n-th run of a configuration in A pairs with the n-th in B, so an original and its migrated copy, whose
    labels differ, pair)."""
    if pair_by == "model":
        return {_key(r): r for r in records}
    seen: dict[tuple, int] = {}
    out = {}
    for r in records:
        k = config_key(r)
        n = seen[k] = seen.get(k, -1) + 1
        out[(*k, n)] = r
    return out


def compare(a: list[dict], b: list[dict], pair_by: str = "model") -> list[dict]:
    """Rows for every configuration in A or B: throughputs, p50 latencies, peak memory and the ratios B/A.
    ``pair_by``: ``model`` pairs runs of the same model label and configuration; ``config`` pairs runs of the same
    configuration whatever their labels (``model`` then reads ``A label | B label`` where they differ)."""
    if pair_by not in PAIR_BY:
        raise ValueError(f"pair_by must be one of {', '.join(PAIR_BY)}, not {pair_by!r}")
    ia, ib = _paired(a, pair_by), _paired(b, pair_by)
    rows = []
    for pk in list(dict.fromkeys([*ia, *ib])):
        ra, rb = ia.get(pk, {}), ib.get(pk, {})
        k = _key(ra or rb)
        if ra and rb and ra["model"] != rb["model"]:
            k = (f"{ra['model']} | {rb['model']}", *k[1:])
        ta, tb = ra.get("throughput"), rb.get("throughput")
        la = (ra.get("latency_ms") or {}).get("p50")
        lb = (rb.get("latency_ms") or {}).get("p50")
        ratio = _ratio(ta, tb)
        note = None
        if not ra or not rb:
            status, note = "skip", "only in A" if ra else "only in B"
        elif ra.get("status") != "ok" or rb.get("status") != "ok":
            status = "fail"
            note = ", ".join(f"{side} {r.get('status')}" for side, r in (("A", ra), ("B", rb)) if r.get("status") != "ok")
        else:
            status = "ok"
        rows.append({
            "model": k[0], "mode": k[1], "precision": k[2], "batch_size": k[3], "run": f"{k[1]} {k[2]}",
            "variant": " ".join(w for w, on in (("channels_last", k[4]), ("compiled", k[5])) if on) or None,
            "status_a": ra.get("status", "missing"), "status_b": rb.get("status", "missing"),
            "throughput_a": ta, "throughput_b": tb, "throughput_ratio": ratio,
            "latency_p50_a": la, "latency_p50_b": lb, "latency_ratio": _ratio(la, lb),
            "memory_a": ra.get("peak_memory_bytes"), "memory_b": rb.get("peak_memory_bytes"),
            "memory_ratio": _ratio(ra.get("peak_memory_bytes"), rb.get("peak_memory_bytes")),
            "status": status, "note": note, "model_a": ra.get("model"), "model_b": rb.get("model"),
        })
    return rows


def compare_columns(name_a: str, name_b: str):
    from ascendify.report import Column

    return [
        Column("model", kind="path", key=True), Column("run", key=True), Column("batch_size", "batch", "number", key=True),
        Column("status", kind="status"),
        Column("throughput_a", f"{name_a} /s", "number"), Column("throughput_b", f"{name_b} /s", "number"),
        Column("throughput_ratio", "B/A speed", "number"), Column("latency_ratio", "B/A p50", "number"),
        Column("memory_ratio", "B/A mem", "number"), Column("note"),
    ]


def shown_columns(columns, rows: list[dict], optional: tuple[str, ...]) -> list:
    """``columns`` without the ``optional`` ones that are empty in every row (MFU or memory where none was
    measured, a note column with nothing to say)."""
    return [c for c in columns if c.name not in optional or any(r.get(c.name) is not None for r in rows)]


def side_label(records: list[dict], path: str) -> str:
    if not records:
        return Path(path).name
    r = records[0]
    label = f"{r.get('device')} {r.get('device_name') or ''}".strip()
    if any(x.get("emulated") for x in records):
        label += " (emulated)"
    return label
