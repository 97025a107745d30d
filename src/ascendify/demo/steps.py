"""The demo's steps: which verb each runs (as a child process, see :mod:`ascendify.demo.jobs`) and how its
outputs are read back into a :class:`StepResult` (status, headline, facts for the checklist, files to link).

Steps, in order: ``doctor``, ``migrate``, ``train`` (the migrated trainer on the target, the unmodified original
on the CPU through ``ascendify run --to cpu``), ``compare`` (lockstep on the model, curves on the two runs),
``bench`` (the example's ResNet on the CPU and on the target), then the checklist and the report.

The target is where the NPU side runs: ``npu`` (a real Ascend NPU), ``emulated`` (ascendify's emulated NPU, on
the host CPU: the embedded default) or ``cuda`` (a GPU: the unmodified original runs there, the migrated copy
needs an NPU). The golden side is always the CPU in float32.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendify.demo.jobs import Job, child_env, tail

STEP_IDS = ("doctor", "migrate", "train", "compare", "bench")
ALL_STEPS = (*STEP_IDS, "checklist", "report")
TITLES = {
    "doctor": "Doctor: is this machine ready?",
    "migrate": "Migrate the CUDA project to torch_npu",
    "train": "Train: migrated on the target, original on the CPU",
    "compare": "Compare: lockstep model and training curves",
    "bench": "Bench: training speed",
    "checklist": "Migration checklist",
    "report": "Report",
}
TARGET_LABEL = {
    "emulated": "emulated NPU (host CPU)",
    "npu": "Ascend NPU",
    "cuda": "CUDA GPU",
}
SCRIPT = "train_gpt.py"


@dataclass(frozen=True)
class Sizes:
    """Problem sizes: tiny enough for a 2-core machine, big enough for a curve with a shape."""

    steps: int
    batch: int
    seq_len: int
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    dataset_tokens: int
    bench_batches: str
    bench_steps: int
    bench_warmup: int
    bench_repeats: int
    bench_image: int

    def train_args(self) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch), "--seq-len", str(self.seq_len),
                "--vocab-size", str(self.vocab), "--d-model", str(self.d_model), "--n-layers", str(self.n_layers),
                "--n-heads", str(self.n_heads), "--warmup-steps", str(max(1, self.steps // 5)),
                "--dataset-tokens", str(self.dataset_tokens), "--lr", "3e-3", "--min-lr", "3e-4",
                "--log-interval", "1", "--seed", "1337"]

    def model_expr(self) -> str:
        return (f"GPT(vocab_size={self.vocab}, seq_len={self.seq_len}, d_model={self.d_model}, "
                f"n_layers={self.n_layers}, n_heads={self.n_heads})")


QUICK = Sizes(steps=4, batch=2, seq_len=16, vocab=64, d_model=32, n_layers=2, n_heads=2, dataset_tokens=4096,
              bench_batches="2", bench_steps=2, bench_warmup=1, bench_repeats=1, bench_image=32)
DEFAULT = Sizes(steps=24, batch=4, seq_len=32, vocab=96, d_model=64, n_layers=2, n_heads=4, dataset_tokens=16384,
                bench_batches="4,8", bench_steps=4, bench_warmup=1, bench_repeats=2, bench_image=32)


@dataclass
class StepResult:
    """What one step found. ``status``: ok, warn, fail (a finding: a failed check, a divergence), error (the
    step crashed), skip. ``facts`` feed the checklist; ``files`` are paths relative to the demo's folder."""

    id: str
    status: str = "skip"
    headline: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    error: str | None = None

    @property
    def title(self) -> str:
        return TITLES[self.id]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "headline": self.headline,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "facts": self.facts,
            "files": self.files,
            "jobs": [j.to_dict() for j in self.jobs],
            "error": self.error,
        }


@dataclass
class Context:
    """Where everything is, for one demo run."""

    out: Path
    project: Path  # the bundled CUDA project (read only)
    target: str  # npu | emulated | cuda
    target_reason: str
    sizes: Sizes
    lanes: int
    skip: frozenset[str] = frozenset()

    @property
    def migrated(self) -> Path:
        return self.out / "migrate" / "npu_project"

    def rel(self, path: str | Path) -> str:
        try:
            return Path(path).resolve().relative_to(self.out.resolve()).as_posix()
        except ValueError:
            return str(path)

    @property
    def target_label(self) -> str:
        return TARGET_LABEL[self.target]


