"""``ascendify dump -- PROGRAM``: steps at optimizer.step() or ascendify.precision.step(), msprobe's config.json,
exit codes and messages for bad input, the tensor-mode limit, and one dump on the emulated npu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ascendify.cli import main
from ascendify.precision import list_steps_ranks, load_dump

TRAIN = textwrap.dedent(
    """
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)

EXPLICIT = textwrap.dedent(
    """
    import torch, torch.nn as nn
    import ascendify.precision as precision
    model = nn.Linear(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(2):
        for micro in range(2):  # gradient accumulation: one step is two optimizer-free micro batches
            model(torch.randn(2, 3)).sum().backward()
        opt.step()
        opt.step()
        precision.step()
    """
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "explicit.py").write_text(EXPLICIT)
    return tmp_path


def test_steps_end_at_optimizer_step(work, capsys):
    code = main(["dump", "--steps", "0,2", "-o", "out", "--json", "s.json", "--", "python", "train.py"])
    assert code == 0
    assert list_steps_ranks(work / "out") == [(0, 0), (2, 0)]
    summary = json.loads((work / "s.json").read_text())
    assert [w["step"] for w in summary["written"]] == [0, 2] and summary["exit_code"] == 0
    assert summary["steps_seen"] == 3  # three optimizer steps; nothing ran after the last one
    d = load_dump(work / "out", step=2)
    names = [n.name for n in d.nodes]
    assert "Module.0.Linear.forward.0" in names and "Module.0.Linear.backward.0" in names
    assert set(d.by_name()["Module.0.Linear.backward.0"].grads) == {"weight", "bias"}
    assert not any("sgd" in n.name.lower() or n.name.startswith("Tensor.add_") for n in d.nodes)  # optimizer
    err = capsys.readouterr().err
    assert "2 steps written to out" in err and "the program saw 3 steps" in err


def test_a_step_that_ran_something_after_the_last_optimizer_step_counts(work, capsys):
    # the same program, then one evaluation after the loop: a fourth step, recorded and written
    (work / "train_eval.py").write_text(TRAIN + "print(model(torch.randn(1, 4)).sum().item())\n")
    assert main(["dump", "-o", "out", "--json", "s.json", "--", "python", "train_eval.py"]) == 0
    summary = json.loads((work / "s.json").read_text())
    assert summary["steps_seen"] == 4 and [w["step"] for w in summary["written"]] == [0, 1, 2, 3]
    assert "4 steps written to out" in capsys.readouterr().err
    # not selected, it still counts: the program ran it
    assert main(["dump", "-o", "out2", "--steps", "0", "--json", "s2.json", "--", "python", "train_eval.py"]) == 0
    assert json.loads((work / "s2.json").read_text())["steps_seen"] == 4
    assert main(["dump", "-o", "out3", "--steps", "0", "--json", "s3.json", "--", "python", "train.py"]) == 0
    assert json.loads((work / "s3.json").read_text())["steps_seen"] == 3


def test_explicit_step_calls_replace_optimizer_steps(work):
    assert main(["dump", "-q", "-o", "out", "--level", "module", "--step-at", "call", "explicit.py"]) == 0
    assert list_steps_ranks(work / "out") == [(0, 0), (1, 0)]
    d = load_dump(work / "out", step=1)
    fwd = [n for n in d.nodes if n.direction == "forward"]
    assert [n.call_index for n in fwd] == [0, 1]  # the two micro batches of step 1


def test_msprobe_config_is_accepted(work):
    cfg = {"task": "statistics", "dump_path": "from_config", "rank": [], "step": [1], "level": "L0",
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}  # fmt: skip
    (work / "config.json").write_text(json.dumps(cfg))
    assert main(["dump", "-q", "--config", "config.json", "--", "python", "train.py"]) == 0
    assert list_steps_ranks(work / "from_config") == [(1, 0)]
    d = load_dump(work / "from_config")
    assert d.level == "module" and {n.kind for n in d.nodes} == {"module"}
    doc = json.loads((work / "from_config" / "step1" / "rank0" / "dump.json").read_text())
    assert doc["level"] == "L0" and doc["task"] == "statistics"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "broken.json"], "broken.json: not valid JSON"),
        (["--config", "odd.json"], "odd.json: unknown settings colour"),
        (["--steps", "1-x"], "--steps: '1-x' is not a number"),
        (["--max-bytes", "lots"], "--max-bytes: 'lots' is not a size"),
        (["-o", "afile"], "the dump folder afile exists and is a file"),
        # a folder that cannot be made: said before the program runs, not as a traceback at its first step
        (["-o", "afile/sub"], "-o afile/sub: afile is a file, not a folder"),
        (["--overflow", "-o", "afile/ov"], "-o afile/ov: afile is a file, not a folder"),
    ],
)
def test_bad_command_lines_exit_2(work, capsys, argv, message):
    (work / "broken.json").write_text('{"level": "mix", ')
    (work / "odd.json").write_text('{"colour": "blue"}')
    (work / "afile").write_text("not a folder")
    assert main(["dump", *argv, "--", "python", "train.py"]) == 2
    assert message in capsys.readouterr().err
    assert not (work / "dump").exists()


