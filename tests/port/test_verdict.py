"""The verdict of ``ascendify port`` is earned (ascendify.port.proof): OK only when both runs made their steps with
finite losses and the lockstep compared the same model; otherwise "not proven" (exit 5) naming what is missing,
and the checklist items without evidence are n/a or ✗, never ✓. Built from step results as the readers make them,
so that each case runs in milliseconds; the end-to-end runs are in test_port.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ascendify.port import checklist as cl
from ascendify.port.options import ALL_STAGES
from ascendify.port.pipeline import Progress
from ascendify.port.result import PortResult
from ascendify.port.stages import bench as bench_stage
from ascendify.port.stages import migrate as migrate_stage
from ascendify.port.stages.base import StageResult
from ascendify.port.stages.failures import known_errors

from .port_support import make_context


def _run(losses=None, *, training=True, calls=0, ranks=1, stopped="3 steps done", returncode=0, **extra):
    losses = losses if losses is not None else []
    h = {"step": list(range(len(losses))), "step_time_ms": [1.0] * len(losses)}
    if training:
        h["loss"] = list(losses)
    else:
        h = {"step": list(range(calls)), "output_mean": [0.5] * calls, "output_abs_mean": [0.5] * calls}
    return {"history": h, "training": training, "step_unit": "optimizer step" if training else None,
            "ranks": ranks, "stopped": stopped, "returncode": returncode, "label": "x", **extra}


def _result(golden, target, lockstep="match", curves="match", **facts) -> PortResult:
    train = StageResult("train", status="ok", headline="h", facts={
        "runs": {"golden": golden, "target": target}, "param_counts_agree": True, **facts})
    cmp_facts = {}
    if lockstep == "skipped":
        cmp_facts["lockstep"] = {"skipped": "skipped (--skip)"}
    elif lockstep:
        cmp_facts["lockstep"] = {"verdict": lockstep}
    if curves:
        cmp_facts["curves"] = {"verdict": curves, "what": "loss"}
    status = "ok" if lockstep in ("match", "skipped", None) and curves in ("match", None) else "fail"
    stages = {"doctor": StageResult("doctor", status="skip"), "migrate": StageResult("migrate", status="skip"),
              "train": train, "compare": StageResult("compare", status=status, facts=cmp_facts),
              "bench": StageResult("bench", status="skip")}
    items = cl.evaluate(stages, "emulated")
    ctx = make_context(Path("."), Path("p"), Path("p-npu"), ["python", "train.py"])
    return PortResult(ctx, stages, checklist=items)


def _item(result, item_id):
    return next(i for i in result.checklist if i["id"] == item_id)


def test_both_runs_trained_and_the_lockstep_matched_is_proven():
    r = _result(_run([2.0, 1.5, 1.0], ranks=2), _run([2.0, 1.5, 1.0], ranks=2))
    status, text = r.verdict
    assert r.exit_code == 0 and status == "ok" and text.startswith("proven:")
    assert "both runs made 3 training steps on 2 ranks each; lockstep MATCH; loss curves MATCH" in text
    assert _item(r, "code.runs-on-target")["mark"] == "✓" and _item(r, "code.auto-migration")["mark"] == "✓"


def test_one_step_is_one_step():
    # pytorch/examples' DDP example makes one optimizer step on each of its 2 ranks
    r = _result(_run([0.897], ranks=2), _run([0.897], ranks=2))
    assert "both runs made 1 training step on 2 ranks each;" in r.verdict[1]
    assert _item(r, "code.runs-on-target")["evidence"].startswith("1 step on the emulated NPU")


def test_curves_not_comparable_are_said_once():
    # random draws on the device (dropout in training mode): the lockstep decides, and the verdict says why once
    r = _result(_run([2.0, 1.5]), _run([2.0, 1.6]), curves="not comparable")
    r.stages["compare"].status = "warn"
    status, text = r.verdict
    assert status == "ok" and r.exit_code == 0
    assert text.endswith("(both runs made 2 training steps; lockstep MATCH; loss curves NOT COMPARABLE (random "
                         "draws on the device)) (doctor, migrate, bench skipped)")


def test_the_original_made_no_step_is_not_proven_never_ok():
    # pytorch/examples' FSDP2 under run --to cpu: the original printed its message and exited before training
    g = _run([], stopped="ended", last_line="Unable to locate sufficient 2 gpus to run this example. Exiting.")
    r = _result(g, _run([2.0, 1.0]), lockstep="skipped", curves=None)
    status, text = r.verdict
    assert r.exit_code == 5 and status == "not proven"
    assert "the original made no training step (the program ended by itself after printing 'Unable to locate" in text
    assert "the lockstep did not run (--skip compare)" in text
    auto = _item(r, "code.auto-migration")
    assert auto["mark"] == "n/a" and "no evidence" in auto["evidence"]


def test_losses_nan_on_both_sides_are_not_proven_and_the_checklist_does_not_tick_them():
    nan = ["NaN", "NaN", "NaN"]  # JSON brings a NaN loss back as a string
    r = _result(_run(nan), _run(nan), curves="match")
    status, text = r.verdict
    assert r.exit_code == 5 and status == "not proven" and "the losses are NaN on both sides from step 0" in text
    runs_item = _item(r, "code.runs-on-target")  # never ✓ on a NaN loss; no finding of the port either
    assert runs_item["mark"] == "n/a" and "the loss is NaN from step 0; the original's too" in runs_item["evidence"]


def test_nan_on_the_migrated_side_only_is_a_finding():
    r = _result(_run([2.0, 1.0, 0.5]), _run([2.0, "NaN", "NaN"]), curves="match")
    status, text = r.verdict
    assert r.exit_code == 1 and status == "fail"
    assert "the migrated copy's loss is NaN from step 1 (the original's is finite)" in text


def test_a_training_program_stopped_before_its_first_step_is_not_an_inference_program():
    # stopped during its first evaluation loop: the model was called 46 times, no optimizer step was made
    stopped = "time budget of 60 s spent before the first step"
    g = _run([], stopped=stopped, seconds_asked=60.0)
    r = _result(g, dict(g), lockstep="skipped", curves=None)
    status, text = r.verdict
    assert r.exit_code == 5
    assert "not proven: neither run made a training step within the time budget (60 s)" in text


def test_an_inference_program_is_proven_by_its_model_calls_and_the_lockstep():
    r = _result(_run(training=False, calls=4), _run(training=False, calls=4), curves="match")
    assert r.exit_code == 0 and "both runs made 4 model calls" in r.verdict[1]
    r = _result(_run(training=False, calls=0), _run(training=False, calls=4), lockstep="skipped", curves=None)
    assert r.exit_code == 5 and "the original called no model" in r.verdict[1]


def test_a_constant_loss_is_said_and_its_curves_prove_nothing():
    train_runs = {"golden": _run([-0.0] * 4), "target": _run([-0.0] * 4)}
    compare = StageResult("compare", status="ok")
    facts = {"curves": {"verdict": "match", "constant": "-0", "what": "loss", "tolerance": 0.05}}
    compare.facts = facts
    v = cl.evaluate_item("prec.curves", {"compare": compare, "train": StageResult(
        "train", status="ok", facts={"runs": train_runs})}, "emulated")
    assert v.mark == "n/a" and "-0 at every step" in v.evidence
    r = _result(train_runs["golden"], train_runs["target"])
    r.stages["compare"].facts["curves"]["constant"] = "-0"
    assert r.exit_code == 0 and "the loss is -0 at every step, so its curves say nothing" in r.verdict[1]


def test_a_skipped_compare_never_yields_ok():
    r = _result(_run([1.0, 0.5]), _run([1.0, 0.5]), lockstep=None, curves=None)
    r.stages["compare"] = StageResult("compare", status="skip", headline="skipped (--skip)")
    assert r.exit_code == 5 and "the lockstep did not run (skipped (--skip))" in r.verdict[1]


def test_progress_numbers_steps_as_the_table_and_says_each_once():
    out = io.StringIO()
    p = Progress(out, len(ALL_STAGES))
    for sid in ("migrate", "doctor", "migrate"):  # migrate finishes first; read again after Ctrl-C
        p.stage(StageResult(sid, status="ok", headline="done"))
    lines = out.getvalue().splitlines()
    assert [line.split("]")[0].split("[")[1] for line in lines] == ["2/7", "1/7"]


def test_progress_lines_fold_to_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    Progress(out, 7).say("emulated NPU (host CPU): no Ascend NPU or GPU here: the emulated NPU (on the host "
                          "CPU) stands in, at host speed")
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80
    out = io.StringIO()  # a long headline is cut at a clause, never inside a number ("loss 0.…")
    Progress(out, 7).stage(StageResult("train", status="ok", headline=(
        "emulated NPU (host CPU): 1 step on 2 ranks, loss 0.897; CPU: 1 step on 2 ranks, loss 0.8971234567")))
    assert " ".join(out.getvalue().split()).endswith("1 step on 2 ranks, loss 0.897 …")


def test_progress_while_the_runs_go_on(tmp_path):
    from ascendify.port.jobs import Job

    out = io.StringIO()
    p = Progress(out, 7, runs=tmp_path)
    (tmp_path / "golden").mkdir()
    (tmp_path / "golden" / "progress.json").write_text('{"steps": 3, "seconds": 4.0}')
    jobs = [Job("train-golden", "train", []), Job("train-target", "train", [])]
    for j in jobs:
        j.started = p.t0 - 70
    p.next_wait = 0  # a minute has passed
    p.waiting(jobs)
    p.waiting(jobs)  # not again before EVERY seconds
    assert out.getvalue().count("\n") == 1
    assert "original 3 steps so far, migrated: no step yet after 70 s" in out.getvalue()
    # a run stopped by its own budget exits 0: its line says why it stopped
    (tmp_path / "golden" / "observe.json").write_text('{"stopped": "time budget of 60 s spent before the first step"}')
    jobs[0].returncode, jobs[0].seconds = 0, 76.6
    p.job(jobs[0])
    assert "train-golden: time budget of 60 s spent before the first step, exit 0 (76.6 s)" in \
        " ".join(out.getvalue().split())


def test_unstable_bench_figures_are_said_and_never_compared(tmp_path):
    import json

    from ascendify.port.jobs import Job

    ctx = make_context(tmp_path, tmp_path / "p", tmp_path / "n", [], "npu")
    for dev, thr, ratio in (("cpu", 100.0, 1.05), ("npu", 270.0, 2.7)):
        (tmp_path / "bench" / dev).mkdir(parents=True)
        rec = {"status": "ok", "throughput": thr, "spread_ratio": ratio, "stable": ratio <= 1.3, "model": "Net",
               "mode": "train"}
        (tmp_path / "bench" / dev / "bench.json").write_text(json.dumps({"records": [rec]}))
    jobs = [Job(n, "bench", ["--device", d], returncode=0) for n, d in (("bench-cpu", "cpu"), ("bench-target", "npu"))]
    res = bench_stage.read(ctx, jobs, {})
    assert "Ascend NPU 270 samples/s (unstable: repeats differ 2.7x, machine busy)" in res.headline
    v = cl.evaluate_item("perf.baseline", {"bench": res}, "npu")
    assert v.mark == "n/a" and "machine was busy" in v.evidence


@pytest.mark.parametrize("line, text, wanted", [
    ("ModuleNotFoundError: No module named 'torchvision'", "",
     "pip install 'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cpu"),
    ("<urlopen error [Errno -3] Temporary failure in name resolution>",
     "Downloading https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz\nFailed",
     "downloads https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz, and this machine"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '../data/train.bin'", "",
     "the program opened '../data/train.bin', which is not there"),
])
def test_known_errors_say_the_package_the_url_and_the_path(line, text, wanted):
    found = known_errors(text + "\n" + line + "\n")
    assert found and wanted in found[0]["fix"], found
    if "torchvision" in line:
        import torch

        assert torch.__version__.startswith("2.13") and "CUDA build" in found[0]["fix"]
    if "urlopen" in line:
        assert "HF_HUB_OFFLINE" not in found[0]["fix"]  # an MNIST download is not the Hugging Face hub


def test_a_run_past_its_budget_is_asked_to_stop_then_killed(monkeypatch):
    # a run stuck where its own timer cannot reach (SIGALRM blocked, a collective in C): port stops it itself,
    # as a Ctrl-C would, then kills it; that is a stop at the budget, not a crash
    import time

    from ascendify.port import jobs as jb

    monkeypatch.setattr(jb, "STOP_GRACE", 1.0)
    stuck = jb.Job("train-golden", "train", ["-c", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                                   "print('ready', flush=True)\ntime.sleep(60)"],
                   python=True, stop_after=0.5)
    polite = jb.Job("train-target", "train", ["-c", "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
                                                    "    print('wrote what it found')\n    raise SystemExit(130)"],
                    python=True, stop_after=0.5)
    t0 = time.monotonic()
    jb.run_jobs([stuck, polite], lanes=2, log_dir=None)
    assert time.monotonic() - t0 < 15
    assert polite.stopped_at is not None and polite.returncode == 130 and "wrote what it found" in polite.output
    assert stuck.stopped_at is not None and stuck.returncode < 0 and not stuck.timed_out


class _TinyVAE(__import__("torch").nn.Module):
    """pytorch/examples' VAE in small: the reparameterisation draws in eval mode too."""

    def __init__(self, act="ReLU"):
        import torch.nn as nn

        super().__init__()
        self.enc, self.dec = nn.Linear(8, 4), nn.Sequential(nn.Linear(2, 8), getattr(nn, act)())

    def forward(self, x):
        import torch

        mu, logvar = self.enc(x).chunk(2, dim=1)
        return self.dec(mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)), mu, logvar