# ---------------------------------------------------------------------------------------------------------------
# the jobs


def verb_available(verb: str) -> bool:
    """Whether ``ascendify VERB`` exists in this build (its front-end module is there)."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"ascendify.commands.{verb}") is not None
    except (ImportError, ValueError):
        return False


def build_jobs(ctx: Context) -> list[Job]:
    """Every child process of the demo, in the order they should start (migrate first: others wait on it)."""
    s, out, lanes = ctx.sizes, ctx.out, ctx.lanes
    env = child_env(lanes)
    golden_env = child_env(lanes, drop=("ASCENDIFY_EMULATE",))
    original = ctx.project / SCRIPT
    jobs: list[Job] = []

    def add(job: Job) -> None:
        # the report shows commands relative to the demo's folder, the project by its name: no machine paths
        job.shown = job.shown.replace(str(out) + "/", "").replace(str(ctx.project), ctx.project.name)
        if job.step in ctx.skip:
            job.skipped = "skipped (--skip)"
        elif job.argv and not job.python and not verb_available(job.argv[0]):
            job.skipped = f"skipped: ascendify {job.argv[0]} is not available in this build"
        jobs.append(job)

    add(Job("migrate", "migrate",
            ["migrate", str(ctx.project), "-o", str(ctx.migrated), "--to", "npu", "--report",
             str(out / "migrate" / "report"), "-q"], env=env, timeout=300,
            shown=f"ascendify migrate {ctx.project.name} -o migrate/npu_project --to npu --report migrate/report"))
    add(Job("doctor", "doctor", ["doctor", "--out", str(out / "doctor"), "-q"], env=env, timeout=300,
            shown="ascendify doctor --out doctor"))
    train = out / "train"
    golden_args = [*s.train_args(), "--precision", "fp32", "--out-json", str(train / "golden_summary.json")]
    add(Job("train-golden", "train",
            ["run", "--to", "cpu", "--log", str(train / "run_cpu.json"), "-q", str(original), *golden_args],
            env=golden_env, cwd=str(train), timeout=600,
            shown=shlex.join(["ascendify", "run", "--to", "cpu", f"{ctx.project.name}/{SCRIPT}", *golden_args[:-2]])))
    target_args = [*s.train_args(), "--precision", "bf16", "--out-json", str(train / "target_summary.json")]
    if ctx.target == "emulated":
        argv = ["emulate", "--devices", "1", "-q", "--json", str(train / "emulate.json"), "--",
                "python", str(ctx.migrated / SCRIPT), *target_args]
        shown = shlex.join(["ascendify", "emulate", "--devices", "1", "--", "python",
                            f"migrate/npu_project/{SCRIPT}", *target_args[:-2]])
        add(Job("train-target", "train", argv, deps=("migrate",), env=env, cwd=str(train), timeout=600, shown=shown))
    elif ctx.target == "npu":
        add(Job("train-target", "train", [str(ctx.migrated / SCRIPT), *target_args, "--device", "npu"],
                deps=("migrate",), python=True, env=env, cwd=str(train), timeout=600,
                shown=shlex.join(["python", f"migrate/npu_project/{SCRIPT}", *target_args[:-2], "--device", "npu"])))
    else:  # cuda: the original, unmodified, on the GPU
        add(Job("train-target", "train", [str(original), *target_args, "--device", "cuda"], python=True, env=env,
                cwd=str(train), timeout=600,
                shown=shlex.join(["python", f"{ctx.project.name}/{SCRIPT}", *target_args[:-2], "--device", "cuda"])))
    # lockstep: the migrated model on the target under bf16 autocast against the original on the CPU in fp32
    golden_model = f"{ctx.project / 'models.py'}:{s.model_expr()}"
    if ctx.target == "cuda":
        target_model, deps, tdev = golden_model, (), "cuda"
    else:
        target_model, deps, tdev = f"{ctx.migrated / 'models.py'}:{s.model_expr()}", ("migrate",), "npu"
    inputs = f"{s.batch}x{s.seq_len}:int64:{s.vocab}"
    add(Job("lockstep", "compare",
            ["compare", "--model", target_model, "--golden-model", golden_model, "--golden", "cpu:fp32",
             "--target", f"{tdev}:bf16", "--inputs", inputs, "-o", str(out / "compare" / "lockstep")],
            deps=deps, env=env, timeout=600,
            shown=shlex.join(["ascendify", "compare", "--model", target_model.replace(str(out) + "/", ""),
                              "--golden-model", f"{ctx.project.name}/models.py:{s.model_expr()}",
                              "--golden", "cpu:fp32", "--target", f"{tdev}:bf16", "--inputs", inputs,
                              "-o", "compare/lockstep"])))
    bench_model = f"{ctx.project / 'models.py'}:ResNetMini"
    common = ["--model", bench_model, "--mode", "train", "--batch-size", s.bench_batches, "--steps",
              str(s.bench_steps), "--warmup", str(s.bench_warmup), "--repeats", str(s.bench_repeats),
              "--image-size", str(s.bench_image), "--num-classes", "10"]
    bench_dev = {"emulated": "npu", "npu": "npu", "cuda": "cuda"}[ctx.target]
    for name, dev in (("bench-cpu", "cpu"), ("bench-target", bench_dev)):
        add(Job(name, "bench", ["bench", *common, "--device", dev, "--out", str(out / "bench" / dev)],
                env=golden_env if dev == "cpu" else env, timeout=600,
                shown=shlex.join(["ascendify", "bench", *common, "--device", dev, "--out", f"bench/{dev}"]).replace(
                    str(ctx.project), ctx.project.name)))
    return jobs


# ---------------------------------------------------------------------------------------------------------------
# reading the outputs back


def _load_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _count(value: Any) -> int:
    if isinstance(value, (list, dict)):
        return len(value)
    return int(value or 0)


def _collect(res: StepResult, jobs: list[Job]) -> None:
    res.jobs = jobs
    res.seconds = max((j.seconds for j in jobs), default=0.0)
    res.cpu_seconds = sum(j.cpu_seconds for j in jobs)
    res.files = [*res.files]
    for j in jobs:
        if j.log and f"logs/{Path(j.log).name}" not in res.files:
            res.files.append(f"logs/{Path(j.log).name}")  # relative to the demo's folder, like every output


def _crashed(res: StepResult, job: Job) -> bool:
    """Mark ``res`` as an error when ``job`` did not finish (timed out, crashed, never started)."""
    if job.skipped:
        return False
    if job.timed_out:
        res.status, res.error = "error", f"{job.name} ran past {job.timeout:.0f} s and was stopped"
    elif job.returncode not in (0, 1):
        res.status, res.error = "error", f"{job.name} exited with status {job.returncode}:\n{tail(job.output)}"
    else:
        return False
    res.headline = res.headline or res.error.splitlines()[0]
    return True


def read_doctor(ctx: Context, jobs: list[Job]) -> StepResult:
    res = StepResult("doctor")
    _collect(res, jobs)
    (job,) = jobs
    if job.skipped:
        res.headline = job.skipped
        return res
    if _crashed(res, job):
        return res
    data = _load_json(ctx.out / "doctor" / "doctor.json")
    if data is None:
        res.status, res.error = "error", f"{ctx.out / 'doctor' / 'doctor.json'}: missing or not JSON"
        res.headline = res.error
        return res
    summ = data.get("summary", {})
    checks = {c.get("id"): c for c in data.get("checks", [])}
    res.facts = {"summary": summ, "checks": checks}
    res.files = ["doctor/doctor.json", "doctor/doctor.md"]
    res.status = "fail" if summ.get("fail") else ("warn" if summ.get("warn") else "ok")
    res.headline = (f"{summ.get('ok', 0)} checks ok, {summ.get('warn', 0)} warn, {summ.get('fail', 0)} fail, "
                    f"{summ.get('skip', 0)} skipped; NPU: {summ.get('npu', '?')}")
    _collect(res, jobs)
    return res


def read_migrate(ctx: Context, jobs: list[Job]) -> StepResult:
    res = StepResult("migrate")
    (job,) = jobs
    _collect(res, jobs)
    if job.skipped:
        res.headline = job.skipped
        return res
    if _crashed(res, job):
        return res
    data = _load_json(ctx.out / "migrate" / "report" / "report.json")
    if data is None:
        res.status, res.error = "error", "migrate/report/report.json: missing or not JSON"
        res.headline = res.error
        return res
    t = data.get("totals", {})
    res.facts = {"totals": t, "files": data.get("files", []), "rules": data.get("rules", {})}
    res.facts["cuda_visible_reads"] = _env_reads(ctx.migrated, "CUDA_VISIBLE_DEVICES")
    res.facts["nccl_literals"] = _literal_count(ctx.migrated, "nccl")
    res.files = ["migrate/report/report.md", "migrate/report/report.json", "migrate/report/changes.csv",
                 "migrate/report/unsupported.csv", "migrate/report/advice.csv", "migrate/npu_project"]
    res.status = "warn" if t.get("skipped") else "ok"
    res.headline = (f"{t.get('converted', 0)} of {t.get('cuda_sites', 0)} CUDA sites converted in "
                    f"{t.get('changed', 0)} files; {t.get('unsupported', 0)} unsupported, "
                    f"{t.get('native_ops', 0)} custom ops to port")
    _collect(res, jobs)
    return res


def _py_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts) if root.is_dir() else []


def _env_reads(root: Path, name: str) -> list[str]:
    """``file:line`` of every read of environment variable ``name`` in the Python files under ``root``."""
    pat = re.compile(r"environ(?:\.get)?\s*[\[(]\s*['\"]" + re.escape(name) + r"['\"]|getenv\(\s*['\"]" + re.escape(name))
    hits = []
    for p in _py_files(root):
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pat.search(line):
                hits.append(f"{p.relative_to(root).as_posix()}:{i}")
    return hits


def _literal_count(root: Path, word: str) -> list[str]:
    """``file:line`` of string literals exactly ``word`` (e.g. the backend name 'nccl')."""
    pat = re.compile(r"['\"]" + re.escape(word) + r"['\"]", re.IGNORECASE)
    hits = []
    for p in _py_files(root):
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pat.search(line.split("#", 1)[0]):
                hits.append(f"{p.relative_to(root).as_posix()}:{i}")
    return hits


_STEP_LINE = re.compile(r"^step\s+(\d+)\s*\|\s*loss\s+([-+0-9.eEnainf]+)\s*\|\s*lr\s+([-+0-9.eE]+)\s*\|\s*([0-9.]+)\s*ms")


def parse_history(output: str) -> dict[str, list[float]]:
    """The per-step history in a train_gpt.py log (``step N | loss X | lr Y | T ms | ...``) as columns.

    >>> parse_history("step     0 | loss 4.1206 | lr 3.00e-04 | 223.6 ms | 143 tok/s\\nother\\n")
    {'step': [0], 'loss': [4.1206], 'lr': [0.0003], 'step_time_ms': [223.6]}
    """
    cols: dict[str, list[float]] = {"step": [], "loss": [], "lr": [], "step_time_ms": []}
    for line in output.splitlines():
        m = _STEP_LINE.match(line.strip())
        if m:
            cols["step"].append(int(m.group(1)))
            cols["loss"].append(float(m.group(2)))
            cols["lr"].append(float(m.group(3)))
            cols["step_time_ms"].append(float(m.group(4)))
    return cols


def read_train(ctx: Context, jobs: list[Job]) -> StepResult:
    from ascendify import report

    res = StepResult("train")
    _collect(res, jobs)
    runs: dict[str, dict[str, Any]] = {}
    errors = []
    for job in jobs:
        side = "golden" if job.name == "train-golden" else "target"
        info: dict[str, Any] = {"command": job.shown, "returncode": job.returncode, "seconds": round(job.seconds, 2),
                                "skipped": job.skipped}
        runs[side] = info
        if job.skipped:
            continue
        if job.timed_out or job.returncode != 0:
            errors.append(f"{job.name} " + ("timed out" if job.timed_out else f"exited with status {job.returncode}")
                          + f":\n{tail(job.output)}")
            continue
        hist = parse_history(job.output)
        info["history"] = hist
        info["summary"] = _load_json(ctx.out / "train" / f"{side}_summary.json")
        if hist["step"]:
            path = ctx.out / "train" / f"{side}_history.json"
            report.write_json(path, hist)
            info["history_file"] = ctx.rel(path)
            res.files.append(ctx.rel(path))
        else:
            errors.append(f"{job.name}: no 'step N | loss X' lines in its output (see {ctx.rel(job.log or '')})")
    emu = _load_json(ctx.out / "train" / "emulate.json")
    if emu is not None:
        runs["target"]["emulator"] = {
            "ops_run": emu.get("ops_run"), "distinct_ops": emu.get("distinct_ops"),
            "cpu_fallback_on_npu": _count(emu.get("cpu_fallback_on_npu")), "rejected": _count(emu.get("rejected")),
            "unsupported_apis": _count(emu.get("unsupported_apis")),
            "float64_events": _count(emu.get("float64_events")),
            "fp16_overflow_events": _count(emu.get("fp16_overflow_events")),
            "peak_memory_bytes": emu.get("peak_memory_bytes")}
        res.files.append("train/emulate.json")
    redir = _load_json(ctx.out / "train" / "run_cpu.json")
    if redir is not None:
        runs["golden"]["redirected"] = _count(redir.get("redirected"))
        runs["golden"]["unsupported"] = _count(redir.get("unsupported"))
        runs["golden"]["unmapped"] = _count(redir.get("unmapped"))
        res.files.append("train/run_cpu.json")
    res.facts = {"runs": runs, "target": ctx.target}
    if all(j.skipped for j in jobs):
        res.headline = jobs[0].skipped or "skipped"
        return res
    if errors:
        res.status, res.error = "error", "\n\n".join(errors)
        res.headline = errors[0].splitlines()[0]
        return res
    parts = []
    for side, label in (("target", ctx.target_label), ("golden", "CPU")):
        r = runs.get(side, {})
        if r.get("history"):
            parts.append(f"{label}: {len(r['history']['step'])} steps, loss {r['history']['loss'][-1]:.4f}")
        elif r.get("skipped"):
            parts.append(f"{label}: {r['skipped']}")
    res.status = "ok" if not any(r.get("skipped") for r in runs.values()) else "warn"
    res.headline = "; ".join(parts)
    return res


def read_compare(ctx: Context, jobs: list[Job], train: StepResult | None, tolerance: float = 0.05) -> StepResult:
    """Lockstep (from its child's compare.json) and curves (compared here: the histories are small files)."""
    res = StepResult("compare")
    _collect(res, jobs)
    (job,) = jobs
    facts: dict[str, Any] = {}
    errors = []
    if job.skipped:
        facts["lockstep"] = {"skipped": job.skipped}
    elif job.timed_out or job.returncode not in (0, 1):  # 1: a divergence (a finding); 3: bad input
        facts["lockstep"] = {"error": True}
        errors.append("lockstep " + ("timed out" if job.timed_out else f"exited with status {job.returncode}")
                      + f":\n{tail(job.output)}")
    else:
        data = _load_json(ctx.out / "compare" / "lockstep" / "compare.json")
        if data is None:
            errors.append("compare/lockstep/compare.json: missing or not JSON")
        else:
            facts["lockstep"] = {k: data.get(k) for k in ("verdict", "golden", "target", "first_divergence",
                                                         "matched", "end_to_end")}
            res.files += ["compare/lockstep/compare.html", "compare/lockstep/compare.json",
                          "compare/lockstep/compare.csv"]
    runs = (train.facts.get("runs") if train else None) or {}
    a, b = runs.get("golden", {}).get("history"), runs.get("target", {}).get("history")
    if "train" in ctx.skip or not (a and b):
        why = "skipped (--skip train)" if "train" in ctx.skip else "needs both training runs, which did not finish"
        facts["curves"] = {"skipped": why}
    else:
        try:
            from ascendify.precision.compare_report import write_curves_outputs
            from ascendify.precision.curves import compare_curves

            curves = compare_curves(ctx.out / "train" / "golden_history.json",
                                    ctx.out / "train" / "target_history.json", tolerance=tolerance)
            write_curves_outputs(curves, ctx.out / "compare" / "curves")
            d = curves.to_dict()
            facts["curves"] = {"verdict": d.get("verdict"), "tolerance": tolerance, "first": d.get("first_outside"),
                               "a": "original on the CPU (fp32)", "b": f"migrated on the {ctx.target_label} (bf16)",
                               "series": d.get("series")}
            res.files += ["compare/curves/curves.html", "compare/curves/curves.json", "compare/curves/curves.csv"]
        except ImportError as e:  # a build without the precision package
            facts["curves"] = {"skipped": f"compare not available ({e})"}
        except Exception as e:  # noqa: BLE001 (a crash in one step is reported, the demo goes on)
            errors.append(f"curves: {type(e).__name__}: {e}")
    res.facts = facts
    if errors:
        res.status, res.error = "error", "\n\n".join(errors)
        res.headline = errors[0].splitlines()[0]
        return res
    verdicts = [facts[k].get("verdict") for k in ("lockstep", "curves") if facts.get(k, {}).get("verdict")]
    if not verdicts:
        res.headline = "; ".join(f"{k}: {facts[k].get('skipped')}" for k in ("lockstep", "curves"))
        return res
    res.status = "fail" if any(v not in ("match", "nothing to compare") for v in verdicts) else "ok"
    parts = []
    ls, cv = facts.get("lockstep", {}), facts.get("curves", {})
    if ls.get("verdict"):
        e2e = ls.get("end_to_end") or {}
        cos = e2e.get("cosine")
        parts.append(f"lockstep {ls['verdict'].upper()}" + (f" (cosine {cos:.6f})" if cos is not None else ""))
        if ls.get("first_divergence"):
            fd = ls["first_divergence"]
            parts[-1] += f" first at {fd.get('name', fd) if isinstance(fd, dict) else fd}"
    else:
        parts.append(f"lockstep {ls.get('skipped', 'not run')}")
    if cv.get("verdict"):
        parts.append(f"curves {cv['verdict'].upper()} within {tolerance:g}")
        if cv.get("first"):
            parts[-1] += f" (leaves at step {cv['first'].get('step')})"
    else:
        parts.append(f"curves {cv.get('skipped', 'not run')}")
    res.headline = "; ".join(parts)
    return res


def read_bench(ctx: Context, jobs: list[Job]) -> StepResult:
    res = StepResult("bench")
    _collect(res, jobs)
    records: dict[str, list[dict]] = {}
    meta: dict[str, dict] = {}
    errors = []
    for job in jobs:
        dev = job.argv[job.argv.index("--device") + 1]
        if job.skipped:
            continue
        if job.timed_out or job.returncode not in (0, 1):
            errors.append(f"{job.name} " + ("timed out" if job.timed_out else f"exited with status {job.returncode}")
                          + f":\n{tail(job.output)}")
            continue
        data = _load_json(ctx.out / "bench" / dev / "bench.json")
        if data is None:
            errors.append(f"bench/{dev}/bench.json: missing or not JSON")
            continue
        key = "cpu" if job.name == "bench-cpu" else "target"
        records[key] = [r for r in data.get("records", []) if isinstance(r, dict)]
        meta[key] = {"device": dev, "device_name": data.get("device", {}).get("device_name"),
                     "emulated": bool(data.get("emulated")), "label": data.get("label") or data.get("device", {}).get(
                         "label")}
        for f in ("bench.json", "bench.csv", "throughput_vs_batch.png", "latency_vs_batch.png"):
            if (ctx.out / "bench" / dev / f).exists():
                res.files.append(f"bench/{dev}/{f}")
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
    bad = [r for v in records.values() for r in v if r.get("status") not in ("ok", "oom")]
    res.status = "warn" if bad else "ok"
    parts = [f"CPU {best.get('cpu', 0):.3g} samples/s"]
    if "target" in best:
        tgt = f"{ctx.target_label} {best['target']:.3g} samples/s"
        if meta.get("target", {}).get("emulated"):
            tgt += " (host speed, not NPU speed)"
        parts.append(tgt)
    res.headline = "ResNetMini training: " + ", ".join(parts)
    return res
