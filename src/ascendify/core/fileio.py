"""Atomic file writing: an interrupted run never leaves a half-written file.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "a.txt", b"hello")
>>> (d / "a.txt").read_bytes()
b'hello'
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
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


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Atomically write ``obj`` as indented UTF-8 JSON."""
    write_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_csv(path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Atomically write a CSV file with ``header`` and ``rows``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    write_atomic(path, buf.getvalue())


class FolderBusy(OSError):
    """Another process holds the folder's lock (see :func:`folder_lock`)."""


@contextmanager
def folder_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on the folder ``path`` (made when missing) while a run writes into it; raises
    :class:`FolderBusy` at once when another process holds it (two runs never write one folder together).

    The lock is ``flock`` on the folder itself: it adds no file, and it ends with the process however the
    process ends (killed too), so a lock is never left stale. Where ``flock`` is missing it does nothing.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(errno.EBUSY, "another process is writing into this folder", str(path)) from None
        except OSError:  # a file system without flock: no lock, as before
            pass
        yield
    finally:
        os.close(fd)
