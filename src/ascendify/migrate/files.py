"""The file-level work of a run: walk the inputs, convert every file (in parallel), write the output tree, and
the output folder's marker. :mod:`.runner` strings these into one run. Torch is never imported.

A file is *skipped* (reported, copied unchanged, the run goes on) when it is a symlink, larger than the size
limit, binary, not decodable in its declared encoding, or does not parse. Python files with no CUDA-related
token are not parsed at all (see :data:`PREFILTER`).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import stat
import time
from collections.abc import Iterator
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


def worth_parsing(data: bytes, with_torch: bool) -> bool:
    """``data`` (a Python file) has a token some rule acts on (see :func:`prefilter`); a file that names torch
    is found without the pattern when torch is one of them."""
    return with_torch and b"torch" in data or prefilter(with_torch).search(data) is not None


@dataclass(frozen=True)
class Task:
    src: str  # absolute path
    rel: str  # path relative to its input root, "/" separated (report key)
    dst: str | None  # where to write (None: write nothing)
    mode: str  # "write" | "inplace" | "diff" | "check"
    options: Options
    max_bytes: int = DEFAULT_MAX_BYTES
    problem: str = ""  # why the input cannot be read at all (a folder that cannot be listed): skipped


def iter_files(root: Path, unreadable: list[tuple[Path, str]] | None = None) -> Iterator[Path]:
    """The files under ``root`` (``root`` itself when it is not a folder), sorted; folders that cannot be listed
    are added to ``unreadable`` as ``(folder, why)``, never dropped silently."""
    if not root.is_dir():
        yield root
        return

    def failed(e: OSError) -> None:
        if unreadable is not None:
            unreadable.append((Path(e.filename), e.strerror or str(e)))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=failed):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in links]
        for f in sorted(filenames + links):
            if f.endswith(INPLACE_SUFFIX):
                continue  # an --inplace run's converted copy, not yet swapped in (the run was killed)
            yield Path(dirpath) / f  # a symlinked folder is reported (and recreated), never followed


def plan(paths: list[Path], out: Path | None, mode: str, options: Options, max_bytes: int) -> list[Task]:
    tasks = []
    multi = len(paths) > 1
    for p in paths:
        base = p if p.is_dir() else p.parent
        unreadable: list[tuple[Path, str]] = []
        for f in iter_files(p, unreadable):
            rel = f.relative_to(base).as_posix()
            key = f"{p.name}/{rel}" if multi and p.is_dir() else rel
            dst = None
            if mode == "write" and out is not None:
                dst = str(out / key)
            elif mode == "inplace":
                dst = str(f)
            tasks.append(Task(str(f), key, dst, mode, options, max_bytes))
        for folder, why in unreadable:
            rel = folder.relative_to(base).as_posix() if folder != base else ""
            key = (f"{p.name}/{rel}" if multi or not rel else rel).rstrip("/") + "/"
            tasks.append(Task(str(folder), key, None, mode, options, max_bytes,
                              problem=f"cannot read this folder: {why}"))
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
    from ascendify.core.fileio import LOCK_NAME

    entries = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)  # the lock of this very run
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


def write_marker(out: Path, *, target: str, inputs: list[str], files: dict | None = None,
                 complete: bool = True) -> None:
    """``files``: what was written, ``{path in out: {"out": sha256, "src": sha256}}`` (see ``handedits``).

    ``complete=False`` is written before a run writes anything: an output that a run left half-written (Ctrl-C,
    a full disk, a kill) says so, and the next run into it recognises it as its own and completes it."""
    import json

    from ascendify import __version__

    marker = {"tool": f"ascendify {__version__}", "what": "ascendify migrate output", "complete": complete,
              "target": target, "inputs": inputs, "files": files or {}}
    fileio.write_atomic(out / OUTPUT_MARKER, json.dumps(marker, indent=2, ensure_ascii=False) + "\n", durable=False)


def marker_incomplete(out: Path) -> bool:
    """The output's marker says a run was writing it and did not finish."""
    import json

    try:
        return json.loads((out / OUTPUT_MARKER).read_text(encoding="utf-8")).get("complete") is False
    except (OSError, ValueError, AttributeError):
        return False


class Unreadable(Exception):
    """The input file cannot be read (its copy cannot be made): the file is skipped, not the run."""


class WriteError(OSError):
    """An output file cannot be written; the message names it (``OSError`` from a file object names none)."""


