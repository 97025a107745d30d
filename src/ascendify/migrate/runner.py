"""Walk the inputs, convert every file (in parallel), write the output tree. Torch is never imported.

A file is *skipped* (reported, copied unchanged, the run goes on) when it is a symlink, larger than the size
limit, binary, not decodable in its declared encoding, or does not parse. Python files with no CUDA-related
token are not parsed at all (see :data:`PREFILTER`).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ascendify.core import fileio, knowledge

from .engine import Options, active_rules, migrate_source
from .model import FileResult
from .native import NATIVE_SUFFIXES, scan_native
from .source import DecodeError

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", "node_modules", ".tox", ".eggs"})
DEFAULT_MAX_BYTES = 5 * 1024 * 1024

# Tokens that make a Python file worth parsing. CUDA-specific words always; ``torch`` too when a rule that
# reports torch API limits is active; and the tensor methods that have no NPU kernel.
_CUDA_TOKENS = (rb"cuda|nccl|cudnn|apex|amp_C|triton|flash_attn|xformers|bitsandbytes|DataParallel|"
                rb"cpp_extension|float64|double|Double|profiler|DataLoader|optim")


@cache
def prefilter(with_torch: bool) -> re.Pattern[bytes]:
    methods = sorted({api.rsplit(".", 1)[1] for op in knowledge.ops_without_npu_kernel().values()
                      for api in (op.get("python_api") or []) if api.startswith("torch.Tensor.")})
    alt = _CUDA_TOKENS + (rb"|torch" if with_torch else b"")
    # compiled CUDA extensions imported by name (ASC620): a file may name nothing else CUDA
    alt += b"|" + "|".join(map(re.escape, knowledge.load("cuda_extension_modules")["modules"])).encode()
    if methods:
        alt += rb"|\.(?:" + "|".join(map(re.escape, methods)).encode() + rb")\("
    return re.compile(alt, re.I)


@dataclass(frozen=True)
class Task:
    src: str  # absolute path
    rel: str  # path relative to its input root, "/" separated (report key)
    dst: str | None  # where to write (None: write nothing)
    mode: str  # "write" | "inplace" | "diff" | "check"
    options: Options
    max_bytes: int = DEFAULT_MAX_BYTES


def iter_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in links]
        for f in sorted(filenames + links):
            yield Path(dirpath) / f  # a symlinked folder is reported (and recreated), never followed


def plan(paths: list[Path], out: Path | None, mode: str, options: Options, max_bytes: int) -> list[Task]:
    tasks = []
    multi = len(paths) > 1
    for p in paths:
        base = p if p.is_dir() else p.parent
        for f in iter_files(p):
            rel = f.relative_to(base).as_posix()
            key = f"{p.name}/{rel}" if multi and p.is_dir() else rel
            dst = None
            if mode == "write" and out is not None:
                dst = str(out / key)
            elif mode == "inplace":
                dst = str(f)
            tasks.append(Task(str(f), key, dst, mode, options, max_bytes))
    return tasks


def clashes(tasks: list[Task]) -> list[str]:
    """Output paths that two inputs would both be written to (``a/train.py b/train.py -o out``)."""
    seen: dict[str, str] = {}
    out = []
    for t in tasks:
        if t.dst is None:
            continue
        if t.dst in seen and seen[t.dst] != t.src:
            out.append(f"{t.src} and {seen[t.dst]} -> {t.dst}")
        seen.setdefault(t.dst, t.src)
    return out


# Written into every output folder: a later run recognises its own earlier output and may overwrite it;
# any other non-empty folder is refused without --force.
OUTPUT_MARKER = ".ascendify-migrate.json"


def foreign_output(out: Path) -> str:
    """'' when ``out`` may be written (missing, empty, or an earlier ascendify migrate output); else what it holds."""
    if not out.exists() and not out.is_symlink():
        return ""
    if not out.is_dir():
        return "a file, not a folder"
    entries = sorted(p.name for p in out.iterdir())
    if not entries or OUTPUT_MARKER in entries:
        return ""
    report = out.parent / f"{out.name}_migration_report" / "report.json"  # output of a version without the marker
    try:
        import json

        if Path(json.loads(report.read_text(encoding="utf-8")).get("output") or "").resolve() == out.resolve():
            return ""
    except (OSError, ValueError, AttributeError):
        pass
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    return f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}: {shown}"


def write_marker(out: Path, *, target: str, inputs: list[str], files: dict | None = None) -> None:
    """``files``: what was written, ``{path in out: {"out": sha256, "src": sha256}}`` (see ``handedits``)."""
    from ascendify import __version__

    fileio.write_json(out / OUTPUT_MARKER, {"tool": f"ascendify {__version__}", "what": "ascendify migrate output",
                                            "target": target, "inputs": inputs, "files": files or {}})


def _copy(task: Task) -> None:
    if task.mode != "write" or task.dst is None:
        return
    src, dst = Path(task.src), Path(task.dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        os.symlink(os.readlink(src), dst)
        return
    tmp = dst.with_name(f".{dst.name}.copy.tmp")
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def diff_name(src: str) -> str:
    """The file's name in ``--diff`` headers (after ``a/``, ``b/``): its path from the folder the command ran in,
    so ``git apply`` / ``patch -p1`` apply the diff from there. A file outside that folder is named by its
    absolute path without the leading ``/`` (``patch -p1 -d /``)."""
    rel = os.path.relpath(os.path.abspath(src))
    if rel == ".." or rel.startswith(".." + os.sep):
        rel = os.path.abspath(src).lstrip(os.sep)
    return Path(rel).as_posix()


def process(task: Task) -> tuple[FileResult, str | None]:
    """Convert one file; returns its result and, in diff mode, its unified diff."""
    t0 = time.perf_counter()
    path = Path(task.src)
    is_py = path.suffix in (".py", ".pyi")
    res = FileResult(path=task.rel, status="copied")
    try:
        if path.is_symlink() or not path.exists():
            res.status, res.reason = "skipped", f"symlink (not followed) -> {os.readlink(path)}" if \
                path.is_symlink() else "vanished during the run"
            _copy(task)
            return res, None
        if not path.is_file():
            res.status, res.reason = "skipped", "not a regular file"
            return res, None
        size = path.stat().st_size
        if not is_py and path.suffix.lower() not in NATIVE_SUFFIXES:
            _copy(task)
            return res, None
        if size > task.max_bytes:
            res.status, res.reason = "skipped", f"too large ({size} bytes > {task.max_bytes})"
            _copy(task)
            return res, None
        try:
            data = path.read_bytes()
        except OSError as e:
            res.status, res.reason = "skipped", f"cannot read: {e.strerror or e}"
            return res, None
        if b"\0" in data[:8192]:
            res.status, res.reason = "skipped", "binary file (NUL bytes)"
            _copy(task)
            return res, None
        if not is_py:
            text = data.decode("utf-8", errors="replace")
            res.native_ops = scan_native(text)
            res.lines = text.count("\n")
            _copy(task)
            return res, None
        res.lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        with_torch = any(r.category == "api" for r in active_rules(task.options))
        if not prefilter(with_torch).search(data):
            res.status = "unchanged"
            _copy(task)
            return res, None
        try:
            new, res2 = migrate_source(data, task.options, path=task.rel)
        except DecodeError as e:
            res.status, res.reason = "skipped", f"cannot decode: {e} (declare the encoding with a PEP 263 comment)"
            _copy(task)
            return res, None
        except SyntaxError as e:
            res.status, res.reason = "skipped", f"does not parse: {e.msg} (line {e.lineno})"
            _copy(task)
            return res, None
        except (RecursionError, MemoryError, ValueError) as e:
            res.status, res.reason = "skipped", f"cannot analyse: {type(e).__name__}: {e}"
            _copy(task)
            return res, None
        res = res2
        diff = None
        if res.status == "changed":
            if task.mode in ("write", "inplace") and task.dst:
                # the output keeps the input's permission bits (an executable script stays executable)
                # no fsync per file into an output tree (-o): the rename keeps every file whole, and a tree a
                # power loss interrupts is written again by the same command; --inplace rewrites the user's
                # only copy, so it stays durable
                fileio.write_atomic(task.dst, new, mode=path.stat().st_mode & 0o7777,
                                    durable=task.mode == "inplace")
            elif task.mode == "diff":
                a = data.decode(_enc(data), errors="replace").splitlines(keepends=True)
                b = new.decode(_enc(data), errors="replace").splitlines(keepends=True)
                name = diff_name(task.src)
                diff = "".join(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}"))
        else:
            _copy(task)
        return res, diff
    finally:
        res.seconds = time.perf_counter() - t0


def _enc(data: bytes) -> str:
    import io
    import tokenize

    try:
        return tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError:
        return "utf-8"


# Python files per process below which another process costs more (its start, the results sent back) than it
# saves: a process converts ~30-100 files a second
FILES_PER_JOB = 24


def auto_jobs(tasks: list[Task]) -> int:
    """``--jobs 0``: one process per CPU, fewer for a small tree (one for a handful of files)."""
    n = sum(1 for t in tasks if t.src.endswith((".py", ".pyi")))
    return max(1, min(os.cpu_count() or 1, n // FILES_PER_JOB))


def run_tasks(tasks: list[Task], jobs: int, progress=None) -> list[tuple[FileResult, str | None]]:
    """Run ``tasks``; ``progress(n_done)`` is called as files finish. Results keep the task order."""
    if jobs <= 1 or len(tasks) < 4:
        out = []
        for i, t in enumerate(tasks):
            out.append(process(t))
            if progress:
                progress(i + 1)
        return out
    chunk = max(1, min(32, len(tasks) // (jobs * 4)))
    out = []
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        for i, r in enumerate(ex.map(process, tasks, chunksize=chunk)):
            out.append(r)
            if progress:
                progress(i + 1)
    return out
