"""Hand edits in an earlier output are kept: migrating again into the same folder never loses a person's fixes.

The output marker (``.ascendify-migrate.json``) records, for every file written, the SHA-256 of what was written
and of the input it came from. On the next ``migrate -o`` into that folder (``port`` does this each time it is run
again), a file whose content no longer has the recorded hash was edited by hand since:

- its input did not change: the file is *kept* as the person left it (``status: kept`` in the report);
- its input changed too: the file is kept, and the fresh migration is written beside it as ``NAME.migrated``
  for the person to merge.

``--force`` overwrites hand edits. A file the person deleted is written again. Torch is never imported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from .files import OUTPUT_MARKER, Task
from .model import FileResult

BESIDE_SUFFIX = ".migrated"
KEPT = "kept"


def _sha(path: str | Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _key(out: Path, dst: str) -> str:
    return Path(dst).relative_to(out).as_posix()


def recorded(out: Path) -> dict[str, dict[str, str]]:
    """What the marker in ``out`` says was written: ``{path in out: {"out": sha256, "src": sha256}}``."""
    try:
        files = json.loads((out / OUTPUT_MARKER).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def plan_keeps(out: Path, tasks: list[Task]) -> tuple[list[Task], dict[int, str]]:
    """The tasks to run, with hand-edited outputs protected, and ``{task index: why kept}``.

    A protected file's task analyses its input without writing it (its findings stay in the report), or, when
    the input changed too, writes the fresh migration to ``NAME.migrated`` beside it."""
    known = recorded(out)
    if not known:
        return tasks, {}
    tasks, kept = list(tasks), {}
    for i, t in enumerate(tasks):
        if t.mode != "write" or not t.dst:
            continue
        entry = known.get(_key(out, t.dst))
        if not isinstance(entry, dict) or not Path(t.dst).is_file():
            continue
        now = _sha(t.dst)
        if now is None or now == entry.get("out"):
            continue
        if _sha(t.src) == entry.get("src"):
            tasks[i] = replace(t, dst=None, mode="check")
            kept[i] = "edited by hand since the last migrate: kept as it is (--force overwrites it)"
        else:
            beside = t.dst + BESIDE_SUFFIX
            tasks[i] = replace(t, dst=beside)
            kept[i] = (f"edited by hand since the last migrate, and its input changed too: kept as it is; the "
                       f"fresh migration is {Path(beside).name} beside it (merge by hand, or --force)")
    return tasks, kept


def mark_kept(results: list[FileResult], kept: dict[int, str]) -> None:
    for i, why in kept.items():
        results[i].status, results[i].reason = KEPT, why


def records(out: Path, tasks: list[Task], kept: dict[int, str], results: list[FileResult]) -> dict:
    """The marker's ``files`` after this run (``tasks`` as planned, before :func:`plan_keeps`; ``results`` hold
    the hashes the workers computed as they wrote): a kept file keeps its earlier record, so its edit stays an
    edit on the next run."""
    before = recorded(out)
    files: dict[str, dict[str, str]] = {}
    for i, (t, r) in enumerate(zip(tasks, results, strict=True)):
        if t.mode != "write" or not t.dst:
            continue
        key = _key(out, t.dst)
        if i in kept:
            if key in before:
                files[key] = before[key]
        elif r.out_sha and r.src_sha:
            files[key] = {"out": r.out_sha, "src": r.src_sha}
    return files


def untouched(out: Path, tasks: list[Task], kept: dict[int, str]) -> dict:
    """The records that stay true while this run writes (the marker written before it starts): those of the
    files it keeps. The files it writes lose theirs, so after an interrupted run the next one rewrites them
    instead of taking them for hand edits."""
    before = recorded(out)
    files = {}
    for i in kept:
        key = _key(out, tasks[i].dst)
        if key in before:
            files[key] = before[key]
    return files


def drop_stale_beside(tasks: list[Task]) -> None:
    """With ``--force`` every output is written again: a ``NAME.migrated`` left by an earlier run is stale."""
    written = {t.dst for t in tasks if t.dst}
    for t in tasks:
        if t.mode == "write" and t.dst and (t.dst + BESIDE_SUFFIX) not in written:
            Path(t.dst + BESIDE_SUFFIX).unlink(missing_ok=True)
