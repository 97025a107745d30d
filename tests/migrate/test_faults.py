"""Faults while `migrate` runs: nothing lost, nothing mixed, nothing hangs (issue 26: items 1, 3, 4, 6, 7, 11, 13).

Faults are made deterministic: a held lock, a writer that fails with ENOSPC or Ctrl-C at a chosen file, a
folder listing or a file read that fails with EACCES (the tests may run as root, where chmod 000 reads fine).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascendify import cli
from ascendify.core import fileio
from ascendify.migrate import files as migrate_files
from ascendify.migrate.files import INPLACE_SUFFIX, OUTPUT_MARKER

CUDA = "import torch\nx = torch.zeros(2).cuda()\ntorch.cuda.synchronize()\n"


def run(*argv) -> int:
    return cli.main(["migrate", *map(str, argv)])


def tree(root: Path, n: int = 6) -> Path:
    src = root / "proj"
    (src / "sub").mkdir(parents=True)
    for i in range(n):
        (src / f"m{i}.py").write_text(CUDA.replace("x =", f"x{i} ="))
    (src / "sub" / "data.txt").write_text("not python\n")
    (src / "sub" / "s.py").write_text(CUDA)
    return src


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def marker(out: Path) -> dict:
    return json.loads((out / OUTPUT_MARKER).read_text())


def fail_at(monkeypatch, nth: int, exc: BaseException) -> list[str]:
    """The nth converted file written by the run raises ``exc`` (earlier ones are written)."""
    seen: list[str] = []
    real = fileio.write_atomic

    def write(path, data, **kw):
        seen.append(str(path))
        if len(seen) == nth:
            raise exc
        return real(path, data, **kw)

    monkeypatch.setattr(fileio, "write_atomic", write)
    return seen


# -- 1. two runs into one output -----------------------------------------------------------------------------
def test_a_second_writer_into_the_same_output_is_refused_while_the_first_holds_it(tmp_path, capsys):
    src, out = tree(tmp_path), tmp_path / "out"
    with fileio.output_lock(out, "ascendify migrate"):  # what a first `migrate -o out` holds while it runs
        assert run(src, "-o", out, "--to", "portable", "-q") == 2
        err = capsys.readouterr().err
        assert f"{out} is being written by ascendify migrate (pid {os.getpid()}" in err and "Traceback" not in err
        assert [p.name for p in out.iterdir()] == [fileio.LOCK_NAME]  # nothing of the second run was written
    assert run(src, "-o", out, "-q") == 0  # the lock ends with the run that held it
    assert marker(out)["complete"] is True


def test_the_report_folder_is_locked_too(tmp_path, capsys):
    src, rep = tree(tmp_path), tmp_path / "rep"
    with fileio.output_lock(rep, "ascendify migrate"):
        assert run(src, "--report", rep, "-q") == 2
    assert f"{rep} is being written by ascendify migrate" in capsys.readouterr().err
    assert not (rep / "report.json").exists()


# -- 3. unreadable folders and files ----------------------------------------------------------------------------
def test_an_unreadable_folder_is_reported_skipped_not_dropped(tmp_path, monkeypatch, capsys):
    src, out = tree(tmp_path), tmp_path / "out"
    real = os.scandir

    def scandir(path="."):
        if Path(path).name == "sub":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert run(src, "-o", out) == 3
    text = capsys.readouterr().out
    assert "sub/: cannot read this folder: Permission denied (not in the output)" in text
    assert "copied unchanged" not in text
    rep = json.loads((tmp_path / "out_migration_report" / "report.json").read_text())
    entry = {f["path"]: f for f in rep["files"]}["sub/"]
    assert entry["status"] == "skipped" and rep["totals"]["skipped"] == 1
    assert not (out / "sub").exists()


@pytest.mark.parametrize("name", ["m0.py", "sub/data.txt"])
def test_an_unreadable_file_is_skipped_and_not_said_to_be_copied(tmp_path, monkeypatch, capsys, name):
    src, out = tree(tmp_path), tmp_path / "out"
    bad = str(src / name)
    real_open, real_read = open, Path.read_bytes

    def guarded_open(file, *a, **kw):
        if str(file) == bad:
            raise PermissionError(errno.EACCES, "Permission denied", bad)
        return real_open(file, *a, **kw)

    def read_bytes(self):
        if str(self) == bad:
            raise PermissionError(errno.EACCES, "Permission denied", bad)
        return real_read(self)

    monkeypatch.setattr(migrate_files, "open", guarded_open, raising=False)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert run(src, "-o", out) == 3
    text = capsys.readouterr().out
    assert f"skipped {name}: cannot read: Permission denied (not in the output)" in text
    assert "copied unchanged" not in text
    assert not (out / name).exists() and (out / "m1.py").exists()


# -- 4. interrupted and failed runs ------------------------------------------------------------------------------
def test_ctrl_c_during_o_leaves_an_output_marked_incomplete_that_the_rerun_completes(tmp_path, monkeypatch, capsys):
    src = tree(tmp_path)
    clean = tmp_path / "clean"
    assert run(src, "-o", clean, "-q", "--jobs", "1") == 0
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        fail_at(m, 3, KeyboardInterrupt())
        assert run(src, "-o", out, "-q", "--jobs", "1") == 130
    assert "is incomplete (its marker says so); run the same command again" in capsys.readouterr().err
    assert marker(out)["complete"] is False
    assert len([p for p in files(out) if p.endswith(".py")]) < len(files(clean)) - 1  # a partial tree
    assert run(src, "-o", out, "--jobs", "1") == 0  # not refused as "not written by ascendify"
    assert "left incomplete by an interrupted run: this run completes it" in capsys.readouterr().out
    assert files(out) == {**files(clean), OUTPUT_MARKER: (out / OUTPUT_MARKER).read_bytes()}
    assert marker(out)["complete"] is True and set(marker(out)["files"]) == set(files(clean)) - {OUTPUT_MARKER}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_full_disk_names_the_file_and_the_rerun_completes(tmp_path, monkeypatch, capsys, jobs):
    src, out = tree(tmp_path), tmp_path / "out"
    with monkeypatch.context() as m:
        # the marker is the first write; then each process's first converted file fails, as f.write() fails
        fail_at(m, 2, OSError(errno.ENOSPC, "No space left on device"))
        assert run(src, "-o", out, "-q", "--jobs", jobs) == 4
    err = capsys.readouterr().err
    assert re.search(rf"cannot write {re.escape(str(out))}/(sub/s|m\d)\.py: No space left on device;", err), err
    assert "is incomplete (its marker says so)" in err and "Traceback" not in err
    assert marker(out)["complete"] is False
    assert run(src, "-o", out, "-q", "--jobs", "1") == 0
    assert marker(out)["complete"] is True and "x5 = torch.zeros(2).npu()" in (out / "m5.py").read_text()


def test_a_killed_worker_ends_the_run_with_the_output_marked_incomplete(tmp_path, monkeypatch, capsys):
    src, out = tree(tmp_path), tmp_path / "out"
    real = migrate_files.process

    def process(task, step=None):
        if task.src.endswith("m3.py"):  # the out-of-memory killer takes the worker converting it
            os.kill(os.getpid(), signal.SIGKILL)
        return real(task, step)

    with monkeypatch.context() as m:
        m.setattr(migrate_files, "process", process)
        assert run(src, "-o", out, "-q", "--jobs", "2") == 4
    err = capsys.readouterr().err
    assert re.search(r"a migrate worker process \(pid \d+\) ended without its results: it was killed by signal 9 "
                     r"\(out of memory\?\); .* is incomplete \(its marker says so\)", err), err
    assert "Traceback" not in err and marker(out)["complete"] is False
    assert run(src, "-o", out, "-q", "--jobs", "2") == 0
    assert marker(out)["complete"] is True and "x3 = torch.zeros(2).npu()" in (out / "m3.py").read_text()


def test_a_full_disk_while_copying_a_file_names_it(tmp_path, monkeypatch, capsys):
    src, out = tree(tmp_path), tmp_path / "out"
    real = shutil.copystat

    def copystat(a, b, **kw):
        if Path(a).name == "data.txt":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(a, b, **kw)

    monkeypatch.setattr(shutil, "copystat", copystat)
    assert run(src, "-o", out, "-q", "--jobs", "1") == 4
    assert f"cannot write {out / 'sub' / 'data.txt'}: No space left on device" in capsys.readouterr().err
    assert not list(out.rglob("*.tmp"))


def test_ctrl_c_during_inplace_changes_nothing(tmp_path, monkeypatch, capsys):
    src = tree(tmp_path)
    before = files(src)
    real = migrate_files.process
    calls = []

    def process(task, step=None):
        calls.append(task)
        if len(calls) == 5:  # four files converted and waiting beside their inputs
            raise KeyboardInterrupt
        return real(task, step)

    monkeypatch.setattr(migrate_files, "process", process)
    assert run(src, "--inplace", "-q", "--jobs", "1") == 130
    assert "interrupted before any file was rewritten: the input is as it was" in capsys.readouterr().err
    assert files(src) == before  # no half-converted tree, no converted copy left beside a file
    assert not list(src.rglob(f"*{INPLACE_SUFFIX}"))


def test_inplace_swaps_every_file_in_at_the_end(tmp_path, monkeypatch):
    src = tree(tmp_path)
    swapped_when_done = []
    real = migrate_files.swap_inplace

    def swap(results, tasks, done):
        # every file is converted (and waiting beside its input) before the first input is replaced
        swapped_when_done.append(all(".cuda()" in p.read_text() for p in src.rglob("*.py")))
        swapped_when_done.append(len(list(src.rglob(f"*{INPLACE_SUFFIX}"))))
        return real(results, tasks, done)

    monkeypatch.setattr(migrate_files, "swap_inplace", swap)
    assert run(src, "--inplace", "-q") == 0
    assert swapped_when_done == [True, 7]
    assert all("npu" in p.read_text() for p in src.rglob("*.py")) and not list(src.rglob(f"*{INPLACE_SUFFIX}"))


def test_an_error_during_the_inplace_swap_lists_the_files_rewritten(tmp_path, monkeypatch, capsys):
    src = tree(tmp_path)
    real = os.replace
    n = []

    def replace(a, b):
        if str(a).endswith(INPLACE_SUFFIX):
            n.append(b)
            if len(n) == 3:
                raise OSError(errno.EIO, "Input/output error")
        return real(a, b)

    monkeypatch.setattr(os, "replace", replace)
    assert run(src, "--inplace", "-q", "--jobs", "1") == 4
    err = capsys.readouterr().err
    assert f"cannot write {n[2]}: Input/output error; 2 files had been rewritten already: {n[0]}, {n[1]}" in err
    assert not list(src.rglob(f"*{INPLACE_SUFFIX}"))
    assert [p for p in map(Path, n) if "npu" in p.read_text()] == [Path(n[0]), Path(n[1])]


# -- 6. a named pipe --------------------------------------------------------------------------------------------
def test_a_named_pipe_in_the_input_is_skipped_and_does_not_hang(tmp_path):
    src, out = tree(tmp_path), tmp_path / "out"
    os.mkfifo(src / "sub" / "pipe")
    p = subprocess.run([sys.executable, "-m", "ascendify", "migrate", str(src), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    assert "sub/pipe: a named pipe, not a regular file (not in the output)" in p.stdout
    assert not (out / "sub" / "pipe").exists() and (out / "sub" / "s.py").exists()


# -- 7. workers die with the parent -----------------------------------------------------------------------------
SLOW_RUN = """
import sys, time
from ascendify import cli
from ascendify.migrate import files
real = files.process
def process(task, step=None):
    time.sleep(0.5)  # every file takes a while: the run is still going when it is killed
    return real(task, step)
