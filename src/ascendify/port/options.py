"""What one run of ``ascendify port`` is asked to do, and the plan made of it.

:class:`PortOptions` is the one options object: built from the command line (or by ``ascendify demo``, which is
port on its bundled example) and read by every stage to the last; nothing repacks it. :func:`plan` checks it and
resolves what it implies (the folders, the command and its environment, the entry script, where the NPU side
runs) into a :class:`Context`, which holds the options and those facts side by side.

Words: a *stage* is one part of the pipeline (doctor, migrate, train, compare, bench, checklist, report; what
``--skip`` takes); a *step* is one training step of the user's program (an optimizer step, what ``--steps``
counts).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ascendify.port.jobs import default_lanes

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_STEP_FAILED, EXIT_SETUP, EXIT_NOT_PROVEN = 0, 1, 2, 3, 4, 5
STAGE_IDS = ("doctor", "migrate", "train", "compare", "bench")  # the stages that run children (--skip)
ALL_STAGES = (*STAGE_IDS, "checklist", "report")
TARGET_LABEL = {
    "emulated": "emulated NPU (host CPU)",
    "npu": "Ascend NPU",
    "cuda": "CUDA GPU",
}


class PortError(Exception):
    """A pipeline that cannot start: ``code`` is the exit status (2 usage, 3/4 setup)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


@dataclass
class PortOptions:
    project: Path  # the user's CUDA project
    command: list[str]  # the user's own command, paths relative to the project
    out: Path | None = None  # the migrated copy (default: PROJECT-npu beside the project)
    report: Path | None = None  # the report folder (default: OUT-report beside OUT)
    to: str = "npu"
    steps: int = 10  # training steps a run
    seconds: float | None = None  # --time-budget
    device: str = "auto"  # auto | npu | cuda | cpu
    skip: frozenset[str] = frozenset()  # stages
    force: bool = False
    seed: int = 1234
    lanes: int = field(default_factory=default_lanes)
    progress: TextIO | None = None  # where progress lines go (None: nowhere)
    model: str | None = None  # --model: which discovered model to compare and bench, or FILE.py:FACTORY(...)
    overflow: bool = False  # --overflow: the migrated run under the overflow watch
    # how the pipeline is named and reported (``ascendify demo`` sets its own)
    name: str = "port"  # the verb: messages, the page's title, report.json's schema (ascendify.NAME/1)
    report_json: str = "report.json"  # the JSON report's file name in the report folder
    crash_exit: int = EXIT_SETUP  # the exit status when a stage crashed or the original program failed
    shown_as: str | None = None  # what the summary and the page's subtitle call the run (default: the project)
    about: dict[str, str] | None = None  # shown (and in report.json) instead of the project and its command


@dataclass
class Context:
    """One run of the pipeline: its :class:`PortOptions` and what :func:`plan` resolved from them."""

    options: PortOptions
    out: Path  # the report folder: every stage's outputs, report.html
    project: Path  # the user's CUDA project (read only), resolved
    migrated: Path  # the migrated copy (migrate writes it)
    command: list[str]  # the user's own command without its NAME=VALUE words, paths relative to the project
    target: str  # npu | emulated | cuda
    target_reason: str
    force_migrate: bool = False
    entry: str | None = None  # the entry script, relative to the project (for the diff in the report)
    env: dict[str, str] = field(default_factory=dict)  # NAME=VALUE the command began with, for both runs

    @property
    def steps(self) -> int:
        return self.options.steps

    @property
    def seconds(self) -> float | None:
        return self.options.seconds

    @property
    def lanes(self) -> int:
        return self.options.lanes

    @property
    def skip(self) -> frozenset[str]:
        return self.options.skip

    @property
    def model(self) -> str | None:
        return self.options.model

    @property
    def overflow(self) -> bool:
        return self.options.overflow

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

    @functools.cached_property
    def compiles(self) -> bool:
        """Whether the project's code calls ``torch.compile`` (read once: a tracer would keep it from compiling)."""
        pattern = re.compile(r"\btorch\.compile\b|\btorch\._dynamo\b")
        for path in sorted(self.project.rglob("*.py"))[:2000]:
            try:
                if pattern.search(path.read_text(encoding="utf-8", errors="replace")):
                    return True
            except OSError:
                continue
        return False

    def run_root(self, side: str) -> Path:
        """Where a run's scratch copy of its tree is: ``runs/SIDE/tree/NAME``, NAME the project's folder name,
        beside links to the project's neighbours."""
        return self.runs / side / "tree" / self.project.name


