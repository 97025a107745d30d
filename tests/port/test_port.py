"""``ascendify port`` end to end on small projects of the shapes real projects have (tests/port/projects): a GAN
with two optimizers, an LSTM language model updated by hand with nested inputs, an inference script. Each run is
a few seconds on 2 cores; doctor and bench are skipped where the test is not about them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ascendify.port import stages
from ascendify.port.observation import Observation
from ascendify.port.stages.failures import first_user_frame

from .port_support import make_context

PROJECTS = Path(__file__).parent / "projects"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def port(tmp_path, project, *args, command, name="run"):
    src = tmp_path / f"{name}-src"
    shutil.copytree(PROJECTS / project, src)
    before = _tree(src)
    out, rep = tmp_path / f"{name}-npu", tmp_path / f"{name}-report"
    p = subprocess.run([sys.executable, "-m", "ascendify", "port", str(src), "-o", str(out), "--report", str(rep),
                        "-q", *args, "--", *command], capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "COLUMNS": "80"})
    data = json.loads((rep / "report.json").read_text()) if (rep / "report.json").is_file() else None
    assert _tree(src) == before, "a run wrote into the user's project"
    return p, data, rep, out


def _step(data, sid):
    return next(s for s in data["steps"] if s["id"] == sid)


def test_gan_two_models_found_with_their_parameter_counts(tmp_path):
    p, data, rep, out = port(tmp_path, "gan", "--steps", "3", "--skip", "doctor", "--model", "netG",
                             command=["python", "gan.py", "--cuda"])
    assert data is not None, p.stderr
    train = _step(data, "train")
    rows = {r["class"]: r for r in train["facts"]["models"]["golden"]}
    # Linear(4,16)+Linear(16,2) and Linear(2,16)+Linear(16,1), counted by hand
    assert rows["Generator"]["params"] == 4 * 16 + 16 + 16 * 2 + 2
    assert rows["Discriminator"]["params"] == 2 * 16 + 16 + 16 + 1
    assert {r["model"] for r in rows.values()} == {"netG", "netD"}
    assert train["facts"]["param_counts_agree"] is True
    for side in ("golden", "target"):
        h = json.loads((rep / "runs" / side / "history.json").read_text())
        assert h["step"] == [0, 1, 2] and len(h["loss"]) == len(h["loss_2"]) == 3  # lossD and lossG each step
    compare = _step(data, "compare")
    assert compare["facts"]["curves"]["verdict"] == "match"
    assert compare["facts"]["lockstep"]["verdict"] == "match"
    # --model picks a discovered model by the name the code holds it under (default: the first optimizer's)
    assert compare["facts"]["lockstep"]["model"].startswith("netG (Generator")
    bench = _step(data, "bench")
    assert bench["status"] == "ok" and bench["facts"]["records"]["cpu"][0]["mode"] == "train"
    assert bench["facts"]["records"]["target"][0]["model"] == "Generator"
    assert (rep / "report.html").is_file() and "netG" in (rep / "report.html").read_text()
    # without --overflow: no overflow check, no item for it, no watch in the run
    assert "overflow" not in data and "overflow" not in train["facts"]
    assert "prec.overflow" not in [i["id"] for i in data["checklist"]["items"]]
    assert not (rep / "runs" / "target" / "overflow.json").exists()
    assert (out / "gan.py").is_file() and "torch_npu" in (out / "gan.py").read_text()


def test_a_model_name_that_names_nothing_is_an_error_not_ok(tmp_path):
    # and NAME=VALUE before the command sets the runs' environment, as in a shell
    p, data, rep, _ = port(tmp_path, "gan", "--steps", "2", "--skip", "doctor,bench", "--model", "netX",
                           command=["GAN_UNUSED=1", "python", "gan.py", "--cuda"])
    assert p.returncode == 4 and data["verdict"]["status"] == "error"
    compare = _step(data, "compare")
    assert compare["status"] == "error"
    assert "--model netX: no discovered model has that name or class" in compare["headline"]
    assert "netG (Generator)" in compare["headline"]
    assert data["command"] == ["GAN_UNUSED=1", "python", "gan.py", "--cuda"]


def test_hand_sgd_lm_nested_inputs_lockstep_and_a_crash_of_the_port_only(tmp_path):
    p, data, rep, _ = port(tmp_path, "lm_sgd", "--steps", "4", "--skip", "doctor,bench", "--model",
                           "model.py:RNNModel()", command=["python", "main.py", "--cuda"])
    assert p.returncode in (0, 1), p.stderr  # 1 only for a checklist item
    train = _step(data, "train")
    g = train["facts"]["runs"]["golden"]
    assert g["step_unit"] == "backward" and len(g["history"]["loss"]) == 4
    (row,) = train["facts"]["models"]["golden"]
    assert row["class"] == "RNNModel" and row["optimizer"].startswith("none")
    assert row["inputs"] == "8x4 int64, 1x4x16 float32, 1x4x16 float32"  # x, (h, c)
    ls = _step(data, "compare")["facts"]["lockstep"]
    # built from the spec in both trees, fed the batch the run's RNNModel received
    assert ls["verdict"] == "match" and not ls["weights"]["differ"] and ls["model"].startswith("model.py:RNNModel()")
    # only the migrated copy fails: a finding (exit 1), the user's frame named, the report still written
    p, data, rep, _ = port(tmp_path, "lm_sgd", "--steps", "2", "--skip", "doctor,bench,compare",
                           command=["python", "main.py", "--cuda", "--fail-on-npu"], name="crash")
    assert p.returncode == 1, p.stderr
    train = _step(data, "train")
    assert train["status"] == "fail" and train["facts"]["failed"] == ["target"]
    assert "main.py:" in train["facts"]["runs"]["target"]["failure"]
    assert "not supported here" in train["facts"]["runs"]["target"]["failure"]
    assert data["verdict"]["status"] == "fail"


def test_the_original_failing_is_not_the_ports_fault(tmp_path):
    # a project that needs a package this machine does not have (as a torchvision project does here)
    shutil.copytree(PROJECTS / "infer", tmp_path / "needs")
    (tmp_path / "needs" / "needs.py").write_text("import torch\nimport tiktoken_is_not_installed_here\n")
    PROJECTS_ = tmp_path  # the helper copies from PROJECTS: point it at this one
    src, out, rep = PROJECTS_ / "needs", tmp_path / "needs-npu", tmp_path / "needs-report"
    p = subprocess.run([sys.executable, "-m", "ascendify", "port", str(src), "-o", str(out), "--report", str(rep),
                        "-q", "--skip", "doctor,bench", "--", "python", "needs.py"], capture_output=True, text=True,
                       timeout=600)
    data = json.loads((rep / "report.json").read_text())
    assert p.returncode == 4
    assert "not the port's fault" in data["verdict"]["text"] and out.is_dir()  # the migrated copy is kept
    assert "nothing could be compared" in " ".join(p.stdout.split())
    golden = _step(data, "train")["facts"]["runs"]["golden"]
    assert golden["known_errors"][0]["id"] == "module-not-found"
    assert "tiktoken_is_not_installed_here" in golden["failure"]
    assert "curves: needs both runs, which did not both finish" in _step(data, "compare")["headline"]


def test_torchrun_ddp_project_each_rank_watched_the_model_inside_ddp(tmp_path):
    p, data, rep, _ = port(tmp_path, "ddp", "--steps", "3", "--skip", "doctor,bench",
                           command=["torchrun", "--nproc-per-node", "2", "train.py"])
    assert p.returncode == 0, p.stdout[-3000:]
    t = next(j for j in _step(data, "train")["jobs"] if j["name"] == "train-target")
    assert "emulate --devices 2" in t["command"]  # one emulated NPU per worker
    (row,) = _step(data, "train")["facts"]["models"]["golden"]
    assert row["class"] == "Linear (in DistributedDataParallel)" and row["params"] == 8 * 2 + 2
    for side in ("golden", "target"):  # rank 1 wrote its own findings; rank 0 the models
        assert (rep / "runs" / side / "observe.rank1.json").is_file()
        assert json.loads((rep / "runs" / side / "observe.rank1.json").read_text())["stopped"] == "3 steps done"
    assert _step(data, "compare")["facts"]["lockstep"]["verdict"] == "match"


def test_inference_script_compares_outputs(tmp_path):
    p, data, rep, _ = port(tmp_path, "infer", "--skip", "doctor", command=["python", "infer.py"])
    assert p.returncode == 0, p.stdout + p.stderr
    cv = _step(data, "compare")["facts"]["curves"]
    assert cv["what"] == "output" and cv["verdict"] == "match"
    assert _step(data, "bench")["facts"]["records"]["target"][0]["mode"] == "infer"
    assert max(len(line) for line in p.stdout.splitlines()) <= 80


@pytest.mark.parametrize("args, message", [
    ([], "no command"),
    (["--", "python", "missing.py"], "missing.py, which is not in"),
    (["-o", "{src}/inside", "--", "python", "infer.py"], "cannot be the project or inside it"),
    (["-o", "{foreign}", "--", "python", "infer.py"], "not written by ascendify"),
    (["--skip", "nope", "--", "python", "infer.py"], "unknown stage"),
    (["python", "infer.py"], "put -- before the project's own command"),
    (["-o", "{foreign}/o", "--report", "{foreign}/o/r", "--", "python", "infer.py"], "cannot be the migrated copy"),
    (["--model", "infer.py:model", "--", "python", "infer.py"], "runs the program"),
    (["--", "A=1"], "only sets variables"),
])
def test_bad_input_is_a_usage_error(tmp_path, args, message):
    src = tmp_path / "src"
    shutil.copytree(PROJECTS / "infer", src)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    args = [a.format(src=src, foreign=foreign) for a in args]
    p = subprocess.run([sys.executable, "-m", "ascendify", "port", str(src), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert (foreign / "keep.txt").read_text() == "mine" and sorted(x.name for x in foreign.iterdir()) == ["keep.txt"]
    assert not (tmp_path / "src-npu").exists() and not (tmp_path / "src-npu-report").exists()


def test_weight_differences_are_findings_unless_every_weight_differs():
    from ascendify.precision.weights import compare_weights

    def weight_diffs(a, b):  # what the port's lockstep writes to weights.json
        return compare_weights(a, b).to_dict()

    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    b = __import__("copy").deepcopy(a)
    assert weight_diffs(a, b)["differ"] == []
    with torch.no_grad():
        b[1].weight.copy_(b[1].weight.roll(1, 0))
    d = weight_diffs(a, b)
    assert [x["name"] for x in d["differ"]] == ["1.weight"] and d["differ"][0]["owner"] == "1"
    assert not d["all_differ"]
    c = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))  # another random initialisation
    assert weight_diffs(a, c)["all_differ"]


def test_the_runs_commands_are_shown_as_they_run_from_the_report_folder(tmp_path):
    # the command's own NAME=VALUE words and the project's root on PYTHONPATH (a script below the root imports the
    # project's package), and the shell's && left unquoted on the page
    from ascendify.port import render as page

    ctx = make_context(tmp_path / "p-npu-report", tmp_path / "p", tmp_path / "p-npu", ["python",
                       "projects/adder/adder.py"], env={"PYTHONPATH": "/opt/deps"})
    shown = {j.name: j.shown for j in stages.build_jobs(ctx)}
    assert shown["train-golden"] == ("cd runs/golden/tree/p && PYTHONPATH=.:/opt/deps ascendify run --to cpu -- "
                                     "python projects/adder/adder.py")
    assert shown["train-target"].startswith("cd runs/target/tree/p && PYTHONPATH=.:/opt/deps ascendify emulate ")
    text = page.wrap_command(shown["train-golden"])
    assert " && PYTHONPATH=.:/opt/deps ascendify" in text and "'&&'" not in text


def test_main_model_is_the_first_optimizers():
    obs = Observation.from_dict({"optimizers": [{}, {}], "models": [{"index": 0, "params": 100, "optimizers": [1]},
                                                                    {"index": 1, "params": 5, "optimizers": [0]},
                                                                    {"index": 2, "params": 1000, "optimizers": []}]})
    assert obs.main_model().index == 1
    assert Observation.from_dict({"models": [{"index": 0, "params": 1}, {"index": 1, "params": 9}]}
                                 ).main_model().index == 1
    assert Observation.from_dict({}).main_model() is None


def test_ctrl_c_stops_the_children_and_writes_the_partial_report(tmp_path):
    import signal
    import time

    src, rep = tmp_path / "src", tmp_path / "rep"
    shutil.copytree(PROJECTS / "lm_sgd", src)
    proc = subprocess.Popen([sys.executable, "-m", "ascendify", "port", str(src), "-o", str(tmp_path / "npu"),
                             "--report", str(rep), "-q", "--skip", "doctor", "--steps", "100000", "--",
                             "python", "main.py", "--cuda", "--epochs", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = rep / "runs" / "golden"
    deadline = time.monotonic() + 120
    logs = [rep / "logs" / "train-golden.log", rep / "logs" / "train-target.log"]
    while time.monotonic() < deadline and not all(f.is_file() and "epoch 1 " in f.read_text() for f in logs):
        time.sleep(0.2)  # until both runs are training
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130
    data = json.loads((rep / "report.json").read_text())
    assert data["interrupted"] and data["verdict"]["text"].startswith("interrupted (Ctrl-C)")
    # each run was asked to stop as a Ctrl-C would, and wrote what it had found
    assert _step(data, "train")["headline"].startswith("interrupted (Ctrl-C): original ")
    assert json.loads((log / "observe.json").read_text())["iterations"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(src) not in ps and "--epochs 100000" not in ps  # no child left running


def test_a_failure_is_named_by_its_exception_not_by_the_programs_last_line():
    # a Dynamo/inductor error ends with advice on environment variables: the headline names the exception
    out = ("step 0\nTraceback (most recent call last):\n  File \"/p/train.py\", line 9, in <module>\n    m(x)\n"
           "  File \"/v/site-packages/torch/_dynamo/eval_frame.py\", line 5, in __call__\n    f()\n"
           "  File \"/p/model.py\", line 28, in forward\n    y = ln(x)\n"
           "torch._inductor.exc.InductorError: LoweringException: AssertionError: \n"
           "  target: aten.var_mean.correction\n\n"
           "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n")
    assert first_user_frame(out) == ("model.py:28 in forward: InductorError: LoweringException: "
                                            "AssertionError: target: aten.var_mean.correction")
    plain = "Traceback (most recent call last):\n  File \"/p/a.py\", line 3, in <module>\nValueError: bad value\n"
    assert first_user_frame(plain) == "a.py:3 in <module>: ValueError: bad value"
    assert first_user_frame("killed\n") == "killed"
    # pytorch/examples' word LM without its train.txt: a bare AssertionError says nothing without its line
    bare = ('Traceback (most recent call last):\n  File "/r/tree/wlm/data.py", line 29, in tokenize\n'
            '    assert os.path.exists(path)\nAssertionError\n')
    assert first_user_frame(bare) == "data.py:29 in tokenize: AssertionError at `assert os.path.exists(path)`"


def test_a_compiled_trainer_compiles_on_both_sides_and_lockstep_runs_the_eager_model(tmp_path):
    # torch.compile(model) in a CUDA script: the original compiles with CPU inductor, the migrated copy on the
    # emulated npu; lockstep unwraps OptimizedModule and compares the eager model, and the report says so
    p, data, rep, _ = port(tmp_path, "compiled", "--steps", "2", "--skip", "doctor,bench",
                           command=["python", "train.py", "--steps", "2"])
    assert data is not None, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    train = _step(data, "train")
    for side in ("golden", "target"):
        (row,) = train["facts"]["models"][side]
        assert row["class"] == "TinyAttn (in OptimizedModule)"
    g, t = (train["facts"]["runs"][s]["history"]["loss"] for s in ("golden", "target"))
    assert len(g) == 2 and g == pytest.approx(t, rel=1e-4)
    assert not train["facts"]["runs"]["target"]["random_draws_on_device"]  # inductor's own draws are not the program's
    gm = train["facts"]["runs"]["target"]["emulator"]["graph_mode"]
    assert gm["compiled_graphs"] == 2 and gm["graph_breaks"] == 0 and gm["recompiles"] == 0  # forward, backward
    compare = _step(data, "compare")
    ls = compare["facts"]["lockstep"]
    assert ls["verdict"] == "match" and "eager model" in ls["eager_model"] and "OptimizedModule" in ls["eager_model"]
    assert "on the eager model" in compare["headline"]
    html = (rep / "report.html").read_text()
    assert "lockstep runs the eager model" in html and "torch.compile: graphs compiled" in html


def test_a_time_budget_stops_a_run_before_its_first_step_and_proves_nothing(tmp_path):
    # evaluates for ~40 s before training: --time-budget 4 stops both runs in that loop, wherever they are
    import time

    t0 = time.monotonic()
    p, data, rep, _ = port(tmp_path, "evalfirst", "--time-budget", "4", "--skip", "doctor,bench",
                           command=["python", "train.py"])
    assert time.monotonic() - t0 < 4 + 90, "the budget did not stop the runs"
    assert p.returncode == 5, p.stdout + p.stderr
    assert data["verdict"]["status"] == "not proven"
    assert "neither run made a training step within the time budget (4 s)" in data["verdict"]["text"]
    train = _step(data, "train")
    g = train["facts"]["runs"]["golden"]
    assert g["training"] is True and "output_mean" not in g["history"]  # not taken for an inference program
    assert "before the first step" in g["stopped"]
    assert "no training step within the time budget" in train["headline"]
    assert "curves: no step to compare: neither run made a step" in _step(data, "compare")["headline"]
    items = {i["id"]: i["mark"] for i in data["checklist"]["items"]}
    assert "✓" not in (items["code.runs-on-target"], items["code.auto-migration"], items["prec.curves"])


def test_nan_losses_on_both_sides_are_never_ok(tmp_path):
    # weights never initialised (NaN on purpose): both runs' losses are NaN from the first step, and the lockstep
    # cannot compare a reference that computes NaN: not proven, never OK, never a finding of the port
    p, data, rep, _ = port(tmp_path, "nanloss", "--steps", "3", "--skip", "doctor,bench",
                           command=["python", "train.py"])
    assert p.returncode == 5, p.stdout + p.stderr
    text = data["verdict"]["text"]
    assert data["verdict"]["status"] == "not proven" and "the losses are nan on both sides from step 0" in text
    assert "the original's model has NaN/inf in 1 tensor(s) before its first step (weight)" in text
    items = {i["id"]: i["mark"] for i in data["checklist"]["items"]}
    assert items["code.runs-on-target"] == items["prec.curves"] == items["prec.lockstep"] == "n/a"
    # NaN curves are no MATCH: there is not one step to compare
    compare = _step(data, "compare")
    assert compare["facts"]["curves"]["verdict"] == "nothing to compare" and "MATCH" not in compare["headline"]
    assert "loss curves: nothing to compare (the losses are nan on both sides from step 0)" in compare["headline"]
    assert "NOTHING TO COMPARE: the losses are nan" in (rep / "report.html").read_text()
    # the model was built on the meta device (as FSDP2 does): its initialisers drew nothing on the device
    assert compare["facts"]["curves"]["random_draws_on_device"] == []


def test_a_program_that_reads_the_data_beside_its_folder_runs_as_without_port(tmp_path):
    # pytorch/examples' layout: PROJECT/../data; the runs' scratch copies see the same neighbours
    shutil.copytree(PROJECTS / "dataparent", tmp_path / "examples")
    src = tmp_path / "examples" / "proj"
    before = _tree(tmp_path / "examples")
    p = subprocess.run([sys.executable, "-m", "ascendify", "port", str(src), "--steps", "3", "-q", "--skip",
                        "doctor,bench", "--", "python", "train.py"], capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "COLUMNS": "80"})
    rep = tmp_path / "examples" / "proj-npu-report"
    data = json.loads((rep / "report.json").read_text())
    assert p.returncode == 0, p.stdout + p.stderr
    assert data["verdict"]["text"].startswith("proven:")
    assert {k: v for k, v in _tree(tmp_path / "examples").items() if k.startswith(("proj/", "data/"))} == \
        {k: v for k, v in before.items()}  # the neighbours were read, not written
    # every command the report shows runs from the report folder: the project is reached as ../proj
    shown = [j["command"] for s in data["steps"] for j in s["jobs"]]
    assert "ascendify migrate ../proj -o ../proj-npu --to npu --report migrate/report" in shown
    assert (rep / "runs" / "golden" / "tree" / "data").is_symlink()
    # "Make it fast on the NPU": advise traced the migrated run; its loss.item() each step is a sync at its line,
    # and the observer's own reads of the loss and the output are no sync of the program's
    syncs = [f for f in data["advise"]["findings"] if f["rule"] == "ADV101"]
    assert [f["code"].strip() for f in syncs] == ['print("step", step, "loss", loss.item())']
    assert "Make it fast on the NPU" in (rep / "report.html").read_text()
    perf = next(i for i in data["checklist"]["items"] if i["id"] == "perf.advice")
    assert perf["mark"] == "✓" and perf["evidence"].startswith("advise on the migrated run: ")