files.process = process
sys.exit(cli.main(["migrate", sys.argv[1], "-o", sys.argv[2], "--jobs", "2", "-q"]))
"""


def _children(pid: int) -> set[int]:
    try:
        return {int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# a worker that is still in its after-fork hooks when the pool stops it (SIGTERM to the run, the pool's terminate()
# then SIGTERM to each worker): it holds the run's handler, and an exception raised in a fork hook is swallowed
SLOW_FORK = "import os, time\nos.register_at_fork(after_in_child=lambda: time.sleep(1.5))\n"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree from /proc (Linux)")
@pytest.mark.parametrize("sig, slow_fork", [(signal.SIGKILL, False), (signal.SIGTERM, False), (signal.SIGTERM, True)])
def test_workers_end_with_the_parent(tmp_path, sig, slow_fork):
    src, out = tree(tmp_path, n=40), tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", (SLOW_FORK if slow_fork else "") + SLOW_RUN, str(src), str(out)])
    try:
        deadline = time.monotonic() + 60
        while len(workers := _children(p.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(workers) == 2 and p.poll() is None
        p.send_signal(sig)
        p.wait(timeout=30)
        deadline = time.monotonic() + 5  # the target: no child left after 5 s
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(map(_alive, workers))
        if sig == signal.SIGTERM:  # stopped as Ctrl-C stops it: the workers' temporary files removed, marked
            assert p.returncode == 143
            assert json.loads((out / OUTPUT_MARKER).read_text())["complete"] is False
            assert not list(out.rglob("*.tmp"))
    finally:
        p.kill()
        p.wait()


# -- 13. bad option values --------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--max-size", "-5"], "--max-size -5: give a size in bytes, 1 or more"),
    (["--max-size", "0"], "--max-size 0: give a size in bytes, 1 or more"),
    (["--jobs", "-2"], "--jobs -2: give a number of processes, or 0 for one per CPU"),
])
def test_bad_numbers_are_refused(tmp_path, capsys, argv, message):
    src = tree(tmp_path)
    assert run(src, *argv) == 2
    assert message in capsys.readouterr().err


def test_max_size_reads_a_unit(tmp_path, capsys):
    src = tree(tmp_path)
    (src / "big.py").write_text(CUDA + "#" * 3000 + "\n")
    assert run(src, "--max-size", "2K", "--format", "json", "-q") == 3
    skipped = [f for f in json.loads(capsys.readouterr().out)["files"] if f["status"] == "skipped"]
    assert [f["path"] for f in skipped] == ["big.py"] and "> 2048)" in skipped[0]["reason"]
