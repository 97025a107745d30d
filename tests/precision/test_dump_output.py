"""``ascendify dump``'s output folder: one dump at a time (a second is refused while the first holds the folder),
never over a user's files, an earlier dump of ours replaced whole, and a full disk that stops the dump with exit
status 4 and no half-written step."""

from __future__ import annotations

import errno
import json
import textwrap

import pytest

from ascendify.cli import main
from ascendify.core import fileio
from ascendify.precision import list_steps_ranks, load_dump, msprobe_io

TRAIN = textwrap.dedent(
    """
    import sys
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_a_second_dump_into_a_folder_in_use_is_refused(work, capsys):
    with fileio.output_lock(work / "out", "ascendify dump"):  # the first dump, still running
        assert main(["dump", "-q", "-o", "out", "train.py"]) == 2
        err = capsys.readouterr().err
        assert "out is being written by ascendify dump (pid" in err and "choose another folder" in err
        assert list_steps_ranks(work / "out") == []  # nothing of the second run went in
    # the first one is done: the folder is free again
    assert main(["dump", "-q", "-o", "out", "train.py"]) == 0
    assert list_steps_ranks(work / "out") == [(0, 0), (1, 0), (2, 0)]
    assert not (work / "out" / fileio.LOCK_NAME).exists()


def test_a_folder_of_user_files_is_refused_and_left_alone(work, capsys):
    (work / "mine").mkdir()
    (work / "mine" / "dump.json").write_text('{"my": "data"}')
    assert main(["dump", "-q", "-o", "mine", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "mine is not empty and was not written by ascendify dump" in err and "dump.json" in err
    assert (work / "mine" / "dump.json").read_text() == '{"my": "data"}'
    assert sorted(p.name for p in (work / "mine").iterdir()) == ["dump.json"]


def test_an_msprobe_dump_is_the_users(work, capsys):
    rank = work / "ms" / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": {}}))
    assert main(["dump", "-q", "-o", "ms", "train.py"]) == 2
    assert "not written by ascendify dump" in capsys.readouterr().err
    assert (rank / "dump.json").is_file()


def test_a_dump_over_an_earlier_one_replaces_it_whole(work):
    assert main(["dump", "-q", "-o", "out", "train.py", "3"]) == 0
    assert list_steps_ranks(work / "out") == [(0, 0), (1, 0), (2, 0)]
    (work / "out" / "notes.txt").write_text("my notes")  # the user's file beside the dump stays
    assert main(["dump", "-q", "-o", "out", "train.py", "1"]) == 0
    assert list_steps_ranks(work / "out") == [(0, 0)]  # no step1/step2 of the earlier run
    assert sorted(p.name for p in (work / "out").iterdir()) == [".ascendify-dump.json", "notes.txt", "step0"]
    marker = json.loads((work / "out" / ".ascendify-dump.json").read_text())
    assert marker["finished"] is True and marker["exit_code"] == 0 and marker["program"] == "python train.py 1"


def test_an_earlier_dump_without_the_marker_is_recognised(work):
    assert main(["dump", "-q", "-o", "out", "train.py", "2"]) == 0
    (work / "out" / msprobe_io.DUMP_MARKER).unlink()  # as an older version wrote it
    assert main(["dump", "-q", "-o", "out", "train.py", "1"]) == 0
    assert list_steps_ranks(work / "out") == [(0, 0)]


def test_a_full_disk_stops_the_dump_with_status_4_and_no_partial_step(work, monkeypatch, capsys):
    real = msprobe_io._write_plain

    def full_at_step1(path, data, *fresh):
        if "step1" in str(path):
            real(path, data[: len(data) // 2], *fresh)  # a part went out before the disk filled up
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data, *fresh)

    monkeypatch.setattr(msprobe_io, "_write_plain", full_at_step1)
    assert main(["dump", "-q", "-o", "out", "train.py"]) == 4
    err = capsys.readouterr().err
    assert "ascendify dump: out: step 1 could not be written" in err and "No space left on device" in err
    assert list_steps_ranks(work / "out") == [(0, 0)]
    assert not (work / "out" / "step1").exists()  # no rank folder without its dump.json
    assert load_dump(work / "out", step=0).nodes
    marker = json.loads((work / "out" / ".ascendify-dump.json").read_text())
    assert marker["exit_code"] == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "-1"], "--steps: '-1': steps and ranks count from 0"),  # selected nothing, said nothing
        (["--mode", "tensors", "--max-bytes", "0"], "--max-bytes: '0' must be a size of at least 1 byte"),  # default
        (["--mode", "tensors", "--max-bytes", "-5"], "--max-bytes: '-5' must be a size of at least 1 byte"),
    ],
)
def test_numbers_that_select_nothing_are_refused(work, capsys, argv, message):
    assert main(["dump", "-q", *argv, "-o", "out", "train.py"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (work / "out").exists()


def test_a_scope_that_matches_nothing_is_said(work, capsys):
    assert main(["dump", "--scope", "no.such.layer", "-o", "out", "train.py"]) == 0
    assert "--scope no.such.layer matched no module path or API" in capsys.readouterr().err
