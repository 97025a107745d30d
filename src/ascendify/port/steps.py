"""The pipeline's steps: which verb each runs (as a child process, see :mod:`ascendify.port.jobs`) and how its
outputs are read back into a :class:`StepResult` (status, headline, facts for the checklist, files to link).

Steps, in order: ``doctor``, ``migrate``, ``train`` (the user's own command twice, no code change: the original
under ``ascendify run --to cpu`` and the migrated copy on the target, each watched by :mod:`ascendify.port.observe`
and stopped after ``--steps`` steps), ``compare`` (lockstep of the discovered model on the captured first batch,
and the two runs' loss curves), ``bench`` (the discovered model at the captured batch, a step on the CPU and on
the target), then the checklist and the report.

The target is where the NPU side runs: ``npu`` (a real Ascend NPU), ``emulated`` (ascendify's emulated NPU, on
the host CPU: the embedded default) or ``cuda`` (a GPU: the unmodified original runs there, the migrated copy
needs an NPU). The golden side is always the CPU.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendify.port.jobs import Job, child_env, tail
from ascendify.report.tables import plural

STEP_IDS = ("doctor", "migrate", "train", "compare", "bench")
ALL_STEPS = (*STEP_IDS, "checklist", "report")
TITLES = {
    "doctor": "Doctor: is this machine ready?",
    "migrate": "Migrate the CUDA project to torch_npu",
    "train": "Run: the migrated copy on the target, the original on the CPU",
    "compare": "Compare: the discovered model in lockstep, and the loss curves",
    "bench": "Bench: the discovered model, a step at the captured batch",
    "checklist": "Migration checklist",
    "report": "Report",
}
TARGET_LABEL = {
    "emulated": "emulated NPU (host CPU)",
    "npu": "Ascend NPU",
    "cuda": "CUDA GPU",
}


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
    """Where everything is, for one run of the pipeline."""

    out: Path  # the report folder: every step's outputs, report.html
    project: Path  # the user's CUDA project (read only)
    migrated: Path  # the migrated copy (migrate writes it)
    command: list[str]  # the user's own command, paths relative to the project
    target: str  # npu | emulated | cuda
    target_reason: str
    lanes: int
    steps: int = 10
    seconds: float | None = None
    to: str = "npu"  # npu | portable
    seed: int = 1234
    skip: frozenset[str] = frozenset()
    title: str = "port"  # the verb, in messages and the page title
    force_migrate: bool = False
    entry: str | None = None  # the entry script, relative to the project (for the diff in the report)
    model: str | None = None  # --model: a discovered model's name or class, or FILE.py:FACTORY(...)
    env: dict[str, str] = field(default_factory=dict)  # NAME=VALUE the command began with, for both runs
    overflow: bool = False  # --overflow: the target run under the overflow watch (runs/target/overflow.json)

    def rel(self, path: str | Path) -> str:
        try:
            return Path(path).resolve().relative_to(self.out.resolve()).as_posix()
        except ValueError:
            return str(path)

    @property
    def target_label(self) -> str:
        return TARGET_LABEL[self.target]

    @property
    def runs(self) -> Path:
        return self.out / "runs"

    def run_root(self, side: str) -> Path:
        """Where a run's scratch copy of its tree is: ``runs/SIDE/tree/NAME``, NAME the project's folder name,
        beside links to the project's neighbours."""
        return self.runs / side / "tree" / self.project.name


def shown_from(ctx: Context, text: str) -> str:
    """A command with this machine's paths made relative to the report folder, as it runs from there (the
    longest path first: the migrated copy's path may start with the project's).

    >>> c = Context(out=Path("/w/p-npu-report"), project=Path("/w/p"), migrated=Path("/w/p-npu"), command=[],
    ...             target="emulated", target_reason="", lanes=1)
    >>> shown_from(c, "ascendify migrate /w/p -o /w/p-npu --report /w/p-npu-report/migrate/report")
    'ascendify migrate ../p -o ../p-npu --report migrate/report'
    """
    text = text.replace(str(ctx.out) + "/", "")

    def rel(p: Path) -> str:  # relative where that is short (a sibling of the report folder), else the path itself
        r = os.path.relpath(p, ctx.out)
        return r if r.count("..") <= 2 else str(p)

    pairs = [(p, rel(p)) for p in (ctx.out, ctx.migrated, ctx.project, ctx.project.parent)]
    marks = {}
    for i, (path, rel) in enumerate(sorted(pairs, key=lambda x: -len(str(x[0])))):
        mark = f"\0{i}\0"  # a whole path only (followed by /, a space, a quote or the end), longest first
        text = re.sub(re.escape(str(path)) + r"(?=[/\s'\"]|$)", mark, text)
        marks[mark] = rel
    for mark, rel in marks.items():
        text = text.replace(mark, rel)
    return text


# ---------------------------------------------------------------------------------------------------------------
# the jobs

BUDGET_MARGIN = 45.0  # seconds past --time-budget before port stops a run itself (interpreter and torch start-up)
_DEVICE_VALUE = re.compile(r"^(?:cuda|gpu)(:\d+)?$", re.IGNORECASE)
_DEVICE_FLAGS = ("--device", "--devices", "--accelerator", "device")


def port_command(argv: list[str], device: str = "npu") -> list[str]:
    """The user's command for the migrated run: a CUDA device given on the command line means the NPU there
    (``--device=cuda``, ``--device cuda:1``, ``--accelerator gpu``); everything else is left as it is.

    >>> port_command(["python", "train.py", "--device=cuda", "--lr", "3e-4"])
    ['python', 'train.py', '--device=npu', '--lr', '3e-4']
    >>> port_command(["train.py", "--device", "cuda:1", "--gpu", "0"])
    ['train.py', '--device', 'npu:1', '--gpu', '0']
    """
    out = []
    prev = ""
    for tok in argv:
        new = tok
        if "=" in tok and tok.lstrip("-").split("=", 1)[0] in {f.lstrip("-") for f in _DEVICE_FLAGS} \
                and tok.startswith("-"):
            key, value = tok.split("=", 1)
            m = _DEVICE_VALUE.match(value.strip("'\""))
            if m:
                new = f"{key}={device}{m.group(1) or ''}"
        elif prev in _DEVICE_FLAGS and prev.startswith("-"):
            m = _DEVICE_VALUE.match(tok)
            if m:
                new = f"{device}{m.group(1) or ''}"
        out.append(new)
        prev = tok
    return out


