"""The bench stage: the discovered model at the batch it received, timed with ``bench``'s own harness in a child
for each side (:mod:`ascendify.port.bench_job`: the CPU, and the target), each alone on the machine; read back
with each figure's spread (an unstable pair is never compared) and drawn."""

from __future__ import annotations

from ascendify import report
from ascendify.port.jobs import Job, child_env, tail
from ascendify.port.options import TARGET_LABEL, Context
from ascendify.port.stages import train
from ascendify.port.stages.base import StageResult, add_job, cached_png, collect, failure, load_json

ID = "bench"


def jobs(ctx: Context) -> list[Job]:
    _, tsrc, _ = train.target_command(ctx)
    tdev = "cuda" if ctx.target == "cuda" else "npu"
    pick = ["--model", ctx.model] if ctx.model else []
    out: list[Job] = []
    for name, side, dev in (("bench-cpu", "golden", "cpu"), ("bench-target", "target", tdev)):
        env = child_env(ctx.lanes, drop=("ASCENDIFY_EMULATE",)) if dev == "cpu" else child_env(ctx.lanes)
        add_job(ctx, out, Job(
            name, ID, ["-m", "ascendify.port.bench_job", "--runs", str(ctx.runs), "--side", side, "--device", dev,
                       *pick, *(["--root", str(ctx.project if side == "golden" else tsrc)] if ctx.model else []),
                       "-o", str(ctx.out / "bench" / dev)],
            python=True, deps=(f"train-{side}",), env=env, timeout=900, exclusive=True))
    return out


def read(ctx: Context, jobs: list[Job], done: dict[str, StageResult]) -> StageResult:
    res = StageResult(ID)
    collect(res, jobs)
    records: dict[str, list[dict]] = {}
    meta: dict[str, dict] = {}
    errors = []
    for job in jobs:
        dev = job.argv[job.argv.index("--device") + 1]
        if job.skipped:
            continue
        if job.returncode == 4:  # nothing to bench (no model captured): said in its output
            meta["cpu" if job.name == "bench-cpu" else "target"] = {
                "skipped": tail(job.output, 1).removeprefix("bench: ")}
            continue
        if job.timed_out or job.returncode not in (0, 1):
            errors.append(failure(job))
            continue
        data = load_json(ctx.out / "bench" / dev / "bench.json")
        if data is None:
            errors.append(f"bench/{dev}/bench.json: missing or not JSON")
            continue
        key = "cpu" if job.name == "bench-cpu" else "target"
        records[key] = [r for r in data.get("records", []) if isinstance(r, dict)]
        meta[key] = {"device": dev, "device_name": data.get("device", {}).get("device_name"),
                     "emulated": bool(data.get("emulated")), "label": data.get("label")}
        res.files.append(f"bench/{dev}/bench.json")
    res.facts = {"records": records, "meta": meta}
    if all(j.skipped for j in jobs):
        res.headline = jobs[0].skipped or "skipped"
        return res
    if errors:
        res.status, res.error = "error", "\n\n".join(errors)
        res.headline = errors[0].splitlines()[0]
        return res
    best = {k: max((r.get("throughput") or 0.0 for r in v if r.get("status") == "ok"), default=0.0)
            for k, v in records.items()}
    res.facts["best"] = best
    # a figure whose timed windows disagree (a busy machine) is said with its spread, and never compared
    res.facts["unstable"] = {k: max(float(r.get("spread_ratio") or 1.0) for r in v if r.get("status") == "ok")
                             for k, v in records.items()
                             if any(r.get("status") == "ok" and r.get("stable") is False for r in v)}
    if not records:
        res.headline = "; ".join(m.get("skipped", "") for m in meta.values()) or "nothing measured"
        return res
    bad = [r for v in records.values() for r in v if r.get("status") not in ("ok", "oom")]
    res.status = "warn" if bad else "ok"
    model = next((r.get("model") for v in records.values() for r in v), "the model")
    mode = next((r.get("mode") for v in records.values() for r in v), "train")
    unstable = res.facts["unstable"]

    def rate(key: str) -> str:
        text = f"{best[key]:.3g} samples/s"
        return text + (f" (unstable: repeats differ {unstable[key]:.2g}x, machine busy)" if key in unstable else "")

    if "cpu" in best:
        parts = [f"CPU {rate('cpu')}"]
    else:  # not run (its run failed) or nothing to bench: never a speed of 0
        cpu_job = next((j for j in jobs if j.name == "bench-cpu"), None)
        why = (cpu_job.skipped if cpu_job is not None and cpu_job.skipped else None) \
            or meta.get("cpu", {}).get("skipped") or "not run"
        parts = [f"CPU not measured ({why})"]
    if "target" in best:
        tgt = f"{ctx.target_label} {rate('target')}"
        if meta.get("target", {}).get("emulated"):
            tgt += " (host speed, not NPU speed)"
        parts.append(tgt)
    res.headline = f"{model} {mode} step: " + ", ".join(parts)
    return res


