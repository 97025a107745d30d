"""The reference trainer: outputs, exact resume, gradient accumulation, AMP, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from ascendify import cli
from ascendify.train import ConfigError, TrainConfig, train
from ascendify.train.config import load_toml
from tests.train.conftest import TINY, run_cli

KEYS = {"epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "epoch_time", "throughput"}


def _weights(out) -> dict[str, torch.Tensor]:
    return torch.load(f"{out}/last.pt", weights_only=True)["model"]


def _numbers(history):
    return [{k: v for k, v in h.items() if k not in ("epoch_time", "throughput")} for h in history]


def test_run_writes_history_checkpoints_and_curves(tiny_cfg, tmp_path):
    cfg = tiny_cfg(tensorboard=True, sched="step", label_smoothing=0.1, clip_grad=1.0)
    history = train(cfg, show_progress=False)
    out = tmp_path / "run"
    assert [h["epoch"] for h in history] == [1, 2]
    assert set(history[0]) == KEYS
    assert json.loads((out / "history.json").read_text()) == history
    assert (out / "history.csv").read_text().splitlines()[0].split(",") == [
        "epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "epoch_time", "throughput"]
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert list((out / "tb").glob("events.out.tfevents.*"))
    for name in ("best.pt", "last.pt", "train.json"):
        assert (out / name).exists(), name
    summary = json.loads((out / "train.json").read_text())
    assert summary["finished"] and summary["global_step"] == 2 * 5  # 77 train samples / 16 = 5 steps per epoch
    assert all(0 <= h["val_acc"] <= 1 and h["throughput"] > 0 for h in history)
    assert history[0]["lr"] == pytest.approx(0.05)  # StepLR, a third of 2 epochs -> period 1
    assert history[1]["lr"] == pytest.approx(0.005)


def _cli(capsys, *args: str):
    """``ascendify train ARGS`` in this process (bad input is refused before any training: no child needed);
    (exit status, stdout, stderr)."""
    code = cli.main(["train", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_interrupted_and_resumed_run_is_bit_identical(tmp_path, device, capsys):
    # the command line; on the npu in child processes (the emulated npu must be enabled before any backward() of
    # the process), on the CPU in this one (three fewer interpreters to start)
    common = ["--model", f"{TINY}:make", "--data", "synthetic", "--synthetic-size", "96", "--image-size", "16",
              "--batch-size", "16", "--epochs", "3", "--device", device, "--no-tensorboard", "-q"]

    def cli_run(*args: str) -> tuple[int, str]:
        if device == "npu":
            r = run_cli(*args)
            return r.returncode, r.stderr
        code, _, err = _cli(capsys, *args)
        return code, err

    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    assert cli_run(*common, "--out", whole)[0] == 0
    code, err = cli_run(*common, "--out", part, "--max-steps", "7")  # stops in the middle of epoch 2
    assert code == 0, err
    assert len(json.loads((tmp_path / "part" / "history.json").read_text())) == 1
    code, err = cli_run(*common, "--out", part, "--resume")
    assert code == 0, err
    expect = json.loads((tmp_path / "whole" / "history.json").read_text())
    got = json.loads((tmp_path / "part" / "history.json").read_text())
    assert _numbers(got) == _numbers(expect)
    a, b = _weights(whole), _weights(part)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_gradient_accumulation_matches_a_larger_batch(tiny_cfg, tmp_path):
    same = dict(model=f"{TINY}:make_no_dropout", synthetic_size=100)  # 80 training samples: 5 full batches of 16
    big = train(tiny_cfg(out=str(tmp_path / "big"), batch_size=16, **same), show_progress=False)
    acc = train(tiny_cfg(out=str(tmp_path / "acc"), batch_size=8, grad_accum=2, **same), show_progress=False)
    for x, y in zip(_numbers(big), _numbers(acc), strict=True):
        for k in x:
            assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-7), k


def test_activation_checkpointing_changes_nothing(tiny_cfg, tmp_path):
    plain = train(tiny_cfg(out=str(tmp_path / "a")), show_progress=False)
    ckpt = train(tiny_cfg(out=str(tmp_path / "b"), activation_checkpointing=True), show_progress=False)
    assert _numbers(plain) == _numbers(ckpt)
    assert any(".inner." in k for k in _weights(tmp_path / "b"))  # the blocks really were wrapped


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_runs_and_learns_something(tiny_cfg, tmp_path, amp):
    history = train(tiny_cfg(amp=amp, epochs=2, channels_last=True), show_progress=False)
    assert all(h["train_loss"] == h["train_loss"] for h in history)  # no NaN
    last = torch.load(f"{tmp_path}/run/last.pt", weights_only=True)
    assert last["scaler"] if amp == "fp16" else True  # the GradScaler's state is saved with fp16


def test_config_from_toml_with_overrides(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[train]\nmodel = "resnet50"\nepochs = 3\nlr = 1\namp = "bf16"\n')
    cfg = TrainConfig.from_sources(str(f), {"epochs": 7, "lr": None})
    assert (cfg.model, cfg.epochs, cfg.lr, cfg.amp) == ("resnet50", 7, 1.0, "bf16")
    f.write_text("epochs = 3\nbogus = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        load_toml(str(f))
    f.write_text('epochs = "three"\n')
    with pytest.raises(ConfigError, match="epochs should be int"):
        load_toml(str(f))
    with pytest.raises(ConfigError, match="amp must be one of"):
        TrainConfig(amp="fp8")


def test_refuses_to_mix_runs(tiny_cfg, tmp_path):
    train(tiny_cfg(epochs=1), show_progress=False)
    with pytest.raises(ConfigError, match="holds an earlier run"):
        train(tiny_cfg(epochs=1), show_progress=False)
    with pytest.raises(ConfigError, match="batch_size was 16"):
        train(tiny_cfg(epochs=2, resume=True, batch_size=8), show_progress=False)
    with pytest.raises(ConfigError, match="does not exist"):
        train(tiny_cfg(out=str(tmp_path / "none"), resume=True), show_progress=False)


def test_cli_bad_input_is_a_clear_error(tmp_path, capsys):
    code, _, err = _cli(capsys, "--model", "nope", "--out", str(tmp_path / "o"), "-q")
    assert code == 2 and "unknown model 'nope'" in err
    code, _, err = _cli(capsys, "--data", str(tmp_path / "missing"), "--model", f"{TINY}:make", "--out",
                        str(tmp_path / "o"), "-q")
    assert code == 2 and "no such folder" in err
    code, _, err = _cli(capsys, "--device", "cuda", "--out", str(tmp_path / "o"), "-q")
    assert code == 3 and "no cuda device" in err  # not usable here: as bench and compare say it
    code, _, err = _cli(capsys, "--device", "tpu", "--out", str(tmp_path / "o"), "-q")
    assert code == 2 and "unknown device 'tpu'" in err
    assert not (tmp_path / "o" / "last.pt").exists()


def test_image_folder_data(tmp_path, capsys):
    from PIL import Image

    for c, color in (("cat", (200, 30, 30)), ("dog", (30, 30, 200))):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (20 + i, 18), color).save(tmp_path / "imgs" / c / f"{i}.png")
    (tmp_path / "imgs" / "dog" / "notes.txt").write_text("not an image")
    code, out, err = _cli(capsys, "--model", f"{TINY}:make", "--data", str(tmp_path / "imgs"), "--image-size", "16",
                          "--epochs", "2", "--batch-size", "4", "--device", "cpu", "--out", str(tmp_path / "o"),
                          "--json", "-q")
    assert code == 0, err
    history = json.loads(out)["history"]
    assert len(history) == 2 and history[-1]["val_acc"] >= 0.5


def test_digits_are_learned(tiny_cfg):
    # the tiny model at the digits' own 8x8 (ResNet-18 at 32x32 reaches 98%: benchmarks/train_digits.py)
    history = train(tiny_cfg(data="digits", epochs=3, batch_size=32, image_size=8), show_progress=False)
    assert history[-1]["val_acc"] >= 0.5, history  # chance is 0.1
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_bad_input_leaves_no_output_folder_and_out_may_not_be_a_file(tmp_path, capsys):
    # `--data empty/` and `--model nofile.py:X` left an empty --out folder behind; `--out FILE` was a traceback
    (tmp_path / "empty").mkdir()
    code, _, err = _cli(capsys, "--data", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "-q")
    assert code == 2 and "class folder" in err
    assert not (tmp_path / "o").exists()
    (tmp_path / "afile").write_text("x")
    code, _, err = _cli(capsys, "--model", f"{TINY}:make", "--out", str(tmp_path / "afile"), "-q")
    assert code == 2 and "is a file, not a folder" in err and "Traceback" not in err


def test_off_a_terminal_a_slow_run_still_shows_a_line_every_so_often(monkeypatch, capsys):
    # 20 s per step under bf16 on a CPU without bf16 units: with only "every 100 steps" a run looked hung
    import types

    from ascendify.train import progress

    cfg = types.SimpleNamespace(model="m", data="d", amp="off", batch_size=2, epochs=1, log_every=100)
    ctx = types.SimpleNamespace(world_size=1)
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    with progress.Progress(cfg, ctx, "cpu", False, enabled=True) as view:
        view.start_epoch(0, 300, 0)
        for step, t in ((1, 5.0), (2, 31.0), (3, 40.0), (4, 62.0), (100, 63.0)):
            clock[0] = t
            view.step(step, 1.0, 0.5, 2.0)
    lines = [line for line in capsys.readouterr().err.splitlines() if "step" in line]
    assert [line.split(":")[0].strip() for line in lines] == [
        "epoch 1 step 2/300", "epoch 1 step 4/300", "epoch 1 step 100/300"]