def emulated_devices(command: list[str]) -> int:
    """How many emulated NPUs the migrated run gets: one per torchrun worker on this node, else one (a program
    that sees eight devices may wrap its model in DataParallel, which an NPU refuses).

    >>> emulated_devices(["torchrun", "--nproc-per-node", "2", "t.py"]), emulated_devices(["python", "t.py"])
    (2, 1)
    >>> emulated_devices(["python", "-m", "torch.distributed.run", "--nproc_per_node=4", "t.py"])
    4
    """
    for i, tok in enumerate(command):
        for flag in ("--nproc-per-node", "--nproc_per_node"):
            value = None
            if tok == flag and i + 1 < len(command):
                value = command[i + 1]
            elif tok.startswith(flag + "="):
                value = tok.split("=", 1)[1]
            if value is not None:
                return int(value) if value.isdigit() else 8  # "gpu"/"auto": as many as a node has
    return 1


def verb_available(verb: str) -> bool:
    """Whether ``ascendify VERB`` exists in this build (its front-end module is there)."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"ascendify.commands.{verb}") is not None
    except (ImportError, ValueError):
        return False


def observe_env(ctx: Context, side: str, root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that switch :mod:`ascendify.port.observe` on in a run; the project's folder also goes on
    ``PYTHONPATH`` (a command run from the project's root imports its packages, as ``pip install -e .`` or a
    ``PYTHONPATH=.`` in the user's shell would let it)."""
    path = (base or {}).get("PYTHONPATH")
    return {"PYTHONPATH": str(root) + (f":{path}" if path else ""), "ASCENDIFY_OBSERVE": str(ctx.runs / side),
            "ASCENDIFY_OBSERVE_STEPS": str(ctx.steps),
            "ASCENDIFY_OBSERVE_SECONDS": "" if ctx.seconds is None else str(ctx.seconds),
            "ASCENDIFY_OBSERVE_SEED": str(ctx.seed), "ASCENDIFY_OBSERVE_ROOT": str(root),
            "PYTHONHASHSEED": str(ctx.seed),
            **({"ASCENDIFY_OBSERVE_OVERFLOW": "1"} if ctx.overflow and side == "target" else {})}


def shown_env(ctx: Context, cmd: list[str]) -> str:
    """The ``NAME=VALUE`` words a run's command is shown with, so that it runs as shown: the command's own, and
    ``PYTHONPATH=.`` where the script sits below the project's root (the runs put the root on ``PYTHONPATH``:
    ``python projects/adder/adder.py`` imports the project's package from there).

    >>> c = Context(out=Path("/w/p-npu-report"), project=Path("/w/p"), migrated=Path("/w/p-npu"), command=[],
    ...             target="emulated", target_reason="", lanes=1, env={"PYTHONPATH": "/opt/deps", "X": "a b"})
    >>> shown_env(c, ["python", "projects/adder/adder.py"]), shown_env(c, ["python", "train.py"])
    ("PYTHONPATH=.:/opt/deps X='a b' ", "PYTHONPATH=/opt/deps X='a b' ")
    """
    env = dict(ctx.env)
    script = next((w for w in cmd if w.endswith(".py") and not w.startswith("-")), None)
    if script is not None and os.path.dirname(os.path.normpath(script)) not in ("", "."):
        env["PYTHONPATH"] = "." + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())


def build_jobs(ctx: Context) -> list[Job]:
    """Every child process of the pipeline, in the order they should start (migrate first: others wait on it)."""
    out, lanes = ctx.out, ctx.lanes
    env = child_env(lanes)
    golden_env = child_env(lanes, drop=("ASCENDIFY_EMULATE",))
    jobs: list[Job] = []

    def add(job: Job) -> None:
        # the report shows commands as they run from the report folder: no machine paths
        job.shown = shown_from(ctx, job.shown or shlex.join(["python" if job.python else "ascendify", *job.argv]))
        if job.step in ctx.skip:
            job.skipped = "skipped (--skip)"
        elif job.argv and not job.python and not verb_available(job.argv[0]):
            job.skipped = f"skipped: ascendify {job.argv[0]} is not available in this build"
        jobs.append(job)

    mig = ["migrate", str(ctx.project), "-o", str(ctx.migrated), "--to", ctx.to, "--report",
           str(out / "migrate" / "report"), "-q"] + (["--force"] if ctx.force_migrate else [])
    add(Job("migrate", "migrate", mig, env=env, timeout=600,
            shown=shlex.join(["ascendify", *mig[:-1]])))
    add(Job("doctor", "doctor", ["doctor", "--out", str(out / "doctor"), "-q"], env=env, timeout=300,
            shown="ascendify doctor --out doctor"))
    cmd = list(ctx.command)
    runs = ctx.runs
    # --time-budget: each run's own timer stops it at the budget; a run stuck where that timer cannot reach (a C
    # call, a collective) is stopped from here a little later, as a Ctrl-C would (the start-up is not in its budget)
    budget = None if ctx.seconds is None else ctx.seconds + BUDGET_MARGIN
    # each run works in a scratch copy of its tree: the user's project and the migrated copy stay as they were;
    # the project's neighbours are linked beside the copy, so that ../data resolves as without port
    groot, troot = ctx.run_root("golden"), ctx.run_root("target")
    mirror = ["--mirror", str(ctx.project.parent)]
    leave_out = [str(ctx.migrated), str(out)]
    add(Job("stage-golden", "train", ["-m", "ascendify.port.stage", str(ctx.project), str(groot), *mirror,
                                      *leave_out],
            python=True, env=env, timeout=600, ok_codes=(0,),
            shown=shlex.join(["python", "-m", "ascendify.port.stage", str(ctx.project), str(groot), *mirror])))
    golden_shown = f"cd {ctx.rel(groot)} && " + shown_env(ctx, cmd) + shlex.join(["ascendify", "run", "--to", "cpu",
                                                                                 "--", *cmd])
    add(Job("train-golden", "train",
            ["run", "--to", "cpu", "--log", str(runs / "golden" / "run.json"), "-q", "--", *cmd],
            deps=("stage-golden",), env={**golden_env, **ctx.env, **observe_env(ctx, "golden", groot, {**golden_env, **ctx.env})},
            cwd=str(groot), timeout=1800, ok_codes=(0,), shown=golden_shown, stop_after=budget))
    if ctx.target == "cuda":  # the original, unmodified, on the GPU
        tcmd, tsrc = cmd, ctx.project
        argv = ["run", "--to", "cuda", "-q", "--", *cmd]
        deps: tuple[str, ...] = ("stage-target",)
    else:
        tcmd, tsrc = port_command(cmd, "npu"), ctx.migrated
        deps = ("stage-target",)
        if ctx.target == "emulated":
            argv = ["emulate", "--devices", str(emulated_devices(cmd)), "-q", "--json",
                    str(runs / "target" / "emulate.json"), "--", *tcmd]
        else:
            argv = ["run", "--to", "npu", "-q", "--", *tcmd]
    add(Job("stage-target", "train", ["-m", "ascendify.port.stage", str(tsrc), str(troot), *mirror, *leave_out],
            python=True, deps=() if ctx.target == "cuda" else ("migrate",), env=env, timeout=600, ok_codes=(0,),
            shown=shlex.join(["python", "-m", "ascendify.port.stage", str(tsrc), str(troot), *mirror])))
    verb = argv[0]
    add(Job("train-target", "train", argv, deps=deps, env={**env, **ctx.env, **observe_env(ctx, "target", troot,
                                                                                          {**env, **ctx.env})},
            cwd=str(troot), timeout=1800, ok_codes=(0,), stop_after=budget,
            shown=f"cd {ctx.rel(troot)} && " + shown_env(ctx, tcmd) + shlex.join(["ascendify", verb, *argv[1:3], "--",
                                                                                  *tcmd])))
    tdev = "cuda" if ctx.target == "cuda" else "npu"
    pick = ["--model", ctx.model] if ctx.model else []
    roots = ["--project", str(ctx.project), "--migrated", str(tsrc)] if ctx.model else []
    add(Job("lockstep", "compare",
            ["-m", "ascendify.port.lockstep", "--runs", str(runs), "--target-device", tdev, *pick, *roots, "-o",
             str(out / "compare" / "lockstep")], python=True, deps=("train-golden", "train-target"), env=env,
            timeout=900))
    for jname, side, dev in (("bench-cpu", "golden", "cpu"), ("bench-target", "target", tdev)):
        add(Job(jname, "bench",
                ["-m", "ascendify.port.benchjob", "--runs", str(runs), "--side", side, "--device", dev, *pick,
                 *(["--root", str(ctx.project if side == "golden" else tsrc)] if ctx.model else []), "-o",
                 str(out / "bench" / dev)], python=True, deps=(f"train-{side}",),
                env=golden_env if dev == "cpu" else env, timeout=900, exclusive=True))
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


