"""The trainer on faults: two runs into one --out (the second refused while the first holds it), a read-only or
full output, a truncated last.pt to resume from, a model factory that raises: one-line errors, never a
traceback, never two runs mixed in one folder."""

from __future__ import annotations

import errno
import pathlib

import pytest

from ascendify.cli import main
from ascendify.core import fileio
from ascendify.train import ConfigError, train
from ascendify.train import checkpoint as ckpt
from tests.train.conftest import TINY

ARGS = ["--model", f"{TINY}:make", "--data", "synthetic", "--synthetic-size", "48", "--image-size", "8",
        "--batch-size", "16", "--epochs", "1", "--device", "cpu", "--no-tensorboard", "-q"]  # fmt: skip


def test_a_second_run_into_an_out_in_use_is_refused(tiny_cfg, tmp_path):
    out = tmp_path / "run"
    with fileio.output_lock(out, "ascendify train"):  # the first run, still training
        with pytest.raises(ConfigError, match=r"run is being written by ascendify train \(pid \d+"):
            train(tiny_cfg(epochs=1), show_progress=False)
        assert sorted(p.name for p in out.iterdir()) == [fileio.LOCK_NAME]  # nothing of the second run
    assert not out.exists()  # the lock's folder, made for it and left empty, is gone


def test_a_read_only_out_is_one_line(tmp_path, monkeypatch, capsys):
    real = pathlib.Path.mkdir

    def read_only(self, *a, **kw):
        if "ro" in self.parts:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    assert main(["train", *ARGS, "--out", str(tmp_path / "ro" / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ascendify train: --out ") and "Read-only file system" in err and "Traceback" not in err


def test_a_full_disk_is_one_line_exit_4(tmp_path, monkeypatch, capsys):
    def full(path, data, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ckpt, "write_atomic", full)
    assert main(["train", *ARGS, "--out", str(tmp_path / "run")]) == 4
    err = capsys.readouterr().err
    assert f"ascendify train: cannot write {tmp_path / 'run'}" in err and "No space left on device" in err


def test_resuming_a_truncated_checkpoint_is_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *ARGS, "--out", str(out)]) == 0
    last = out / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    assert main(["train", *ARGS, "--epochs", "2", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"{last}: not a readable checkpoint, truncated or damaged?" in err and "Traceback" not in err


def test_a_model_factory_that_raises_says_file_factory_and_exception(tmp_path, capsys):
    (tmp_path / "broke.py").write_text("def make(num_classes=10):\n    raise RuntimeError('factory broke')\n")
    assert main(["train", *ARGS, "--model", f"{tmp_path / 'broke.py'}:make", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ascendify train: {tmp_path / 'broke.py'}:make: make() raised RuntimeError: factory broke "
                   f"(at {tmp_path / 'broke.py'}:2)")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"lr": float("nan")}, "lr must be a finite number, not nan"),  # trained on NaN losses, exit 0
        ({"momentum": float("inf")}, "momentum must be a finite number, not inf"),
        ({"num_classes": 1}, "num_classes must be at least 2"),  # cross-entropy over one class: always 0
    ],
)
def test_settings_that_cannot_train_are_refused(tiny_cfg, kw, message):
    with pytest.raises(ConfigError, match=message):
        tiny_cfg(**kw)


def test_nproc_below_one_is_refused(tmp_path, capsys):
    assert main(["train", *ARGS, "--nproc", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--nproc must be at least 1, not 0" in capsys.readouterr().err


def test_a_fresh_run_never_overwrites_a_users_files(tiny_cfg, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "curves.png").write_bytes(b"my own picture")
    (out / "train.toml").write_text("epochs = 1\n")  # a config beside the run is fine
    with pytest.raises(ConfigError, match=r"holds curves.png, which this run would overwrite"):
        train(tiny_cfg(epochs=1), show_progress=False)
    assert (out / "curves.png").read_bytes() == b"my own picture"
    (out / "curves.png").unlink()
    train(tiny_cfg(epochs=1), show_progress=False)
    assert (out / "train.toml").read_text() == "epochs = 1\n" and (out / "last.pt").is_file()


def test_data_that_is_a_file_is_said_to_be_a_file(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("x")
    assert main(["train", *ARGS, "--data", str(tmp_path / "x.txt"), "--out", str(tmp_path / "o")]) == 2
    assert f"{tmp_path / 'x.txt'}: is a file, not a folder" in capsys.readouterr().err
