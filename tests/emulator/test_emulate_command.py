"""`ascendify emulate`: runs torch_npu code under emulation and prints / saves a summary; the env variable."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gloo_teardown import run_again_on_teardown_abort

from ascendify.program import Program

SCRIPT = Path(__file__).parent / "scripts" / "train_torch_npu.py"


def _run(args, tmp_path, env=None):
    full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    full_env.pop("LOCAL_RANK", None)
    return subprocess.run([sys.executable, "-m", "ascendify", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=full_env, timeout=300)


def test_realistic_torch_npu_script_runs_under_emulate(tmp_path):
    ckpt, summary = tmp_path / "ckpt.pt", tmp_path / "summary.json"
    r = _run(["emulate", "--json", str(summary), "--", "python", str(SCRIPT), "--ckpt", str(ckpt)], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["device"] == "npu:0" and out["ckpt_device"] == "npu:0" and out["is_available"]
    assert out["reloaded_same"] and out["peak_bytes"] > 0 and out["elapsed_ms"] > 0
    assert len(out["losses"]) == 4 and all(loss == loss for loss in out["losses"])
    assert "ascendify emulate: summary" in r.stderr and "peak device memory" in r.stderr
    rep = json.loads(summary.read_text())
    assert rep["exit_code"] == 0 and rep["ops_run"] > 100
    assert rep["ops"]["convolution_overrideable"] == 4
    assert rep["peak_memory_bytes"] > 0


def test_exit_code_and_traceback_of_a_failing_script(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nx = torch.ones(2, device='npu')\nx + torch.ones(2)\n")
    r = _run(["emulate", "-q", str(bad)], tmp_path)
    assert r.returncode == 1
    assert "bad.py" in r.stderr and "npu:0 and cpu" in r.stderr


def test_a_crash_of_the_script_shows_its_frames_and_folds_the_emulator(tmp_path):
    (tmp_path / "crash.py").write_text("import torch\n\n\ndef f(x):\n    return x.view(3, 7)\n\n\n"
                                       "f(torch.zeros(4, device='npu'))\n")
    r = _run(["emulate", "-q", "--", "python", "crash.py"], tmp_path)
    lines = r.stderr.splitlines()
    assert r.returncode == 1
    assert lines[:2] == ["Traceback (most recent call last):", '  File "crash.py", line 8, in <module>']
    assert '  File "crash.py", line 5, in f' in lines
    [folded] = [x for x in lines if x.startswith("  [")]  # the emulator's kernels and the torch calls they make
    assert folded.startswith("  [ascendify.emulator: ") and folded.endswith(" frames folded]")
    assert lines.index(folded) > lines.index('  File "crash.py", line 5, in f')
    assert "/ascendify/" not in r.stderr and "runpy" not in r.stderr and "torch/_ops.py" not in r.stderr
    assert lines[-1] == "RuntimeError: shape '[3, 7]' is invalid for input of size 4"


def test_a_script_still_on_nccl_is_told_what_to_do(tmp_path):
    script = tmp_path / "t.py"
    script.write_text('import torch.distributed as dist\n'
                      'dist.init_process_group("nccl", rank=0, world_size=1, init_method="tcp://127.0.0.1:29533")\n')
    r = _run(["emulate", "-q", str(script)], tmp_path)
    assert r.returncode == 1
    assert "NCCL" in r.stderr  # the program's own error, then the advice
    assert "the program still uses CUDA (the nccl backend: on Ascend it is hccl)" in r.stderr
    assert "ascendify run --to npu" in r.stderr


def test_module_mode_with_fidelity_error(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(
        "import sys, torch\nprint(sys.argv[1:], flush=True)\ntorch.lgamma(torch.ones(2, device='npu'))\n")
    r = _run(["emulate", "-q", "--fidelity", "error", "--", "python", "-m", "mypkg.main", "a"], tmp_path)
    assert r.returncode == 1 and "['a']" in r.stdout
    assert "NpuFidelityError" in r.stderr and "aten::lgamma" in r.stderr


def test_env_variable_enables_on_import():
    code = ("import ascendify.emulator as e, torch; print(e.is_enabled(), torch.ones(1, device='npu').device, "
            "torch.npu.device_count())")
    env = dict(os.environ, ASCENDIFY_EMULATE="npu", ASCENDIFY_EMULATE_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "npu:0", "2"]


def test_bad_usage(tmp_path):
    assert _run(["emulate"], tmp_path).returncode == 2
    assert _run(["emulate", "missing.py"], tmp_path).returncode == 2


@pytest.mark.parametrize("tokens, expected", [
    (["--", "python", "t.py", "-x"], ("script", "t.py", ["-x"])),
    (["t.py"], ("script", "t.py", [])),
    (["python3", "-u", "-m", "pkg.mod", "1"], ("module", "pkg.mod", ["1"])),
    (["torchrun", "--nproc-per-node", "2", "t.py"], ("torchrun", None, ["--nproc-per-node", "2", "t.py"])),
    (["python", "-m", "torch.distributed.run", "t.py"], ("torchrun", None, ["t.py"])),
])
def test_parse_program(tokens, expected):
    p = Program.parse(tokens, check=False)
    assert (p.kind, p.path or p.module if p.kind != "torchrun" else None,
            p.torchrun_args if p.kind == "torchrun" else p.args) == expected


@pytest.mark.parametrize("argv, env, says", [
    (["--memory", "1Q"], {}, "not a memory size: '1Q'"),
    (["--devices", "0"], {}, "device_count=0"),
    (["--cann", "latest"], {}, "cann_version='latest'"),
    ([], {"ASCENDIFY_EMULATE_MEMORY": "zz"}, "not a memory size: 'zz'"),
])
def test_bad_settings_are_usage_errors_not_tracebacks(tmp_path, monkeypatch, capsys, argv, env, says):
    from ascendify import cli

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    script = tmp_path / "prog.py"
    script.write_text("print('ran')\n")
    before = {k: v for k, v in os.environ.items() if k.startswith("ASCENDIFY_EMULATE")}
    assert cli.main(["emulate", *argv, str(script)]) == 2
    out = capsys.readouterr()
    assert says in out.err and "Traceback" not in out.err and "ran" not in out.out
    assert {k: v for k, v in os.environ.items() if k.startswith("ASCENDIFY_EMULATE")} == before


@pytest.mark.parametrize("value, says", [("abc", "not a number of seconds: 'abc'"),
                                         ("-5", "must be 0 (no limit) or more seconds")])
def test_a_bad_collective_timeout_is_a_usage_error(tmp_path, capsys, value, says):
    from ascendify import cli

    script = tmp_path / "prog.py"
    script.write_text("print('ran')\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["emulate", "--collective-timeout", value, str(script)])
    out = capsys.readouterr()
    assert exc.value.code == 2 and says in out.err and "ran" not in out.out


ACCELERATE_SCRIPT = Path(__file__).parent / "scripts" / "accelerate_metrics.py"


def test_accelerate_launch_on_two_emulated_npus_equals_two_cpu_ranks_and_reports_every_worker(tmp_path):
    """`accelerate launch` by its name (its bin/ need not be on PATH), 2 processes on the emulated NPU (hccl):
    DDP with find_unused_parameters, gather_for_metrics and pad_across_processes (flat-buffer all-gathers) give
    the 2-rank CPU (gloo) run's numbers; the summary gathers both workers' reports."""
    pytest.importorskip("accelerate")
    from ascendify.emulator.ops import cfast

    if os.environ.get(cfast.ENV, "1") == "0" or cfast.module(build_if_missing=False) is None:
        pytest.skip("DDP's find_unused_parameters needs pinned host memory: the emulator's C++ kernels")
    npu, cpu, summary = tmp_path / "npu.json", tmp_path / "cpu.json", tmp_path / "summary.json"
    env = {"PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                   if not os.path.isfile(os.path.join(p, "accelerate")))}
    r = _run(["emulate", "--json", str(summary), "--", "accelerate", "launch", "--num_processes", "2",
              "--main_process_port", str(_free_port()), str(ACCELERATE_SCRIPT), str(npu)], tmp_path, env)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = run_again_on_teardown_abort(lambda: subprocess.run(  # plain torch + accelerate on gloo: see gloo_teardown
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
         str(ACCELERATE_SCRIPT), str(cpu), "--cpu"], capture_output=True, text=True, cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300))  # fmt: skip
    assert ref.returncode == 0, ref.stderr[-3000:]
    got, want = json.loads(npu.read_text()), json.loads(cpu.read_text())
    assert (got["device"], got["backend"], got["world"]) == ("npu", "hccl", 2)
    assert (want["device"], want["backend"]) == ("cpu", "gloo")
    assert len(got["preds"]) == 7 and got["padded"] == [2, 2]  # 7 eval samples over 2 ranks: the padding dropped
    for key in ("losses", "preds", "labels", "padded"):
        assert got[key] == want[key], key
    rep = json.loads(summary.read_text())
    assert rep["workers"] == 2 and [w["rank"] for w in rep["ranks"]] == [0, 1]
    assert all(w["exit_code"] == 0 and w["ops_run"] > 100 for w in rep["ranks"])
    assert rep["ops_run"] == sum(w["ops_run"] for w in rep["ranks"])
    assert "summary of 2 worker(s)" in r.stderr and "per worker" in r.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