def test_missing_program_exits_2(work, capsys):
    assert main(["dump", "--", "python", "nope.py"]) == 2
    assert "nope.py" in capsys.readouterr().err


def test_tensor_mode_limit_exits_4(work, capsys):
    code = main(["dump", "-q", "--mode", "tensors", "--max-bytes", "1K", "-o", "big", "train.py"])
    assert code == 4
    err = capsys.readouterr().err
    assert "more than max_bytes=1.0 KiB" in err and "--max-bytes" in err
    assert list_steps_ranks(work / "big") == [] if (work / "big").exists() else True


def test_failing_program_keeps_its_exit_code_and_what_was_recorded(work):
    (work / "fail.py").write_text("import torch\nx = torch.ones(3) * 2\nraise SystemExit(7)\n")
    assert main(["dump", "-q", "-o", "out", "fail.py"]) == 7
    assert [n.name for n in load_dump(work / "out").nodes] == ["Torch.ones.0.forward", "Tensor.__mul__.0.forward"]


NPU_TRAIN = textwrap.dedent(
    """
    import torch, torch.nn as nn
    import torch_npu
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 2)).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 4).npu()
    with torch.autocast("npu", dtype=torch.bfloat16):
        y = model(x)
    y.float().pow(2).mean().backward()
    opt.step()
    """
)


@pytest.mark.slow
def test_dump_on_the_emulated_npu(tmp_path):
    (tmp_path / "train_npu.py").write_text(NPU_TRAIN)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "ascendify", "dump", "--emulate", "-q", "-o", "out", "--",
                        "python", "train_npu.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = load_dump(tmp_path / "out")
    by = d.by_name()
    lin = by["Functional.linear.0.forward"]
    assert lin.outputs[0].device == "npu:0" and lin.outputs[0].dtype == "torch.bfloat16"
    assert lin.autocast == "torch.bfloat16" and lin.module_path == "0"
    assert by["Functional.layer_norm.0.forward"].outputs[0].dtype == "torch.float32"  # NPU autocast policy
    assert lin.outputs[0].max is not None and len(lin.outputs[0].fingerprint) == 8
    assert set(by["Module.0.Linear.backward.0"].grads) == {"weight", "bias"}


@pytest.mark.slow
def test_dump_of_cuda_code_redirected_to_the_cpu(tmp_path):
    (tmp_path / "on_cuda.py").write_text(
        "import torch\nx = torch.ones(3, device='cuda') * 2\ny = torch.empty(4, device='cuda')\nprint(x.sum().item())\n"
    )
    r = subprocess.run([sys.executable, "-m", "ascendify", "dump", "--to", "cpu", "-q", "-o", "out", "on_cuda.py"],
                       cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = load_dump(tmp_path / "out")
    mul = d.by_name()["Tensor.__mul__.0.forward"]
    assert mul.outputs[0].device == "cpu" and mul.outputs[0].max == 2.0
    assert not any("empty" in n.name for n in d.nodes)  # uninitialised memory is never recorded


def test_no_global_hook_is_left_behind(work):
    # a global forward hook with kwargs leaves its id in torch's _global_forward_hooks_with_kwargs after
    # handle.remove(); torch.compile then warns about global hooks for the rest of the process
    from torch.nn.modules import module as m

    before = {k: len(v) for k, v in vars(m).items() if k.startswith("_global") and isinstance(v, dict)}
    assert main(["dump", "-q", "-o", "out", "train.py"]) == 0
    assert {k: len(v) for k, v in vars(m).items() if k.startswith("_global") and isinstance(v, dict)} == before
