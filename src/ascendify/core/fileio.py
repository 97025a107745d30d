"""Atomic file writing: an interrupted run never leaves a half-written file.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "a.txt", b"hello")
>>> (d / "a.txt").read_bytes()
b'hello'
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


def write_atomic(
    path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None, durable: bool = True
) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and an atomic rename.

    ``str`` is written as UTF-8 with no newline translation. ``mode`` sets the file's permission bits; when it
    is None an existing file keeps its bits and a new file gets ``0o666`` less the umask, as ``open()`` would
    give it (not the ``0o600`` of a temporary file). ``durable=False`` skips the ``fsync`` (the rename still
    never exposes a half-written file; only a power loss can lose it): for files written many times a second.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (checked before a long run, not after it), or None.

    >>> output_problem("/") is not None
    True
    """
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file name"
    return folder_problem(path.parent)  # write_atomic makes the missing folders


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why an output folder cannot be made or written at ``path`` (checked before the work, not after), or None.

    >>> folder_problem("/dev/null")
    '/dev/null is a file, not a folder'
    """
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the missing folders are made
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"no permission to write in {probe}"
    return None


def cache_dir(name: str) -> Path:
    """``$ASCENDIFY_CACHE/name`` (default ``~/.cache/ascendify/name``): where compiled helpers are kept."""
    base = os.environ.get("ASCENDIFY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ascendify")
    return Path(base) / name


def _umask() -> int:
    """The process umask (read by setting and restoring it: there is no read-only call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- JSON and CSV next to every human output (re-exported by :mod:`ascendify.report`) ------------------------------


def _clean(obj: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings so every JSON reader accepts the file."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if obj != obj else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "to_json") and callable(obj.to_json):
        return _clean(obj.to_json())
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return _clean(dataclasses.asdict(obj))
    return obj


def dumps_json(obj: Any) -> str:
    """``obj`` as indented, strict JSON text (NaN/inf as strings; dataclasses and ``.to_json()`` objects expanded).

    >>> dumps_json({"loss": float("nan")})
    '{\\n  "loss": "nan"\\n}\\n'
    """
    return json.dumps(_clean(obj), indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n"


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in ``path``; :class:`ValueError` naming the file and what is wrong (it cannot be read, or
    it is not valid JSON, with the line) for a user's file given on the command line."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e.msg} at line {e.lineno}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not valid JSON: not UTF-8 text") from None


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Atomically write ``obj`` as JSON (see :func:`dumps_json`)."""
    write_atomic(path, dumps_json(obj))


def write_csv(
    path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> None:
    """Atomically write dict ``rows`` as CSV; ``columns`` orders the header (default: keys in first-seen order)."""
    rows = list(rows)
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            seen.update(dict.fromkeys(r))
        columns = list(seen)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    write_atomic(path, buf.getvalue())


# -- output folders: one writer at a time, and never over a user's files -----------------------------------------

LOCK_NAME = ".ascendify.lock"  # inside the output folder while a verb writes it; removed when it is done
_HELD_ENV = "ASCENDIFY_HELD_OUTPUTS"  # folders an ancestor process holds (os.pathsep-separated real paths)


class OutputLocked(RuntimeError):
    """Another process is writing the output folder; the message says which and what to do."""


class OutputLock:
    """What :func:`output_lock` yields: ``folder``; ``inherited`` is True when the process that started this one
    holds the folder (a torchrun worker of ``ascendify dump -- torchrun ...``): it was prepared already."""

    def __init__(self, folder: Path, inherited: bool):
        self.folder = folder
        self.inherited = inherited


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return "another process"
    if not isinstance(info, dict) or not info.get("pid"):
        return "another process"
    who = info.get("who") or "another process"
    since = f", since {info['started']}" if info.get("started") else ""
    return f"{who} (pid {info['pid']}{since})"


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _locked(path: Path) -> bool:
    """True when some process holds the lock file ``path``."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        return not _try_lock(fd)  # taken here: nobody held it (closing the file releases it again)
    finally:
        os.close(fd)


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike[str], who: str) -> Iterator[OutputLock]:
    """Hold the output folder ``folder`` while a verb writes it: a second writer (another ``ascendify dump`` or
    ``train`` into the same folder) gets :class:`OutputLocked` at once, naming the holder, instead of mixing two
    runs in one folder. ``who`` names this writer in that message (``"ascendify dump"``).

    The lock is ``folder/.ascendify.lock`` held with ``flock``: the kernel releases it when the process dies
    however it dies, so a crashed run never leaves a stale lock. The folder is made when missing; on release
    the lock file is removed, and the folder too when this call made it and nothing was written into it.
    Children started while the lock is held inherit it (``ASCENDIFY_HELD_OUTPUTS``): ``OutputLock.inherited``
    is then True and nothing is locked again.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()) / "out"
    >>> with output_lock(d, "ascendify dump"):
    ...     with output_lock(d, "ascendify train"):
    ...         pass
    Traceback (most recent call last):
    ...
    ascendify.core.fileio.OutputLocked: ... is being written by ascendify dump (pid ...); wait for it to finish, ...
    >>> d.exists()   # made for the lock, left empty: removed again
    False
    """
    folder = Path(folder)
    key = os.path.realpath(folder)
    held = [p for p in os.environ.get(_HELD_ENV, "").split(os.pathsep) if p]
    path = folder / LOCK_NAME
    # "PID=PATH": a lock an ancestor took (in this process, a second writer is refused like any other)
    if any(e.partition("=")[2] == key and e.partition("=")[0] != str(os.getpid()) for e in held) and _locked(path):
        yield OutputLock(folder, inherited=True)
        return
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _try_lock(fd):
            os.close(fd)
            raise OutputLocked(
                f"{folder} is being written by {_holder(path)}; wait for it to finish, or choose another folder"
            )
        try:  # the holder before us may have removed the file between our open and our lock: lock the new one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    import time

    info = {"who": who, "pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode("utf-8"))
    except OSError:
        pass  # a full disk: the lock holds all the same, the message just cannot name us
    before = os.environ.get(_HELD_ENV)
    os.environ[_HELD_ENV] = os.pathsep.join([*held, f"{os.getpid()}={key}"])
    try:
        yield OutputLock(folder, inherited=False)
    finally:
        if before is None:
            os.environ.pop(_HELD_ENV, None)
        else:
            os.environ[_HELD_ENV] = before
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)
        if made:
            try:
                folder.rmdir()  # only when empty
            except OSError:
                pass


def foreign_output(folder: str | os.PathLike[str], marker: str, who: str,
                   ours: Callable[[Path], bool] | None = None) -> str | None:
    """Why ``who`` (``"ascendify dump"``) must not write into ``folder``, or None when it may: the folder is
    missing or empty, holds the ``marker`` file ``who`` writes into its output (``.ascendify-dump.json``), or
    ``ours(folder)`` recognises output of an earlier version without the marker. Any other non-empty folder
    holds a user's files: the message says what it holds, and to choose another folder."""
    folder = Path(folder)
    if not folder.exists():
        return None
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    try:
        entries = sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME)
    except OSError as e:
        return f"{folder} cannot be read ({e.strerror or e})"
    if not entries or marker in entries or (ours is not None and ours(folder)):
        return None
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    return (f"{folder} is not empty and was not written by {who} (it holds {len(entries)} "
            f"{'entry' if len(entries) == 1 else 'entries'}: {shown}; no {marker} marker): choose a new or empty "
            "folder")


def write_marker(folder: str | os.PathLike[str], marker: str, who: str, **info: Any) -> None:
    """Write ``folder/marker``: what says ``folder`` is ``who``'s output (see :func:`foreign_output`)."""
    from ascendify import __version__

    write_json(Path(folder) / marker, {"tool": f"ascendify {__version__}", "what": f"{who} output", **info})


def read_marker(folder: str | os.PathLike[str], marker: str) -> dict | None:
    """The marker :func:`write_marker` wrote, or None (missing or unreadable)."""
    try:
        doc = json.loads((Path(folder) / marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def remove_entries(folder: str | os.PathLike[str], owned: Callable[[Path], bool]) -> list[str]:
    """Remove the entries of ``folder`` (files and folders) for which ``owned(path)`` is True: a verb replacing its
    own earlier output whole, never a file it did not write. Returns their names."""
    import shutil

    gone = []
    for p in sorted(Path(folder).iterdir()):
        if p.name == LOCK_NAME or not owned(p):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
        gone.append(p.name)
    return gone