# -- the section ----------------------------------------------------------------------------------------------


def section(sec: report.Section, res: StageResult, result) -> None:
    recs = res.facts.get("records", {})
    meta = res.facts.get("meta", {})
    rows = []
    for key in ("cpu", "target"):
        for r in recs.get(key, []):
            m = meta.get(key, {})
            dev = m.get("device_name") or r.get("device")
            if m.get("emulated"):
                dev = f"{dev} (emulated: host speed)"
            rows.append({"device": dev, "model": r.get("model"), "mode": r.get("mode"),
                         "batch": r.get("batch_size"), "precision": r.get("precision"), "status": r.get("status"),
                         "samples/s": r.get("throughput"),
                         "spread": (f"{r['spread_ratio']:.2g}x" + ("" if r.get("stable", True) else " unstable"))
                         if r.get("spread_ratio") else None,
                         "p50 ms": (r.get("latency_ms") or {}).get("p50"),
                         "p90 ms": (r.get("latency_ms") or {}).get("p90"),
                         "peak MiB": r["peak_memory_bytes"] / 2**20 if r.get("peak_memory_bytes") else None})
    cols = [report.Column("device"), report.Column("model"), report.Column("mode"),
            report.Column("batch", kind="number"), report.Column("precision"), report.Column("status", kind="status"),
            report.Column("samples/s", kind="number"), report.Column("spread"), report.Column("p50 ms", kind="number"),
            report.Column("p90 ms", kind="number"), report.Column("peak MiB", kind="number")]
    sec.table(cols, rows, caption="the model each run called, at the batch it received, with the run's AMP policy "
                                  "(training: forward, a proxy loss, backward, an optimizer step); spread: the "
                                  "fastest timed window over the slowest (over 1.3x after more tries: unstable, "
                                  "the machine was busy, and no speed-up is claimed from it)")
    runs = result.stages["train"].facts.get("runs", {})
    real = {r.get("label"): r.get("step_seconds") for r in runs.values() if r.get("step_seconds")}
    if real:
        sec.kv({f"step time in the real run: {k}": f"{1000 * v:.3g} ms" for k, v in real.items()})
    png = bench_png(result)
    if png:
        sec.image(png, caption=bench_caption(result))


def bench_png(result) -> bytes | None:
    """Best training throughput per device, as bars (None when bench did not run)."""
    def draw() -> bytes | None:
        facts = result.stages["bench"].facts
        best, meta = facts.get("best", {}), facts.get("meta", {})
        if not best:
            return None
        labels = ["CPU" if k == "cpu" else ("emulated NPU (host speed)" if meta.get(k, {}).get("emulated")
                                             else TARGET_LABEL[result.target]) for k in best]
        model = next((r.get("model") for v in facts.get("records", {}).values() for r in v), "model")
        return report.plots.bar_plot(labels, list(best.values()), title=f"step throughput ({model})",
                                     ylabel="samples/s", colors=["#4c72b0", "#dd8452"][: len(best)])

    return cached_png(result, "bench", draw)


def bench_caption(result) -> str:
    emulated = result.stages["bench"].facts.get("meta", {}).get("target", {}).get("emulated")
    return "samples/s, warm-up excluded" + ("; the emulated NPU's figure is the host's speed, not an NPU's"
                                            if emulated else "")
