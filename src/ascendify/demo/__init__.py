"""``ascendify demo``: ``ascendify port`` on the bundled CUDA example project, at sizes a laptop runs in a minute.

The example is ``examples/cuda_project`` (a wheel carries it as ``ascendify/_examples/cuda_project``); its command
is ``python train_gpt.py`` with the sizes below. Everything else is port's pipeline (:mod:`ascendify.port`): the
doctor, the migration, both runs observed, the discovered model in lockstep, the curves, the bench, the checklist
and the report, here written into one folder (the migrated copy in ``OUT/migrate/npu_project``). See docs/demo.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ascendify.port.jobs import default_lanes
from ascendify.port.options import EXIT_SETUP, EXIT_STEP_FAILED, PortError, PortOptions
from ascendify.port.pipeline import print_summary, run_port
from ascendify.port.result import PortResult

SCRIPT = "train_gpt.py"
DemoError = PortError
DemoResult = PortResult


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

    def train_args(self) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch), "--seq-len", str(self.seq_len),
                "--vocab-size", str(self.vocab), "--d-model", str(self.d_model), "--n-layers", str(self.n_layers),
                "--n-heads", str(self.n_heads), "--warmup-steps", str(max(1, self.steps // 5)),
                "--dataset-tokens", str(self.dataset_tokens), "--lr", "3e-3", "--min-lr", "3e-4",
                "--log-interval", "1", "--seed", "1337"]


QUICK = Sizes(steps=4, batch=2, seq_len=16, vocab=64, d_model=32, n_layers=2, n_heads=2, dataset_tokens=4096)
DEFAULT = Sizes(steps=24, batch=4, seq_len=32, vocab=96, d_model=64, n_layers=2, n_heads=4, dataset_tokens=16384)


@dataclass
class DemoOptions:
    out: Path
    quick: bool = False
    device: str = "auto"  # auto | npu | cuda | cpu
    skip: frozenset[str] = frozenset()
    force: bool = False
    lanes: int = field(default_factory=default_lanes)
    progress: TextIO | None = None  # where progress lines go (None: nowhere)


def find_project() -> Path:
    """The bundled CUDA example project: ``examples/cuda_project`` of the source checkout, else the copy an
    installed wheel carries (``ascendify/_examples/cuda_project``)."""
    here = Path(__file__).resolve()
    candidates = [base / "examples" / "cuda_project" for base in here.parents]
    candidates.append(here.parents[1] / "_examples" / "cuda_project")
    for cand in candidates:
        if (cand / SCRIPT).is_file() and (cand / "models.py").is_file():
            return cand
    raise PortError("the bundled example project (examples/cuda_project) was not found: not in a source checkout "
                    f"above {here.parents[1]} nor inside the installed package; reinstall ascendify", EXIT_SETUP)


def command(sizes: Sizes) -> list[str]:
    return ["python", SCRIPT, *sizes.train_args()]


def run_demo(opts: DemoOptions) -> PortResult:
    """``ascendify port`` on the bundled example into ``opts.out``; raises :class:`DemoError` when it cannot start."""
    sizes = QUICK if opts.quick else DEFAULT
    out = opts.out.resolve()
    size = "quick" if opts.quick else "default"
    return run_port(PortOptions(project=find_project(), command=command(sizes), out=out / "migrate" / "npu_project",
                                report=out, steps=sizes.steps, device=opts.device, skip=opts.skip, force=opts.force,
                                lanes=opts.lanes, progress=opts.progress, name="demo", report_json="demo.json",
                                crash_exit=EXIT_STEP_FAILED, shown_as=f"{size} sizes", about={"sizes": size}))


__all__ = ["DemoError", "DemoOptions", "DemoResult", "find_project", "print_summary", "run_demo"]