def shown_from(ctx: Context, text: str) -> str:
    """A command with this machine's paths made relative to the report folder, as it runs from there (the
    longest path first: the migrated copy's path may start with the project's).

    >>> o = PortOptions(project=Path("/w/p"), command=[], lanes=1)
    >>> c = Context(o, out=Path("/w/p-npu-report"), project=Path("/w/p"), migrated=Path("/w/p-npu"), command=[],
    ...             target="emulated", target_reason="")
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


def resolve_target(device: str) -> tuple[str, str]:
    """``(target, why)``: ``npu`` (a real Ascend NPU), ``cuda`` or ``emulated``; the words mean what they mean
    for every verb (:func:`ascendify.device.placement.resolve`, purpose ``port``)."""
    from ascendify.device import placement

    try:
        r = placement.resolve(device, purpose="port")
    except placement.DeviceError as e:
        raise PortError(f"--device {device}: {e}") from e
    return ("emulated" if r.emulated else r.kind), r.why


def check_migrated_out(out: Path, project: Path, force: bool) -> bool:
    """Whether migrate must be told ``--force`` for ``out``; raises :class:`PortError` for a folder it must not
    touch (the project itself, inside it, a file, or a non-empty folder ascendify did not write)."""
    from ascendify.migrate.runner import OUTPUT_MARKER

    p, o = project.resolve(), out.resolve()
    if o == p or p in o.parents:
        raise PortError(f"{out}: the migrated copy cannot be the project or inside it ({project}); choose another "
                        "-o")
    if o.exists() and not o.is_dir():
        raise PortError(f"{out}: exists and is not a folder")
    if o.is_dir() and any(o.iterdir()) and not (o / OUTPUT_MARKER).exists():
        if not force:
            raise PortError(f"{out}: not empty and not written by ascendify; choose another -o or add --force")
        return True
    return force

def check_factory(project: Path, spec: str) -> None:
    """``--model FILE.py:FACTORY(...)``: FILE is in the project, FACTORY's name is defined at its top level, and
    importing FILE runs no program (:func:`ascendify.workloads.factory.precheck`). Raises :class:`PortError`
    saying which."""
    from ascendify.workloads import factory

    try:
        factory.precheck(spec, root=project)
    except factory.FactoryError as e:
        hint = ("; name a discovered model instead (--model NAME or CLASS)" if "runs the program" in str(e) else "")
        raise PortError(f"--model {e}{hint}") from None


def split_assignments(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """The ``NAME=VALUE`` words a shell command begins with (the environment of both runs), and the rest.

    >>> split_assignments(["PYTHONPATH=.", "CUDA_VISIBLE_DEVICES=0", "python", "t.py", "--x=1"])
    ({'PYTHONPATH': '.', 'CUDA_VISIBLE_DEVICES': '0'}, ['python', 't.py', '--x=1'])
    """
    import re

    env: dict[str, str] = {}
    i = 0
    while i < len(command) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[i]):
        k, v = command[i].split("=", 1)
        env[k] = v
        i += 1
    return env, command[i:]

def entry_script(command: list[str]) -> str | None:
    """The script the command runs (relative to the project), when it names one.

    >>> entry_script(["python", "-u", "train.py", "--lr", "3"]), entry_script(["-m", "pkg.train"])
    ('train.py', None)
    >>> entry_script(["torchrun", "--nproc-per-node", "2", "main.py", "--cuda"])
    'main.py'
    """
    from ascendify.program import Program, ProgramError

    try:
        prog = Program.parse(command, check=False)
    except (ProgramError, ImportError):
        return None
    return prog.path


def plan(opts: PortOptions) -> Context:
    """Check ``opts`` and resolve what they imply; raises :class:`PortError` saying what is wrong (nothing is
    written yet)."""
    bad = sorted(set(opts.skip) - set(STAGE_IDS))
    if bad:
        raise PortError(f"--skip {', '.join(bad)}: unknown stage (stages: {', '.join(STAGE_IDS)})")
    project = opts.project.resolve()
    if not project.is_dir():
        raise PortError(f"{opts.project}: no such folder (give the project's folder, then -- and its command)")
    if not opts.command:
        raise PortError("no command: give the project's own command after --, e.g. -- python train.py --lr 3e-4")
    if opts.steps < 1:
        raise PortError("--steps must be at least 1")
    if opts.seconds is not None and not 0 < opts.seconds < float("inf"):
        raise PortError(f"--time-budget must be a number of seconds above 0, not {opts.seconds:g}")
    from ascendify.program import Program, ProgramError

    env, command = split_assignments(list(opts.command))
    if not command:
        raise PortError("the command only sets variables: give the program after them, e.g. -- NAME=1 python "
                        "train.py")
    try:
        prog = Program.parse(command, check=False)
    except ProgramError as e:
        raise PortError(f"the command: {e}") from None
    if opts.model and ".py:" in opts.model:
        check_factory(project, opts.model)
    if prog.path and not (project / prog.path).is_file():
        raise PortError(f"the command runs {prog.path}, which is not in {opts.project} (paths in the command are "
                        "relative to the project)")
    migrated = (opts.out or project.parent / f"{project.name}-npu").resolve()
    report_dir = (opts.report or migrated.parent / f"{migrated.name}-report").resolve()
    force_migrate = check_migrated_out(migrated, project, opts.force)
    if report_dir == migrated or migrated in report_dir.parents:
        raise PortError(f"--report {report_dir}: the report folder cannot be the migrated copy ({migrated}) nor "
                        "inside it; choose another --report")
    if report_dir == project or project in report_dir.parents:
        raise PortError(f"{report_dir}: the report folder cannot be inside the project; choose another --report")
    target, why = resolve_target(opts.device)
    return Context(opts, out=report_dir, project=project, migrated=migrated, command=command, target=target,
                   target_reason=why, force_migrate=force_migrate, entry=prog.path, env=env)