def failure(job: Job) -> str:
    """What went wrong with ``job``: a first line that says it (the status and the last line the child printed,
    usually the error), then the tail of its output.

    >>> j = Job("lockstep", "compare", [], returncode=2, output="lots\\nlockstep: --model netX: no such model")
    >>> failure(j).splitlines()[0]
    'lockstep exited with status 2: --model netX: no such model'
    """
    if job.timed_out:
        return f"{job.name} ran past {job.timeout:.0f} s and was stopped\n{tail(job.output)}"
    lines = [x.strip() for x in job.output.strip().splitlines() if x.strip()]
    last = lines[-1] if lines else "(it printed nothing)"
    for prefix in (f"{job.name}: ", "lockstep: ", "bench: ", "stage: "):
        last = last.removeprefix(prefix)
    return f"{job.name} exited with status {job.returncode}: {last}\n{tail(job.output)}"


def _crashed(res: StepResult, job: Job) -> bool:
    """Mark ``res`` as an error when ``job`` did not finish (timed out, crashed, never started)."""
    if job.skipped:
        return False
    if job.timed_out:
        res.status, res.error = "error", f"{job.name} ran past {job.timeout:.0f} s and was stopped"
    elif job.returncode not in (0, 1):
        res.status, res.error = "error", failure(job)
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
                 "migrate/report/unsupported.csv", "migrate/report/advice.csv",
                 os.path.relpath(ctx.migrated, ctx.out)]
    res.status = "warn" if t.get("skipped") else "ok"
    left = int(t.get("report_only") or 0)  # listed for a person (DataParallel: a fix only --unsafe applies)
    res.headline = (f"{t.get('converted', 0)} of {t.get('cuda_sites', 0)} CUDA sites converted in "
                    f"{plural(int(t.get('changed') or 0), 'file')}; "
                    + (f"{left} left to you (unsupported.csv), " if left else "")
                    + f"{t.get('unsupported', 0)} unsupported, {t.get('native_ops', 0)} custom ops to port")
    if t.get("kept"):  # an earlier port's output, fixed by hand since: the runs use the person's fixes
        res.headline += f"; {t['kept']} hand-edited files kept (--force overwrites them)"
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



