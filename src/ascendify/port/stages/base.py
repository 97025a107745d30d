"""What every stage of the pipeline shares: its result (:class:`StageResult`), reading a child's outputs back,
and the small pieces of the page its section is drawn with."""

from __future__ import annotations

import html
import importlib.util
import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendify.port.jobs import Job, tail
from ascendify.port.options import Context, shown_from

TITLES = {
    "doctor": "Doctor: is this machine ready?",
    "migrate": "Migrate the CUDA project to torch_npu",
    "train": "Run: the migrated copy on the target, the original on the CPU",
    "compare": "Compare: the discovered model in lockstep, and the loss curves",
    "bench": "Bench: the discovered model, a step at the captured batch",
    "checklist": "Migration checklist",
    "report": "Report",
}
ANCHOR = {"doctor": "doctor", "migrate": "migrate", "train": "train", "compare": "compare", "bench": "bench",
          "checklist": "checklist", "report": "summary", "advise": "advise"}


@dataclass
class StageResult:
    """What one stage found. ``status``: ok, warn, fail (a finding: a failed check, a divergence), error (the
    stage crashed), skip. ``facts`` feed the checklist; ``files`` are paths relative to the report folder."""

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



def verb_available(verb: str) -> bool:
    """Whether ``ascendify VERB`` exists in this build (its front-end module is there)."""
    try:
        return importlib.util.find_spec(f"ascendify.commands.{verb}") is not None
    except (ImportError, ValueError):
        return False


def add_job(ctx: Context, jobs: list[Job], job: Job) -> None:
    """Append ``job``, shown as it runs from the report folder (no machine paths) and marked skipped where its
    stage is skipped or its verb is missing from this build."""
    job.shown = shown_from(ctx, job.shown or shlex.join(["python" if job.python else "ascendify", *job.argv]))
    if job.stage in ctx.skip:
        job.skipped = "skipped (--skip)"
    elif job.argv and not job.python and not verb_available(job.argv[0]):
        job.skipped = f"skipped: ascendify {job.argv[0]} is not available in this build"
    jobs.append(job)


# -- reading the outputs back ------------------------------------------------------------------------------------


def load_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def count(value: Any) -> int:
    if isinstance(value, (list, dict)):
        return len(value)
    return int(value or 0)


def collect(res: StageResult, jobs: list[Job]) -> None:
    """The stage's jobs, times and log files on its result."""
    res.jobs = jobs
    res.seconds = max((j.seconds for j in jobs), default=0.0)
    res.cpu_seconds = sum(j.cpu_seconds for j in jobs)
    res.files = [*res.files]
    for j in jobs:
        if j.log and f"logs/{Path(j.log).name}" not in res.files:
            res.files.append(f"logs/{Path(j.log).name}")  # relative to the report folder, like every output


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
    for prefix in (f"{job.name}: ", "lockstep: ", "bench: ", "copy: "):
        last = last.removeprefix(prefix)
    return f"{job.name} exited with status {job.returncode}: {last}\n{tail(job.output)}"


def crashed(res: StageResult, job: Job) -> bool:
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


def number_text(x: Any, spec: str = ".4g") -> str:
    """A number short; a loss (or a cosine) that went inf/NaN comes back from JSON as a string and is said as it is.

    >>> number_text(0.123456), number_text("NaN"), number_text(None), number_text(0.5, ".2f")
    ('0.1235', 'NaN', 'None', '0.50')
    """
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


# -- drawing a stage's section ----------------------------------------------------------------------------------


def e(x: Any) -> str:
    """``x`` escaped for HTML."""
    return html.escape("" if x is None else str(x), quote=True)


def secs(x: float) -> str:
    return f"{x:.1f} s" if x < 100 else f"{x:.0f} s"


def figs_html(figs: list[tuple[bytes, str]]) -> str:
    """PNG figures with captions, side by side."""
    import base64

    parts = [f'<figure><img alt="{e(c)}" src="data:image/png;base64,{base64.b64encode(p).decode("ascii")}">'
             f"<figcaption>{e(c)}</figcaption></figure>" for p, c in figs]
    return f'<div class="figs">{"".join(parts)}</div>'


_PNG_CACHE: dict[str, tuple[object, bytes | None]] = {}  # plot -> (the result it was drawn for, PNG)


def cached_png(result: Any, name: str, draw) -> bytes | None:
    """``draw()`` once per result: the summary and the stage's section show the same plot."""
    hit = _PNG_CACHE.get(name)
    if hit is None or hit[0] is not result:
        _PNG_CACHE[name] = hit = (result, draw())
    return hit[1]


def finite(v: Any) -> float | None:
    """A loss value as a float, None where it is NaN or inf (JSON brings them back as strings)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def finite_points(x: list, y: list) -> tuple[list, list]:
    pts = [(xi, yi) for xi, yi in zip(x, y, strict=False) if yi is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


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