def _write_error(e: OSError, path: str) -> WriteError:
    return WriteError(e.errno, e.strerror or str(e), path)


_MADE: set[Path] = set()  # output folders this process made or saw (one mkdir per folder, not per file)


def _folder(path: Path) -> None:
    if path not in _MADE:
        path.mkdir(parents=True, exist_ok=True)
        _MADE.add(path)


INPLACE_SUFFIX = ".ascendify-inplace.tmp"


def inplace_temp(path: str) -> str:
    """Where ``--inplace`` writes a file's converted content until every file is converted (then all are
    swapped in at once: an interrupted run leaves the input as it was)."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}{INPLACE_SUFFIX}")


_CHUNK = 1 << 20


def _chunks(fin, data: bytes | None) -> Iterator[bytes]:
    if fin is None:
        yield data or b""
        return
    while True:
        try:
            chunk = fin.read(_CHUNK)
        except OSError as e:
            raise Unreadable(e.strerror or str(e)) from None
        if not chunk:
            return
        yield chunk


def _copy(task: Task, res: FileResult, data: bytes | None = None) -> None:
    """Copy the input to the output (``-o`` only): through a temporary file and a rename, with the permission
    bits and times; the SHA-256 of what was copied goes into ``res`` (for the output's marker). ``data``: the
    file's bytes when already read. Raises :class:`Unreadable` when the input cannot be read, else
    :class:`WriteError`."""
    if task.mode != "write" or task.dst is None:
        return
    src, dst = Path(task.src), Path(task.dst)
    try:
        _folder(dst.parent)
        if src.is_symlink():
            if dst.is_symlink() or dst.exists():
                dst.unlink()
            os.symlink(os.readlink(src), dst)
            return
    except OSError as e:
        raise _write_error(e, str(dst)) from None
    try:
        fin = open(src, "rb") if data is None else None  # noqa: SIM115 - closed below
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    digest = hashlib.sha256()
    tmp = dst.with_name(f".{dst.name}.copy.tmp")
    try:
        with open(tmp, "wb") as fout:
            for chunk in _chunks(fin, data):
                digest.update(chunk)
                fout.write(chunk)
        shutil.copystat(src, tmp)
        os.replace(tmp, dst)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, WriteError):
            raise _write_error(e, str(dst)) from None
        raise
    finally:
        if fin is not None:
            fin.close()
    res.src_sha = res.out_sha = digest.hexdigest()


def diff_name(src: str) -> str:
    """The file's name in ``--diff`` headers (after ``a/``, ``b/``): its path from the folder the command ran in,
    so ``git apply`` / ``patch -p1`` apply the diff from there. A file outside that folder is named by its
    absolute path without the leading ``/`` (``patch -p1 -d /``)."""
    rel = os.path.relpath(os.path.abspath(src))
    if rel == ".." or rel.startswith(".." + os.sep):
        rel = os.path.abspath(src).lstrip(os.sep)
    return Path(rel).as_posix()


NOT_COPIED = "not in the output"


def process(task: Task, step=None) -> tuple[FileResult, str | None]:
    """Convert one file; returns its result and, in diff mode, its unified diff. ``step(fraction)`` is told how
    far the conversion of a Python file is."""
    t0 = time.perf_counter()
    try:
        res, diff = _process(task, FileResult(path=task.rel, status="copied"), step)
    except Unreadable as e:
        res, diff = FileResult(path=task.rel, status="skipped"), None
        res.reason = f"cannot read: {e}" + (f" ({NOT_COPIED})" if task.mode == "write" else "")
    res.seconds = time.perf_counter() - t0
    return res, diff


def _skip(task: Task, res: FileResult, reason: str, data: bytes | None = None) -> tuple[FileResult, None]:
    res.status, res.reason = "skipped", reason
    _copy(task, res, data)
    res.copied = task.mode == "write" and task.dst is not None
    return res, None


def _process(task: Task, res: FileResult, step=None) -> tuple[FileResult, str | None]:
    path = Path(task.src)
    is_py = path.suffix in (".py", ".pyi")
    if task.problem:
        res.status, res.reason = "skipped", task.problem + (f" ({NOT_COPIED})" if task.mode == "write" else "")
        return res, None
    if path.is_symlink():
        return _skip(task, res, f"symlink (not followed) -> {os.readlink(path)}")
    try:
        st = path.stat()
    except OSError:
        res.status, res.reason = "skipped", "vanished during the run"
        return res, None
    if not stat.S_ISREG(st.st_mode):  # a named pipe or a device: reading it could wait forever
        kind = "a named pipe" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
        res.status, res.reason = "skipped", f"{kind}, not a regular file" + (
            f" ({NOT_COPIED})" if task.mode == "write" else "")
        return res, None
    size = st.st_size
    notebook = path.suffix.lower() == ".ipynb"
    if not is_py and not notebook and path.suffix.lower() not in NATIVE_SUFFIXES:
        _copy(task, res)
        res.copied = task.mode == "write"
        return res, None
    if size > task.max_bytes:
        return _skip(task, res, f"too large ({size} bytes > {task.max_bytes})")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    if b"\0" in data[:8192]:
        return _skip(task, res, "binary file (NUL bytes)", data)
    if not is_py and not notebook:
        text = data.decode("utf-8", errors="replace")
        res.native_ops = scan_native(text)
        res.lines = text.count("\n")
        _copy(task, res, data)
        res.copied = task.mode == "write"
        return res, None
    with_torch = any(r.category == "api" for r in active_rules(task.options))
    if notebook:
        from .notebook import NotebookError, migrate_notebook

        if not worth_parsing(data, with_torch):
            res.status = "unchanged"
            _copy(task, res, data)
            return res, None
        try:
            new, res2 = migrate_notebook(data, task.options, path=task.rel)
        except NotebookError as e:
            return _skip(task, res, f"not a notebook this can read: {e}", data)
        except (SyntaxError, RecursionError, MemoryError, ValueError) as e:
            return _skip(task, res, f"cannot analyse: {type(e).__name__}: {e}", data)
    else:
        res.lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        if not worth_parsing(data, with_torch):
            res.status = "unchanged"
            if b"__main__" in data and b"__name__" in data:
                res.program = True  # else left to the summary's next step to find out, if it needs to
            _copy(task, res, data)
            return res, None
        try:
            new, res2 = migrate_source(data, task.options, path=task.rel, progress=step)
        except DecodeError as e:
            return _skip(task, res, f"cannot decode: {e} (declare the encoding with a PEP 263 comment)", data)
        except SyntaxError as e:
            return _skip(task, res, f"does not parse: {e.msg} (line {e.lineno})", data)
        except (RecursionError, MemoryError, ValueError) as e:
            return _skip(task, res, f"cannot analyse: {type(e).__name__}: {e}", data)
    res2.copied = res.copied
    res = res2
    diff = None
    if res.status == "changed":
        if task.mode == "write" and task.dst:
            # the output keeps the input's permission bits (an executable script stays executable)
            # no fsync per file into an output tree (-o): the rename keeps every file whole, and a tree a
            # power loss interrupts is written again by the same command
            try:
                fileio.write_atomic(task.dst, new, mode=st.st_mode & 0o7777, durable=False)
            except OSError as e:
                raise _write_error(e, task.dst) from None
            res.src_sha, res.out_sha = hashlib.sha256(data).hexdigest(), hashlib.sha256(new).hexdigest()
        elif task.mode == "inplace" and task.dst:
            # --inplace rewrites the user's only copy: the converted content waits beside the file (durable)
            # until every file is converted, then all are swapped in at once (see swap_inplace)
            tmp = inplace_temp(task.dst)
            try:
                fileio.write_atomic(tmp, new, mode=st.st_mode & 0o7777, durable=True)
            except OSError as e:
                raise _write_error(e, task.dst) from None
            res.pending = tmp
        elif task.mode == "diff":
            a = data.decode(_enc(data), errors="replace").splitlines(keepends=True)
            b = new.decode(_enc(data), errors="replace").splitlines(keepends=True)
            name = diff_name(task.src)
            diff = "".join(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}"))
    else:
        _copy(task, res, data)
    return res, diff


def swap_inplace(results: list[FileResult], tasks: list[Task], done: list[str]) -> None:
    """Move every converted file of an ``--inplace`` run over its input, with Ctrl-C and SIGTERM held back
    until the last one (a rename each: a moment); ``done`` gets each input rewritten (on an error, the others
    stay as they were)."""
    import signal

    held = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)}
    mask = getattr(signal, "pthread_sigmask", None)  # POSIX; elsewhere the renames are not shielded
    old = mask(signal.SIG_BLOCK, held) if mask else None
    try:
        for r, t in zip(results, tasks, strict=True):
            if r.pending:
                try:
                    os.replace(r.pending, t.src)
                except OSError as e:
                    raise _write_error(e, t.src) from None
                r.pending = ""
                done.append(t.src)
    finally:
        discard_inplace(tasks)
        if mask:
            mask(signal.SIG_SETMASK, old)


def discard_inplace(tasks: list[Task]) -> None:
    """Remove the converted copies an ``--inplace`` run left beside its inputs (it was stopped before the
    swap, or a swap failed)."""
    for t in tasks:
        if t.mode == "inplace" and t.src.endswith((".py", ".pyi", ".ipynb")):
            try:
                os.unlink(inplace_temp(t.src))
            except OSError:
                pass


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


def _size(task: Task) -> int:
    try:
        return os.lstat(task.src).st_size if not task.problem else 0
    except OSError:
        return 0


def run_tasks(tasks: list[Task], jobs: int, progress=None) -> list[tuple[FileResult, str | None]]:
    """Run ``tasks``; results keep the task order. ``progress(done, total)`` is called as the work advances, in
    bytes of input (within a file, too, when one process converts a large one).

    With ``jobs > 1`` the files go to worker processes (:mod:`.workers`), largest first (a large file last would
    keep one worker busy while the others wait). The workers die with this process, however it ends (see
    :func:`_worker_start`); an error or Ctrl-C here stops them at once."""
    _MADE.clear()  # folders can go between runs in one process
    sizes = [_size(t) for t in tasks]
    total = sum(sizes) or 1
    if jobs <= 1 or len(tasks) < 4:
        out = []
        done = 0
        for t, size in zip(tasks, sizes, strict=True):
            step = None
            if progress is not None and size > BIG_FILE:
                def step(frac: float, done=done, size=size) -> None:
                    progress(done + frac * size, total)
            out.append(process(t, step))
            done += size
            if progress:
                progress(done, total)
        return out
    from ascendify.migrate import workers

    results: list = [None] * len(tasks)
    done = 0

    def collect(unit: list) -> None:
        nonlocal done
        for i, r in unit:
            results[i] = r
            done += sizes[i]
        if progress:
            progress(done, total)

    # the workers get the task list once, at their start (a fork inherits it), and the pieces of work as indices
    workers.run(_process_unit, _units(tasks, sizes, jobs), jobs, collect, initializer=_worker_start,
                initargs=(os.getpid(), tasks))
    return results


UNITS_PER_JOB = 8  # pieces of work per process: enough to even out the end, few enough to cost little to send


def _units(tasks: list[Task], sizes: list[int], jobs: int) -> list[list[int]]:
    """The tasks' indices in pieces of work for the workers, largest first (a large file last would keep one
    process busy while the others wait): a file of a piece's share or more alone, the smaller ones together
    (sending a piece to a process and its results back costs about as much as converting a small file)."""
    share = max(1, sum(sizes) // (jobs * UNITS_PER_JOB))
    units: list[list[int]] = []
    unit: list[int] = []
    filled = 0
    for i in sorted(range(len(tasks)), key=lambda i: -sizes[i]):
        unit.append(i)
        filled += sizes[i]
        if filled >= share:
            units.append(unit)
            unit, filled = [], 0
    if unit:
        units.append(unit)
    return units


_TASKS: list[Task] = []  # a worker's copy of the run's tasks (_worker_start)


def _process_unit(unit: list[int]) -> list[tuple[int, tuple[FileResult, str | None]]]:
    return [(i, process(_TASKS[i])) for i in unit]


BIG_FILE = 256 << 10  # a file this large (a second of work or more) reports progress while it is converted


def _worker_start(parent: int, tasks: list[Task]) -> None:
    """A worker's start: it dies when the process that started it ends, however that ends (SIGKILL included:
    Linux's ``PR_SET_PDEATHSIG``), so no worker is left waiting on a pipe nobody reads; Ctrl-C is the parent's
    to handle (it stops the workers); SIGTERM ends a worker through its clean-ups (no temporary file left)."""
    import signal

    from ascendify.program.children import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if not die_with_parent(parent):  # the parent ended before that took effect
        os._exit(1)
    _TASKS[:] = tasks


def _exit_on_signal(signum: int, frame) -> None:
    raise SystemExit(128 + signum)
