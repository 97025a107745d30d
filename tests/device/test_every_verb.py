"""Every verb that runs something on a device takes the same ``--device`` words with the same meaning: one
option (``ascendify.commands.add_device_argument``) and one resolver (``ascendify.device.placement.resolve``)."""

import argparse

import pytest

from ascendify import cli
from ascendify.core import devices
from ascendify.device import placement

WORDS = ("auto", "npu", "npu:1", "cuda", "cuda:1", "xpu", "xpu:1", "mps", "cpu", " CPU ", "tpu", "cuda:", "auto:1")
# --device there means something else: doctor's is a filter of the targets it checks, several at once, with the
# real NPU and the emulated one apart ("npu", "emulated"); advise's names the chip an estimate is for ("910B4")
OTHER_MEANING = {"doctor", "advise"}


def _device_options() -> dict[str, tuple[argparse.ArgumentParser, argparse.Action]]:
    """``{"bench loader": (parser, action)}``: every parser of every verb with a ``--device`` option."""
    out = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        for a in parser._actions:
            if "--device" in a.option_strings:
                out[name] = (parser, a)
            if isinstance(a, argparse._SubParsersAction):
                for sub, p in a.choices.items():
                    walk(f"{name} {sub}", p)

    for verb in cli.VERBS:
        parser = cli.build_parser(verb)
        walk(verb, parser._subparsers._group_actions[0].choices[verb])
    return out


def _accepts(parser, action, word):
    flag = action.option_strings[0]
    try:
        return getattr(parser.parse_args([flag, word, *_required(parser)]), action.dest)
    except SystemExit:
        return None


def _required(parser) -> list[str]:
    return ["project", "--", "python", "x.py"] if parser.prog.endswith(" port") else []


def test_the_verbs_that_take_a_device_share_one_option(capsys):
    found = _device_options()
    shared = {name for name, (_, a) in found.items() if getattr(a, "purpose", None)}
    assert shared == {"port", "demo", "run", "dump", "bench", "bench loader", "train"}, shared
    assert {name.split()[0] for name in found} - shared == OTHER_MEANING
    for name in shared:
        parser, action = found[name]
        purpose = action.purpose
        for word in WORDS:
            try:
                want = placement.check(word, purpose) and word.strip().lower()
            except placement.DeviceSpecError:
                want = None
            if not action.type or action.type is str:  # train: checked when resolved (its --config may name one)
                assert _accepts(parser, action, word) == word, (name, word)
            else:  # every other verb refuses what the resolver refuses, as the command line is read
                assert _accepts(parser, action, word) == want, (name, word)
        capsys.readouterr()
    run_parser, run_action = found["run"]
    assert run_parser.parse_args(["--to", "npu", "t.py"]).to == run_parser.parse_args(["--device", "npu", "t.py"]).to


@pytest.fixture
def no_npu_one_gpu(monkeypatch):
    """A machine with a CUDA GPU and no NPU, where turning the emulator on only says so."""
    monkeypatch.setattr(devices, "is_npu_available", lambda: False)
    monkeypatch.setattr(devices, "torch_npu_installed", lambda: False)
    monkeypatch.setattr(devices, "is_emulated_npu_enabled", lambda: False)
    monkeypatch.setattr(devices, "emulation_requested", lambda: False)
    monkeypatch.setattr(devices, "is_cuda_available", lambda: True)
    monkeypatch.setattr(devices, "is_xpu_available", lambda: False)
    monkeypatch.setattr(devices, "is_mps_available", lambda: False)
    monkeypatch.setattr(placement.shutil, "which", lambda name: f"/usr/bin/{name}")
    turned_on = []
    monkeypatch.setattr(placement, "enable_emulated_npu", lambda **kw: turned_on.append(kw))
    monkeypatch.setattr(placement, "_check_emulated_index", lambda index, backward: None)
    return turned_on


def test_each_word_means_the_same_for_every_purpose(no_npu_one_gpu):
    for purpose in placement.PURPOSES:
        npu = placement.resolve("npu", purpose=purpose)
        assert (npu.device, npu.emulated) == ("npu", True), purpose  # the real NPU, else the emulated one
        assert placement.resolve("cuda", purpose=purpose).device == "cuda", purpose
        host = placement.resolve("cpu", purpose=purpose)
        assert host.kind == "cpu" or host.emulated, purpose  # the host only (port: its NPU side emulated there)
        assert all(r.why for r in (npu, host))
    # auto: a real NPU, the emulated one when on, CUDA...: the GPU here, for every purpose
    assert {placement.resolve("auto", purpose=p).device for p in placement.PURPOSES} == {"cuda"}
    # the emulator was turned on for each explicit npu but port's (its runs are child processes)
    assert len(no_npu_one_gpu) == len(placement.PURPOSES) - 1


def test_what_auto_falls_back_to_is_the_purposes_only_difference(no_npu_one_gpu, monkeypatch):
    monkeypatch.setattr(devices, "is_cuda_available", lambda: False)
    got = {p: placement.resolve("auto", purpose=p) for p in placement.PURPOSES}
    assert {p: (r.device, r.emulated) for p, r in got.items()} == {
        "run": ("npu", True), "train": ("npu", True), "port": ("npu", True),  # the embedded default
        "bench": ("cpu", False), "redirect": ("cpu", False),  # the emulator only when asked for
    }
    assert len(no_npu_one_gpu) == 2  # run and train turned it on; port's children do it themselves
    monkeypatch.setattr(devices, "emulation_requested", lambda: True)  # ASCENDIFY_EMULATE=npu: asked for
    assert {placement.resolve("auto", purpose=p).device for p in placement.PURPOSES} == {"npu"}


def test_port_looks_for_cuda_without_importing_torch(no_npu_one_gpu, monkeypatch):
    monkeypatch.setattr(placement.shutil, "which", lambda name: None)  # no nvidia-smi: no GPU to run the original
    assert placement.resolve("auto", purpose="port").emulated
    with pytest.raises(placement.DeviceError, match="no cuda device here") as e:
        placement.resolve("cuda", purpose="port")
    assert e.value.exit_code == 3


@pytest.mark.parametrize(("word", "purpose", "message"), [
    ("npu:1", "bench", "give the device type only (npu): the bench measures device 0"),
    ("cuda:1", "redirect", "give the device type only (cuda)"),
    ("npu:1", "port", "give the device type only (npu)"),
    ("xpu", "bench", "not benchmarked yet"),
    ("mps", "port", "use auto, npu, cuda or cpu"),
])
def test_what_a_purpose_cannot_take_is_a_usage_error(word, purpose, message):
    with pytest.raises(placement.DeviceSpecError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        placement.resolve(word, purpose=purpose)
    assert e.value.exit_code == 2
