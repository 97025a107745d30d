"""The stages of ``ascendify port`` that run children: one module each, holding what the stage runs
(``jobs(ctx)``), how its outputs are read back into a :class:`~ascendify.port.stages.base.StageResult`
(``read(ctx, jobs, done)``: ``done`` holds the stages already read; a stage waits for those in its ``NEEDS``) and
its section of the page (``section(sec, res, result)``). The checklist and the report, the last two stages, are
:mod:`ascendify.port.checklist` and :mod:`ascendify.port.page`.

To add a stage: a module here with ``ID``, ``jobs``, ``read`` and ``section``, its id in
:data:`ascendify.port.options.STAGE_IDS` (where it sits in the report) and in :data:`STARTS` below (when its
children start), a title in :data:`ascendify.port.stages.base.TITLES`.
"""

from __future__ import annotations

from ascendify.port.jobs import Job
from ascendify.port.options import STAGE_IDS, Context
from ascendify.port.stages import bench, compare, doctor, migrate, train

BY_ID = {m.ID: m for m in (doctor, migrate, train, compare, bench)}
STARTS = ("migrate", "doctor", "train", "compare", "bench")  # the order children start in: others wait on migrate
assert set(BY_ID) == set(STAGE_IDS) == set(STARTS)


def build_jobs(ctx: Context) -> list[Job]:
    """Every child process of the pipeline, in the order they should start."""
    return [job for sid in STARTS for job in BY_ID[sid].jobs(ctx)]