@pytest.mark.parametrize("target_act, verdict", [("ReLU", "not comparable"), ("Tanh", "divergence")])
def test_a_model_that_draws_in_its_forward_is_not_comparable_but_a_real_divergence_stays(tmp_path, target_act,
                                                                                         verdict):
    import json

    import cloudpickle
    import torch

    from ascendify.port import lockstep_job as lockstep

    torch.manual_seed(0)
    golden = _TinyVAE()
    target = _TinyVAE(target_act)
    target.load_state_dict(golden.state_dict())
    for name, obj in (("g.pkl", golden), ("t.pkl", target)):
        (tmp_path / name).write_bytes(cloudpickle.dumps(obj))
    torch.save(((torch.randn(4, 8),), {}), tmp_path / "b.pt")
    rc = lockstep.main(["--golden", str(tmp_path / "g.pkl"), "--target", str(tmp_path / "t.pkl"), "--batch",
                        str(tmp_path / "b.pt"), "--target-device", "cpu", "-o", str(tmp_path / "out")])
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert data["verdict"] == verdict and rc == (0 if verdict == "not comparable" else 1)
    draws = data["meta"]["random_draws"]
    assert draws[0]["module"] == "(root)" and draws[0]["api"] == "torch.randn_like"
    assert draws[0]["first_at"].startswith("test_verdict.py:")
    if verdict == "divergence":  # the decoder differs without drawing: still the first divergence
        assert data["first_divergence"]["name"].startswith("dec")
        return
    ls = {"verdict": data["verdict"], "random_draws": draws}
    r = _result(_run([2.0, 1.5]), _run([2.0, 1.5]), lockstep=None)
    r.stages["compare"].facts["lockstep"] = ls
    r.checklist = cl.evaluate(r.stages, "emulated")
    status, text = r.verdict
    assert r.exit_code == 5 and status == "not proven"
    assert "the lockstep cannot compare the model: the model draws random numbers in its forward, in eval mode too " \
           "(torch.randn_like at test_verdict.py:" in text
    assert _item(r, "prec.lockstep")["mark"] == "n/a"