def main_model(obs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The model the program trains: the one whose parameters the first optimizer holds, else the largest.

    >>> main_model({"models": [{"index": 0, "params": 5, "optimizers": []},
    ...                        {"index": 1, "params": 3, "optimizers": [0]}]})["index"]
    1
    """
    models = (obs or {}).get("models") or []
    if not models:
        return None
    for opt in range(len((obs or {}).get("optimizers") or []) or 1):
        owned = [m for m in models if opt in (m.get("optimizers") or [])]
        if owned:
            return max(owned, key=lambda m: m.get("params") or 0)
    return max(models, key=lambda m: m.get("params") or 0)


def is_factory(selector: str | None) -> bool:
    """``FILE.py:FACTORY(...)`` (build the model), as against the name or class of a discovered model.

    >>> is_factory("models.py:GPT(n_layers=2)"), is_factory("netG"), is_factory(None)
    (True, False, False)
    """
    return bool(selector) and ".py:" in selector


def select_model(obs: dict[str, Any] | None, selector: str | None) -> dict[str, Any] | None:
    """The discovered model ``selector`` names (the name the code holds it under, its class, or its qualified
    class name), else the main model when ``selector`` is empty; None when nothing matches.

    >>> obs = {"models": [{"index": 0, "name": "netG", "class": "Generator", "qualname": "__main__.Generator"},
    ...                   {"index": 1, "name": "netD", "class": "Discriminator", "qualname": "m.Discriminator"}]}
    >>> select_model(obs, "netD")["index"], select_model(obs, "Generator")["index"], select_model(obs, "x")
    (1, 0, None)
    """
    if not selector or is_factory(selector):
        return main_model(obs)
    for m in (obs or {}).get("models") or []:
        if selector in (m.get("name"), m.get("class"), m.get("qualname")):
            return m
    return None


def history_of(obs: dict[str, Any] | None) -> dict[str, list[float]]:
    """The per-step history of an observed run as columns: ``step``, ``loss`` (the first ``backward()`` of each
    step; ``loss_2``... for the next ones, a GAN's generator loss), ``step_time_ms``. A run without steps (an
    inference script) gives the main model's output mean per call as ``output_mean`` instead.

    >>> history_of({"iterations": [{"step": 0, "seconds": 0.5, "losses": [2.0, 1.0]},
    ...                           {"step": 1, "seconds": 0.25, "losses": [1.5, 0.9]}]})
    {'step': [0, 1], 'step_time_ms': [500.0, 250.0], 'loss': [2.0, 1.5], 'loss_2': [1.0, 0.9]}
    """
    its = (obs or {}).get("iterations") or []
    cols: dict[str, list[float]] = {"step": [], "step_time_ms": []}
    width = max((len(it.get("losses") or []) for it in its), default=0)
    for k in range(width):
        cols["loss" if k == 0 else f"loss_{k + 1}"] = []
    for it in its:
        losses = it.get("losses") or []
        if len(losses) != width:  # a step with another number of backwards: keep the columns aligned
            losses = (losses + [float("nan")] * width)[:width]
        cols["step"].append(it.get("step"))
        cols["step_time_ms"].append(round(1000.0 * float(it.get("seconds") or 0.0), 3))
        for k, v in enumerate(losses):
            cols["loss" if k == 0 else f"loss_{k + 1}"].append(v)
    if not its and not (obs or {}).get("training"):  # a training program stopped before its first step has none
        m = main_model(obs)
        outs = (m or {}).get("outputs") or []
        if outs:
            return {"step": list(range(len(outs))), "output_mean": [o["output_mean"] for o in outs],
                    "output_abs_mean": [o["output_abs_mean"] for o in outs]}
    return cols


def step_time(obs: dict[str, Any] | None) -> float | None:
    """Median seconds per step, the first (warm-up, compilation, discovery) left out when there are more."""
    its = (obs or {}).get("iterations") or []
    secs = sorted(float(it.get("seconds") or 0.0) for it in its[1:] or its)
    if not secs:
        return None
    mid = len(secs) // 2
    return secs[mid] if len(secs) % 2 else 0.5 * (secs[mid - 1] + secs[mid])


def compiled_sides(train: StepResult | None) -> list[str]:
    """The runs (``original``, ``migrated``) whose models ran inside torch.compile's ``OptimizedModule``."""
    models = ((train.facts if train else None) or {}).get("models") or {}
    return [label for side, label in (("golden", "original"), ("target", "migrated"))
            if any("(in OptimizedModule)" in (r.get("class") or "") for r in models.get(side) or [])]


def describe_models(obs: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per discovered model: name, class, where defined, parameters, optimizers, batch, AMP."""
    rows = []
    opts = (obs or {}).get("optimizers") or []
    for m in (obs or {}).get("models") or []:
        fc = m.get("first_call") or {}
        ac = fc.get("autocast") or {}
        rows.append({
            "model": m.get("name") or m.get("class"),
            "class": m.get("class") + (f" (in {m['wrapper']})" if m.get("wrapper") else ""),
            "defined at": m.get("defined_at"),
            "params": m.get("params"),
            "trainable": m.get("trainable"),
            "optimizer": ", ".join(f"{opts[i]['class']}" for i in m.get("optimizers") or [] if i < len(opts))
            or ("none (frozen or by hand)" if (obs or {}).get("iterations") else "none"),
            "batch": fc.get("batch_size"),
            "inputs": ", ".join("x".join(str(d) for d in t["shape"]) + f" {t['dtype']}" for t in fc.get("inputs") or []),
            "AMP": f"{ac.get('dtype')} autocast on {ac.get('device_type')}" if ac.get("enabled") else "off (fp32)",
            "mode": "train" if m.get("trained") else (
                ("train" if fc.get("training") else "eval") + ("" if fc.get("grad_enabled", True) else ", no grad")),
        })
    return rows


def _side_label(ctx: Context, side: str) -> str:
    if side == "golden":
        return "original (unmodified) on the CPU, via ascendify run --to cpu"
    if ctx.target == "cuda":
        return "original on the CUDA GPU"
    return f"migrated copy on the {ctx.target_label}"


def number_text(x: Any, spec: str = ".4g") -> str:
    """A number short; a loss (or a cosine) that went inf/NaN comes back from JSON as a string and is said as it is.

    >>> number_text(0.123456), number_text("NaN"), number_text(None), number_text(0.5, ".2f")
    ('0.1235', 'NaN', 'None', '0.50')
    """
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def read_train(ctx: Context, jobs: list[Job]) -> StepResult:
    """The two runs (observe.json, history, the run reports); with ``--overflow`` also the migrated run's overflow
    check (``facts["overflow"]``, :func:`read_overflow`), said at the end of the headline."""
    res = _read_train(ctx, jobs)
    if ctx.overflow:
        o = res.facts["overflow"] = read_overflow(ctx, res)
        if (ctx.runs / "target" / "overflow.json").is_file():
            res.files.append(ctx.rel(ctx.runs / "target" / "overflow.json"))
        if res.headline and not o.get("skipped"):
            res.headline += "; overflow: " + overflow_text(o, short=True)
    return res


def overflow_text(o: dict[str, Any], short: bool = False) -> str:
    """One line on the overflow check of the migrated run (``facts["overflow"]``).

    >>> f = {"api": "mm", "direction": "forward", "module": "Net.attn", "module_class": "Attn",
    ...      "autograd_node": None, "file": "train.py", "line": 26, "dtype": "float16"}
    >>> overflow_text({"overflows": 3, "calls_checked": 900, "first": f, "skipped_steps": [], "gradscaler_updates": 0})
    '3 new inf/NaN in 900 calls, first mm (forward) in Net.attn (Attn) at train.py:26, float16'
    >>> overflow_text({"overflows": 0, "calls_checked": 900, "first": None}, short=True)
    'no new inf/NaN in 900 calls'
    """
    if o.get("skipped"):
        return f"not checked: {o['skipped']}"
    first = o.get("first")
    if not first:
        text = f"no new inf/NaN in {o.get('calls_checked') or 0:,} calls"
    else:
        n = o.get("overflows") or 0
        place = f"{first['module']} ({first['module_class']})" if first.get("module") else (
            first.get("autograd_node") or "no module")
        at = f"{first.get('file') or '?'}:{first.get('line') or '?'}"
        text = (f"{n:,} new inf/NaN in {o.get('calls_checked') or 0:,} calls, first {first['api']} "
                f"({first['direction']})")
        text += f" at {at}" if short else f" in {place} at {at}, {first.get('dtype')}"
    sk, ups = o.get("skipped_steps") or [], o.get("gradscaler_updates") or 0
    if ups:
        text += f"; GradScaler skipped {len(sk)} of {ups} steps"
    return text


def read_overflow(ctx: Context, train: StepResult) -> dict[str, Any]:
    """``--overflow``: the migrated run's ``runs/target/overflow.json`` (written by the observer, one per rank), in
    the fields of ``dump --overflow``'s overflow.json: ``first`` (the first new inf/NaN of rank 0, else of the
    first rank that had one), ``overflows`` and ``calls_checked`` (all ranks), ``npu_overflow_mode``,
    ``gradscaler_updates`` and ``skipped_steps`` (rank 0), ``findings`` (rank 0's first 20), with ``notes`` on what
    the watch changed in that run; or ``skipped`` saying why there is none."""
    target = (train.facts.get("runs") or {}).get("target") or {}
    files = sorted((ctx.runs / "target").glob("overflow*.json"))
    data = [d for d in (_load_json(f) for f in files) if d is not None]
    if not data:
        if "train" in ctx.skip or target.get("skipped"):
            why = "the migrated run did not run" + (f" ({target['skipped']})" if target.get("skipped") else "")
        elif not target:
            why = "the migrated run did not run"
        else:
            why = ("the migrated run left no overflow.json (it ended before the program started: see its log)")
        return {"requested": True, "skipped": why}
    data.sort(key=lambda d: d.get("rank") or 0)
    main = data[0]
    first_of = next((d for d in data if d.get("first")), None)
    out: dict[str, Any] = {
        "requested": True,
        "file": ctx.rel(ctx.runs / "target" / "overflow.json"),
        "ranks": len(data),
        "overflows": sum(int(d.get("overflows") or 0) for d in data),
        "calls_checked": sum(int(d.get("calls_checked") or 0) for d in data),
        "first": first_of["first"] if first_of else None,
        "first_rank": first_of.get("rank") if first_of else None,
        "npu_overflow_mode": main.get("npu_overflow_mode"),
        "gradscaler_updates": main.get("gradscaler_updates") or 0,
        "skipped_steps": main.get("skipped_steps") or [],
        "steps_seen": main.get("steps_seen"),
        "findings": (main.get("findings") or [])[:20],
    }
    notes = ["the migrated run ran under the watch: its step time includes the check's cost, and the emulator's "
             "op counts include the check's reductions"]
    models = (train.facts.get("models") or {}).get("target") or []
    if any("(in OptimizedModule)" in (r.get("class") or "") for r in models):
        notes.append("the program compiles its model with torch.compile, which does not compile under the watch "
                     "(Dynamo skips frames while a TorchDispatchMode is active): the watched run ran eager; port "
                     "without --overflow to check the compiled run")
    if not models:
        notes.append("no model (an nn.Module with parameters) was called: every call of the run was still "
                     "watched, with no module to name")
    out["notes"] = notes
    return out


def _read_train(ctx: Context, jobs: list[Job]) -> StepResult:
    from ascendify import report

    res = StepResult("train")
    _collect(res, jobs)
    runs: dict[str, dict[str, Any]] = {}
    errors: list[tuple[str, str]] = []
    for job in jobs:
        if job.name.startswith("stage-"):
            if not job.skipped and job.returncode not in (0, None):
                errors.append(("golden" if job.name == "stage-golden" else "target",
                               f"{job.name} (the scratch copy for the run) exited with status {job.returncode}: "
                               f"{tail(job.output, 3)}"))
            continue
        side = "golden" if job.name == "train-golden" else "target"
        info: dict[str, Any] = {"command": job.shown, "returncode": job.returncode, "seconds": round(job.seconds, 2),
                                "skipped": job.skipped, "label": _side_label(ctx, side)}
        runs[side] = info
        stopped_by_hand = (job.skipped or "").startswith("interrupted")
        if job.skipped and not stopped_by_hand:
            continue
        obs = _load_json(ctx.runs / side / "observe.json")
        info["observe"] = obs
        stopped = (obs or {}).get("stopped") or ""
        if job.stopped_at is not None and not job.timed_out:  # past the budget, stopped from here: not a crash
            stopped = (f"time budget of {ctx.seconds:g} s spent" + ("" if (obs or {}).get("iterations") else
                       " before the first step") + f" (stopped by port after {job.stopped_at:.0f} s)")
            info["stopped_by_port"] = True
            if obs is not None:
                obs["stopped"], obs["seconds_asked"] = stopped, ctx.seconds
        elif not stopped_by_hand and (job.timed_out or job.returncode != 0):
            errors.append((side, failure(job)))
            info["failure"] = _first_user_frame(job.output)
            info["known_errors"] = known_errors(job.output)
        if obs is None:
            if job.stopped_at is not None:
                info.update(stopped=stopped, seconds_asked=ctx.seconds)
            if not stopped_by_hand and not job.timed_out and job.returncode == 0:
                errors.append((side, f"{job.name}: the run left no observe.json (see {ctx.rel(job.log or '')})"))
            continue
        hist = history_of(obs)
        info["history"] = hist
        info["stopped"] = stopped
        info["step_unit"] = obs.get("step_unit")
        info["training"] = bool(obs.get("training") or obs.get("step_unit"))
        info["seconds_asked"] = obs.get("seconds_asked")
        info["last_line"] = last_line(job.output)
        info["ranks"] = 1 + len(list((ctx.runs / side).glob("observe.rank*.json")))
        info["step_seconds"] = step_time(obs)
        mm = main_model(obs)
        info["main_model"] = mm.get("index") if mm else None
        bs = ((mm or {}).get("first_call") or {}).get("batch_size")
        info["batch_size"] = bs
        if info["step_seconds"] and bs:
            info["samples_per_s"] = bs / info["step_seconds"]
        if hist.get("step"):
            path = ctx.runs / side / "history.json"
            report.write_json(path, hist)
            info["history_file"] = ctx.rel(path)
            res.files.append(ctx.rel(path))
        res.files.append(ctx.rel(ctx.runs / side / "observe.json"))
    emu = _load_json(ctx.runs / "target" / "emulate.json")
    if emu is not None and "target" in runs:
        runs["target"]["emulator"] = {
            "ops_run": emu.get("ops_run"), "distinct_ops": emu.get("distinct_ops"),
            "cpu_fallback_on_npu": _count(emu.get("cpu_fallback_on_npu")), "rejected": _count(emu.get("rejected")),
            "unsupported_apis": _count(emu.get("unsupported_apis")),
            "float64_events": _count(emu.get("float64_events")),
            "fp16_overflow_events": _count(emu.get("fp16_overflow_events")),
            "peak_memory_bytes": emu.get("peak_memory_bytes")}
        gm = emu.get("graph_mode")
        if gm:  # torch.compile on the emulated NPU: graphs, breaks and recompilations with their first cause
            runs["target"]["emulator"]["graph_mode"] = {k: gm.get(k) for k in (
                "compiled_graphs", "graph_breaks", "first_graph_break", "break_storm", "recompiles",
                "first_recompile", "recompile_loop")}
        res.files.append(ctx.rel(ctx.runs / "target" / "emulate.json"))
    redir = _load_json(ctx.runs / "golden" / "run.json")
    if redir is not None and "golden" in runs:
        runs["golden"]["redirected"] = _count(redir.get("redirected"))
        # which calls the reference run's answers came from: the branch it took (torch.accelerator's, as on a GPU)
        runs["golden"]["redirected_apis"] = [{k: r.get(k) for k in ("api", "count", "first_site", "to")}
                                             for r in (redir.get("redirected") or [])[:30] if isinstance(r, dict)]
        runs["golden"]["unsupported"] = _count(redir.get("unsupported"))
        runs["golden"]["unmapped"] = _count(redir.get("unmapped"))
        res.files.append(ctx.rel(ctx.runs / "golden" / "run.json"))
    gm = [r for r in describe_models((runs.get("golden") or {}).get("observe"))]
    tm = [r for r in describe_models((runs.get("target") or {}).get("observe"))]
    res.facts = {"runs": runs, "target": ctx.target, "models": {"golden": gm, "target": tm},
                 "param_counts_agree": [r["params"] for r in gm] == [r["params"] for r in tm]}
    for r in runs.values():  # the big observe dicts stay in their files; the facts keep what the report shows
        obs = r.pop("observe", None) or {}
        r["optimizers"] = obs.get("optimizers") or []
        r["loss_fn"] = obs.get("loss_fn")
        r["loss_series"] = obs.get("loss_series") or []
        r["grad_scaler"] = obs.get("grad_scaler")
        r["functions"] = obs.get("functions") or {}
        r["notes"] = obs.get("notes") or []
        r["random_draws_on_device"] = obs.get("random_draws_on_device") or []
    sides = [j for j in jobs if j.name.startswith("train-")]
    if sides and all(j.skipped for j in sides):
        res.headline = sides[0].skipped or "skipped"
        done = {s: len((r.get("history") or {}).get("step") or []) for s, r in runs.items() if r.get("history")}
        if done:
            res.headline += ": " + ", ".join(f"{'original' if s == 'golden' else 'migrated'} {plural(n, 'step')}"
                                             for s, n in done.items())
        return res
    golden_failed = any(side == "golden" for side, _ in errors)
    if errors:
        if golden_failed:
            res.status = "error"
            known = (runs.get("golden") or {}).get("known_errors") or []
            why = f": {known[0]['title']} ({known[0]['fix']})" if known else ""
            where = (runs.get("golden") or {}).get("failure")
            res.error = ("the original program itself failed under ascendify run --to cpu"
                         + (f" ({where})" if where else "") + ", nothing the port did (the migrated copy is kept)"
                         f"{why}\n\n" + "\n\n".join(e for _, e in errors))
        else:
            res.status = "fail"
            where = (runs.get("target") or {}).get("failure")
            res.error = ("only the migrated copy failed" + (f" ({where})" if where else "")
                         + ": a finding of the port\n\n" + "\n\n".join(e for _, e in errors))
        res.facts["failed"] = [side for side, _ in errors]
        res.headline = res.error.splitlines()[0]
        return res
    parts = []
    for side, label in (("target", ctx.target_label), ("golden", "CPU")):
        r = runs.get(side, {})
        h = r.get("history") or {}
        if h.get("loss"):
            ranks = f" on {r['ranks']} ranks" if (r.get("ranks") or 1) > 1 else ""
            parts.append(f"{label}: {plural(len(h['step']), 'step')}{ranks}, loss {number_text(h['loss'][-1])}")
        elif r.get("training"):
            parts.append(f"{label}: no training step" + (" within the time budget"
                                                          if "time budget" in (r.get("stopped") or "") else ""))
        elif h.get("output_mean"):
            parts.append(f"{label}: {len(h['step'])} model calls, no training step")
        elif r.get("skipped"):
            parts.append(f"{label}: {r['skipped']}")
        else:
            parts.append(f"{label}: no model call seen")
    res.status = "ok" if not any(r.get("skipped") for r in runs.values()) else "warn"
    if not res.facts["param_counts_agree"] and gm and tm:
        res.status = "fail"
        parts.append("the two runs' models differ in parameter count")
    res.headline = "; ".join(parts)
    return res


def last_line(output: str) -> str | None:
    """The program's last line of output, short (what it said before it ended by itself: ``Exiting.``), not a
    line of ours (``ascendify ...``).

    >>> last_line("epoch 1\\nUnable to locate sufficient 2 gpus to run this example. Exiting.\\n")
    'Unable to locate sufficient 2 gpus to run this example. Exiting.'
    """
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line and not line.startswith(("ascendify", "$ ")):
            return line if len(line) <= 160 else line[:157] + "..."
    return None


def known_errors(output: str) -> list[dict[str, str]]:
    """The known errors (``doctor --explain``'s knowledge base) found in a run's output, last first: the one
    that ended the run is usually the last."""
    try:
        from ascendify.doctor import explain
    except ImportError:  # a build without the doctor
        return []
    seen, out = set(), []
    for hit in reversed(explain.match_text(output[-200_000:])):
        e = hit["entry"]
        if e["id"] not in seen:
            seen.add(e["id"])
            out.append({"id": e["id"], "title": e["title"], "fix": explain.specific_fix(e, hit["line"], output),
                        "line": hit["line"].strip()[:300]})
    return out


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


_EXC = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Z]\w*)(?::\s?(.*))?$")


def _exception_line(output: str) -> str:
    """The exception of the last traceback, short: its class without the module path and its message, the
    message's next line added when the first says nothing (``InductorError: LoweringException: AssertionError:``
    then ``target: aten.var_mean.correction``). Not the program's last line, which for Dynamo errors is advice
    on environment variables."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return ""
    for j in range(starts[-1] + 1, len(lines)):
        line = lines[j]
        if not line or line[0].isspace() or line.startswith("["):
            continue
        m = _EXC.match(line.rstrip())
        if not m:
            continue
        text = (m.group(2) or "").strip()
        msg = f"{m.group(1)}: {text}" if text else m.group(1)
        if m.group(2) is not None and (not text or text.endswith(":")):  # "X:" with its message on the next line
            nxt = next((x.strip() for x in lines[j + 1 : j + 4] if x.strip()), "")
            msg = f"{msg.rstrip(':')}: {nxt}" if nxt else msg.rstrip(":")
        return msg if len(msg) <= 160 else msg[:157] + "..."
    return ""


def _first_user_frame(output: str) -> str | None:
    """The last traceback frame outside torch, site-packages and ascendify (where the user's code failed),
    with the exception line."""
    lines = output.splitlines()
    frames = [(i, m) for i, m in enumerate(_FRAME.match(line) for line in lines) if m]
    user = [(i, m) for i, m in frames
            if not any(s in m.group(1) for s in ("site-packages", "/torch/", "ascendify", "<frozen"))]
    last = _exception_line(output) or (output.strip().splitlines()[-1] if output.strip() else "")
    if not user:
        return last or None
    i, m = user[-1]
    code = lines[i + 1].strip() if i + 1 < len(lines) else ""
    if ":" not in last and code and code != last and not code.startswith(("File ", "^", "~", "[")):  # bare: its line
        last += f" at `{code}`"
    return f"{Path(m.group(1)).name}:{m.group(2)} in {m.group(3)}: {last}"


def read_compare(ctx: Context, jobs: list[Job], train: StepResult | None, tolerance: float = 0.05) -> StepResult:
    """Lockstep (from its child's compare.json) and curves (compared here: the histories are small files)."""
    res = StepResult("compare")
    _collect(res, jobs)
    (job,) = jobs
    facts: dict[str, Any] = {}
    errors = []
    if job.skipped:
        facts["lockstep"] = {"skipped": job.skipped}
    elif job.timed_out or job.returncode not in (0, 1):  # 1: a divergence (a finding)
        facts["lockstep"] = {"error": True}
        msg = tail(job.output)
        if job.returncode == 4:  # nothing to compare: said in its output
            last = msg.splitlines()[-1] if msg else "no model to compare"
            facts["lockstep"] = {"skipped": last.removeprefix("lockstep: ")}
        else:
            errors.append(failure(job))
    else:
        data = _load_json(ctx.out / "compare" / "lockstep" / "compare.json")
        if data is None:
            errors.append("compare/lockstep/compare.json: missing or not JSON")
        else:
            facts["lockstep"] = {k: data.get(k) for k in ("verdict", "golden", "target", "first_divergence",
                                                         "matched", "end_to_end")}
            weights = _load_json(ctx.out / "compare" / "lockstep" / "weights.json") or {}
            facts["lockstep"]["weights"] = {"differ": weights.get("differ") or [], "copied": weights.get("copied"),
                                            "compared": weights.get("compared")}
            facts["lockstep"]["model"] = (data.get("meta") or {}).get("model")
            if (data.get("meta") or {}).get("random_draws"):  # calls that draw in eval mode: not comparable
                facts["lockstep"]["random_draws"] = data["meta"]["random_draws"]
            grads = _load_json(ctx.out / "compare" / "lockstep" / "gradients.json") or {}
            facts["gradients"] = grads
            if grads.get("verdict") == "divergence" and facts["lockstep"]["verdict"] == "match":
                facts["lockstep"]["verdict"] = "divergence"
            if weights.get("differ") and not weights.get("copied"):
                facts["lockstep"]["verdict"] = "divergence" if facts["lockstep"]["verdict"] == "match" else \
                    facts["lockstep"]["verdict"]
            res.files += ["compare/lockstep/compare.html", "compare/lockstep/compare.json",
                          "compare/lockstep/compare.csv", "compare/lockstep/weights.json",
                          "compare/lockstep/gradients.json"]
    compiled = compiled_sides(train)
    if compiled and facts.get("lockstep", {}).get("verdict"):
        facts["lockstep"]["eager_model"] = (
            f"the program compiles its model with torch.compile ({' and '.join(compiled)}); lockstep runs the "
            "eager model (torch.compile's OptimizedModule unwrapped), the training runs are the compiled ones")
    runs = (train.facts.get("runs") if train else None) or {}
    a, b = runs.get("golden", {}).get("history"), runs.get("target", {}).get("history")
    if "train" in ctx.skip or not (a and b and a.get("step") and b.get("step")):
        idle = [label for (x, label) in ((a, "the original"), (b, "the migrated copy")) if x is not None and
                not x.get("step")]
        failed = (train.facts.get("failed") if train else None) or not (a is not None and b is not None)
        why = ("skipped (--skip train)" if "train" in ctx.skip else
               "needs both runs, which did not both finish" if failed or not idle else
               "no step to compare: " + ("neither run made a step" if len(idle) == 2 else f"{idle[0]} made none"))
        facts["curves"] = {"skipped": why}
    else:
        try:
            from ascendify.precision.compare_render import write_curves_outputs
            from ascendify.precision.curves import compare_curves

            n = min(len(a["step"]), len(b["step"]))
            a = {k: v[:n] for k, v in a.items()}
            b = {k: v[:n] for k, v in b.items()}
            curves = compare_curves(a, b, tolerance=tolerance)
            write_curves_outputs(curves, ctx.out / "compare" / "curves")
            d = curves.to_dict()
            what = "loss" if "loss" in a else "output"
            facts["curves"] = {"verdict": d.get("verdict"), "tolerance": tolerance, "first": d.get("first_outside"),
                               "a": "original on the CPU", "b": f"migrated on the {ctx.target_label}",
                               "series": d.get("series"), "what": what}
            from ascendify.port import proof

            flat = [v for v in (proof.constant_loss(runs.get(sd) or {}) for sd in ("golden", "target")) if v]
            if what == "loss" and flat:  # agrees with anything: said, and the lockstep decides
                facts["curves"]["constant"] = flat[0]
            bad = [proof.first_nonfinite(runs.get(sd) or {}) for sd in ("golden", "target")]
            if all(bad):
                facts["curves"]["nonfinite"] = f"{bad[0][1]} on both sides from step {min(bad)[0]}"
                if min(bad)[0] <= (a["step"] or [0])[0]:  # not one step where both are finite: no curve at all
                    facts["curves"]["verdict"] = "nothing to compare"
            draws = runs.get("target", {}).get("random_draws_on_device") or []
            facts["curves"]["random_draws_on_device"] = draws
            if d.get("verdict") != "match" and draws and facts["curves"]["verdict"] != "nothing to compare":
                facts["curves"]["verdict"] = "not comparable"
                facts["curves"]["why"] = not_comparable_why(draws, ctx.target_label)
            res.files += ["compare/curves/curves.html", "compare/curves/curves.json", "compare/curves/curves.csv"]
        except ImportError as e:  # a build without the precision package
            facts["curves"] = {"skipped": f"compare not available ({e})"}
        except Exception as e:  # noqa: BLE001 (a crash in one step is reported, the pipeline goes on)
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
    res.status = "fail" if any(v not in ("match", "nothing to compare", "not comparable") for v in verdicts) else (
        "warn" if "not comparable" in verdicts else "ok")
    parts = []
    ls, cv = facts.get("lockstep", {}), facts.get("curves", {})
    if ls.get("verdict"):
        e2e = ls.get("end_to_end") or {}
        cos = e2e.get("cosine")
        parts.append(f"lockstep {ls['verdict'].upper()}" + (f" (cosine {number_text(cos, '.6f')})"
                                                             if cos is not None else ""))
        if ls.get("first_divergence"):
            fd = ls["first_divergence"]
            parts[-1] += f" first at {fd.get('name', fd) if isinstance(fd, dict) else fd}"
        elif ls["verdict"] == "not comparable" and ls.get("random_draws"):
            parts[-1] += f": {random_in_forward(ls['random_draws'])}"
        if ls.get("eager_model"):
            parts[-1] += " on the eager model"
        gr = facts.get("gradients") or {}
        if gr.get("verdict") == "match":
            parts[-1] += f", gradients match ({gradients_counted(gr)})"
        elif gr.get("verdict") == "divergence":
            bad = len(gr.get("differ") or []) + len(gr.get("missing") or [])
            parts[-1] += f", {bad} gradient(s) differ, first {gr.get('first') or gr['missing'][0]['name']}"
        nw = len((ls.get("weights") or {}).get("differ") or [])
        if nw and not (ls.get("weights") or {}).get("copied"):
            parts[-1] += f"; {nw} weight tensor(s) differ before the first step"
    else:
        parts.append(f"lockstep {ls.get('skipped', 'not run')}")
    if cv.get("verdict") == "not comparable":
        d0 = (runs.get("target", {}).get("random_draws_on_device") or [{}])[0]
        parts.append(f"{cv.get('what', 'loss')} curves NOT COMPARABLE (random draws on the device: "
                     f"{d0.get('api')} at {d0.get('first_at')})")
    elif cv.get("verdict") == "nothing to compare":
        why = f"the losses are {cv['nonfinite']}" if cv.get("nonfinite") else "no loss column in common"
        parts.append(f"{cv.get('what', 'loss')} curves: nothing to compare ({why})")
    elif cv.get("verdict"):
        parts.append(f"{cv.get('what', 'loss')} curves {cv['verdict'].upper()} within {tolerance:g}")
        if cv.get("first"):
            parts[-1] += f" (leaves at step {cv['first'].get('step')})"
        if cv.get("constant"):
            parts[-1] += f", but the loss is {cv['constant']} at every step: the curves say nothing"
        if cv.get("nonfinite"):
            parts[-1] += f", but the losses are {cv['nonfinite']}: nothing to compare there"
        draws = cv.get("random_draws_on_device") or []
        if draws:  # named, not hidden by the band: these runs cannot agree exactly
            parts[-1] += (f" (not exactly: {sum(d['calls'] for d in draws)} random draws on the device, "
                          f"{draws[0]['api']} first at {draws[0]['first_at']})")
    else:
        parts.append(f"curves: {cv.get('skipped', 'not run')}")
    res.headline = "; ".join(parts)
    return res


def random_in_forward(draws: list[dict[str, Any]]) -> str:
    """Why a lockstep is not comparable: the model draws random numbers in its forward (the lockstep's
    ``random_draws``).

    >>> random_in_forward([{"module": "(root)", "api": "torch.randn_like", "calls": 4, "first_at": "main.py:62"}])
    'the model draws random numbers in its forward, in eval mode too (torch.randn_like at main.py:62)'
    """
    d = draws[0]
    return f"the model draws random numbers in its forward, in eval mode too ({d['api']} at {d['first_at']})"


def gradients_counted(gr: dict[str, Any]) -> str:
    """What the gradient check counted: backward module calls, and the trainable tensors and parameters they cover.

    >>> gradients_counted({"compared": 36, "parameter_tensors": 6, "parameters": 3867})
    '36 backward module calls over 6 parameter tensors, 3,867 parameters'
    >>> gradients_counted({"compared": 4})
    '4 backward module calls'
    """
    text = f"{gr.get('compared') or 0} backward module calls"
    if gr.get("parameter_tensors") is not None:
        text += f" over {gr['parameter_tensors']} parameter tensors, {gr.get('parameters') or 0:,} parameters"
    return text


def not_comparable_why(draws: list[dict[str, Any]], where: str) -> str:
    """Why two runs' curves cannot be compared: random draws the migrated run made on the device.

    >>> not_comparable_why([{"api": "torch.multinomial", "device": "npu", "calls": 100, "first_at": "m.py:3"}],
    ...                    "NPU")[:80]
    'random draws on the NPU (torch.multinomial ×100, first at m.py:3) use the device'
    """
    what = ", ".join(f"{d['api']} ×{d['calls']}" + (f", first at {d['first_at']}" if d.get("first_at") else "")
                     for d in draws[:3])
    return (f"random draws on the {where} ({what}) use the device's generator and the reference run the CPU's, "
            "which no seed makes agree; the lockstep (eval mode, no draw) is the comparison that holds. To "
            "compare the curves too: dropout p=0 or eval mode, or draw on the CPU and move the result")


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
        if job.returncode == 4:  # nothing to bench (no model captured): said in its output
            meta["cpu" if job.name == "bench-cpu" else "target"] = {
                "skipped": tail(job.output, 1).removeprefix("bench: ")}
            continue
        if job.timed_out or job.returncode not in (0, 1):
            errors.append(failure(job))
            continue
        data = _load_json(ctx.out / "bench" / dev / "bench.json")
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