def test_the_migrate_headline_counts_the_sites_left_to_the_person(tmp_path):
    # pytorch/examples' imagenet: 14 of 18 sites converted, DataParallel listed (a fix only --unsafe applies):
    # the headline said "0 unsupported" and nothing of the 4 sites left
    import json

    from ascendify.port.jobs import Job

    (tmp_path / "r" / "migrate" / "report").mkdir(parents=True)
    (tmp_path / "r" / "migrate" / "report" / "report.json").write_text(json.dumps({"totals": {
        "cuda_sites": 18, "converted": 14, "report_only": 4, "unsupported": 0, "changed": 1, "native_ops": 0}}))
    ctx = make_context(tmp_path / "r", tmp_path / "p", tmp_path / "p-npu", [])
    job = Job("migrate", "migrate", [])
    job.returncode = 0
    res = migrate_stage.read(ctx, [job], {})
    assert res.headline == ("14 of 18 CUDA sites converted in 1 file; 4 left to you (unsupported.csv), "
                            "0 unsupported, 0 custom ops to port")


@pytest.mark.parametrize("g2, t2", [([0.69, 0.63], [0.69, 0.64]), (["nan", "nan"], ["nan", "nan"])])
def test_the_page_plots_every_loss_series_and_draws_nan_losses(monkeypatch, g2, t2):
    # a GAN's two losses: both plotted A vs B (only "loss" was); NaN losses (FSDP2's) broke the section:
    # "this section could not be drawn: TypeError: unsupported operand type(s) for -: 'str' and 'str'"
    from ascendify import report
    from ascendify.port import page as render

    drawn = []
    monkeypatch.setattr(report.plots, "line_plot", lambda series, **kw: drawn.append((kw["title"], series)) or b"")
    r = _result(_run([0.70, 0.69]), _run([0.70, 0.69]))
    r.stages["compare"].facts["curves"] = {"verdict": "match", "what": "loss", "tolerance": 0.05, "series": {
        "loss": {"x": [0, 1], "a": [0.70, 0.69], "b": [0.70, 0.691], "max_rel_diff": 0.0014},
        "loss_2": {"x": [0, 1], "a": g2, "b": t2, "max_rel_diff": 0.016}}}
    page = render.html_report(r).to_html()
    assert "could not be drawn" not in page
    (_, lines), *_ = [d for d in drawn if d[0] == "loss, loss_2: A vs B"]
    assert set(lines) >= {"A: original, CPU loss", "B: migrated, target loss"}
    if g2[0] == "nan":  # nothing finite to draw for loss_2
        assert "A: original, CPU loss_2" not in lines
    else:
        assert lines["A: original, CPU loss_2"] == ([0, 1], [0.69, 0.63])
        assert "MATCH: loss, loss_2 within 0.05" in page


def test_the_page_shows_the_accelerator_calls_the_reference_run_answered():
    # pytorch/examples at head asks torch.accelerator: the page says what the reference's answers came from
    from ascendify.port import page as render

    golden = _run([2.0, 1.5], redirected=2, redirected_apis=[
        {"api": "torch.accelerator.is_available", "count": 1, "first_site": "main.py:59",
         "to": "cpu available (user code)"},
        {"api": "torch.accelerator.current_accelerator", "count": 1, "first_site": "main.py:60",
         "to": "cpu (stands for cuda)"}])
    page = render.html_report(_result(golden, _run([2.0, 1.5]))).to_html()
    assert "torch.accelerator.current_accelerator" in page and "cpu (stands for cuda)" in page
    assert "main.py:60" in page and "the branches it took are a GPU" in page
