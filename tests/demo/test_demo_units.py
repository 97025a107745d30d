"""The demo's parts without running the verbs: the job runner (dependencies, time limits, CPU time), the
checklist (data and evaluators), the output folder rules, --skip, --json, a crashed step (report still written,
exit 3), and a front-end that imports nothing heavy. Each test takes a second or two."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ascendify.demo as demo_pkg
from ascendify.core import knowledge
from ascendify.port import checklist as cl
from ascendify.port import jobs as jb
from ascendify.port import options, stages
from ascendify.port import page as port_page
from ascendify.port.observation import Observation
from ascendify.port.options import ALL_STAGES, STAGE_IDS, Context, PortOptions
from ascendify.port.result import PortResult
from ascendify.port.stages.base import StageResult
from ascendify.port.stages.migrate import _env_reads, _literal_count
from ascendify.port.stages.train import port_command

ALL = ",".join(STAGE_IDS)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDIFY_")}
    env["COLUMNS"] = "80"
    return subprocess.run([sys.executable, "-m", "ascendify", "demo", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


# --- jobs ----------------------------------------------------------------------------------------------------------


def _py(name: str, code: str, **kw) -> jb.Job:
    return jb.Job(name, "doctor", ["-c", code], python=True, **kw)


def test_jobs_run_in_dependency_order_and_record_cpu_time(tmp_path):
    a = _py("a", "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('A')")
    b = _py("b", "print('B')", deps=("a",))
    done = []
    jb.run_jobs([b, a], lanes=2, log_dir=tmp_path, on_done=lambda j: done.append(j.name))
    assert done == ["a", "b"]  # b waited for a although listed first
    assert a.returncode == 0 and a.output.strip() == "A" and a.cpu_seconds >= 0.25
    assert Path(a.log).read_text().startswith("$ ")


def test_a_failed_dependency_skips_its_dependents_and_exit_1_is_a_finding(tmp_path):
    crash = _py("crash", "raise SystemExit(5)")
    after = _py("after", "print('never')", deps=("crash",))
    finding = _py("finding", "raise SystemExit(1)")
    later = _py("later", "print('ran')", deps=("finding",))
    jb.run_jobs([crash, after, finding, later], lanes=1, log_dir=None)
    assert crash.returncode == 5 and after.returncode is None and "crash, which failed (exit 5)" in after.skipped
    assert later.returncode == 0 and later.output.strip() == "ran"


def test_a_job_past_its_time_limit_is_stopped():
    slow = _py("slow", "import time; time.sleep(60)", timeout=1.0)
    jb.run_jobs([slow], lanes=1, log_dir=None)
    assert slow.timed_out and slow.seconds < 30 and not slow.ok


def test_child_env_splits_threads_and_drops_emulation(monkeypatch):
    monkeypatch.setenv("ASCENDIFY_EMULATE", "npu")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = jb.child_env(2, extra={"X": "1"})
    assert "ASCENDIFY_EMULATE" not in env and env["X"] == "1"
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))


def test_history_of_an_observed_run():
    # a GAN-shaped run: two backwards a step (discriminator, generator); a step with one missing stays aligned
    obs = {"iterations": [{"step": 0, "seconds": 0.2, "losses": [1.0, 2.0]}, {"step": 1, "seconds": 0.1,
                                                                             "losses": [0.9]}]}
    h = Observation.from_dict(obs).history()
    assert h["step"] == [0, 1] and h["loss"] == [1.0, 0.9] and h["step_time_ms"] == [200.0, 100.0]
    assert h["loss_2"][0] == 2.0 and math.isnan(h["loss_2"][1])
    assert Observation.from_dict(obs).step_time() == 0.1  # the first step (warm-up) left out
    # an inference program: no step, the main model's output per call is the curve
    inf = {"iterations": [], "models": [{"index": 0, "params": 4, "optimizers": [],
                                         "outputs": [{"output_mean": 0.5, "output_abs_mean": 0.7}]}]}
    assert Observation.from_dict(inf).history() == {"step": [0], "output_mean": [0.5], "output_abs_mean": [0.7]}
    assert Observation.from_dict({}).history() == {"step": [], "step_time_ms": []}


def test_port_command_means_the_npu_where_the_command_said_cuda():
    assert port_command(["python", "train.py", "--device=cuda", "--out", "cuda"]) == [
        "python", "train.py", "--device=npu", "--out", "cuda"]
    assert port_command(["train.py", "--device", "cuda:1", "--gpu", "0"]) == ["train.py", "--device", "npu:1",
                                                                                "--gpu", "0"]
    assert port_command(["train.py", "--cuda", "--device=cpu"]) == ["train.py", "--cuda", "--device=cpu"]


# --- checklist -----------------------------------------------------------------------------------------------------


def test_every_checklist_item_has_an_evaluator_with_a_doc_and_back():
    data = knowledge.load("migration_checklist")
    assert data["provenance"]["source"]
    ids = [i["id"] for i in data["items"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(cl.EVALUATORS)
    sections = {s["id"] for s in data["sections"]}
    assert sections == {"environment", "code", "performance", "precision", "deployment"}
    for item in data["items"]:
        assert item["section"] in sections and item["question"].endswith("?") and item["how"], item["id"]
        assert item["step"] in STAGE_IDS, item["id"]
        assert (cl.EVALUATORS[item["id"]].__doc__ or "").strip(), item["id"]


def _steps(**facts) -> dict[str, StageResult]:
    return {k: StageResult(k, status="ok", facts=v) for k, v in facts.items()}


def test_precision_items_fail_on_a_divergence():
    steps = _steps(compare={
        "lockstep": {"verdict": "divergence", "matched": 3, "first_divergence": {"name": "blocks.1.attn"},
                     "end_to_end": {"cosine": 0.7, "rel_l2": 0.4}},
        "curves": {"verdict": "divergence", "tolerance": 0.05, "first": {"step": 3},
                   "series": {"loss": {"steps": 5, "max_rel_diff": 0.2}}}})
    lock = cl.evaluate_item("prec.lockstep", steps, "emulated")
    assert lock.mark == "✗" and "blocks.1.attn" in lock.evidence and lock.anchor == "compare"
    curves = cl.evaluate_item("prec.curves", steps, "emulated")
    assert curves.mark == "✗" and "step 3" in curves.evidence


def test_emulator_record_items():
    clean = {"ops_run": 10, "distinct_ops": 3, "cpu_fallback_on_npu": 0, "rejected": 0, "unsupported_apis": 0,
             "float64_events": 0, "fp16_overflow_events": 0}
    ok = _steps(train={"runs": {"target": {"emulator": clean}}})
    assert cl.evaluate_item("code.no-cpu-fallback", ok, "emulated").mark == "✓"
    assert cl.evaluate_item("prec.dtype-events", ok, "emulated").mark == "✓"
    bad = _steps(train={"runs": {"target": {"emulator": {**clean, "cpu_fallback_on_npu": 2, "float64_events": 1}}}})
    v = cl.evaluate_item("code.no-cpu-fallback", bad, "emulated")
    assert v.mark == "✗" and "cpu_fallback_on_npu: 2" in v.evidence
    assert cl.evaluate_item("prec.dtype-events", bad, "emulated").mark == "✗"
    real = _steps(train={"runs": {"target": {"returncode": 0}}})
    assert cl.evaluate_item("code.no-cpu-fallback", real, "npu").mark == "n/a"
    assert cl.evaluate_item("deploy.real-npu", real, "npu").mark == "✓"


def test_steps_that_did_not_run_or_crashed_make_items_not_applicable_with_the_reason():
    skipped = {"bench": StageResult("bench", status="skip", headline="skipped (--skip)")}
    v = cl.evaluate_item("perf.measured", skipped, "emulated")
    assert v.mark == "n/a" and "did not run (skipped (--skip))" in v.evidence
    crashed = {"migrate": StageResult("migrate", status="error", headline="boom")}
    v = cl.evaluate_item("code.sites-accounted", crashed, "emulated")
    assert v.mark == "n/a" and "failed" in v.evidence


def test_migration_items_read_the_totals():
    t = {"cuda_sites": 10, "converted": 8, "report_only": 1, "unsupported": 1, "accounted_share": 1.0, "skipped": 0,
         "unclaimed": 0, "native_ops": 0, "advice": 2}
    steps = _steps(migrate={"totals": t, "nccl_literals": ["train.py:3"], "cuda_visible_reads": []})
    assert cl.evaluate_item("code.sites-accounted", steps, "emulated").mark == "✓"
    assert cl.evaluate_item("code.custom-ops", steps, "emulated").mark == "n/a"
    v = cl.evaluate_item("deploy.backend", steps, "emulated")
    assert v.mark == "✗" and "train.py:3" in v.evidence
    assert cl.evaluate_item("deploy.visible-devices", steps, "emulated").mark == "✓"
    steps["migrate"].facts["totals"] = {**t, "accounted_share": 0.9}
    assert cl.evaluate_item("code.sites-accounted", steps, "emulated").mark == "✗"


def test_sites_accounted_names_the_unclaimed_sites_and_where_they_are():
    """The parts named add up to the CUDA sites: the unclaimed ones (ASC099) are what kept the share under 1."""
    from ascendify.migrate.report import NEEDS_A_PERSON

    t = {"cuda_sites": 49, "converted": 44, "report_only": 2, "unsupported": 0, "unclaimed": 3,
         "accounted_share": 0.9388, "skipped": 0}
    v = cl.evaluate_item("code.sites-accounted", _steps(migrate={"totals": t}), "emulated")
    assert v.mark == "✗"
    assert "44 converted, 2 reported, 0 unsupported, 3 unclaimed (rule ASC099" in v.evidence
    assert f'migrate/report/report.md, table "{NEEDS_A_PERSON}"' in v.evidence and "unsupported.csv" in v.evidence
    clean = {**t, "cuda_sites": 46, "unclaimed": 0, "accounted_share": 1.0}
    v = cl.evaluate_item("code.sites-accounted", _steps(migrate={"totals": clean}), "emulated")
    assert v.mark == "✓" and "0 unclaimed;" in v.evidence and "ASC099" not in v.evidence


def test_environment_scans_of_the_migrated_tree(tmp_path):
    (tmp_path / "a.py").write_text('import os\nv = os.environ.get("CUDA_VISIBLE_DEVICES")\n'
                                   'print("CUDA_VISIBLE_DEVICES is ignored")\nb = "nccl"  # backend\n'
                                   '# "nccl" in a comment\n')
    assert _env_reads(tmp_path, "CUDA_VISIBLE_DEVICES") == ["a.py:2"]
    assert _literal_count(tmp_path, "nccl") == ["a.py:4"]


# --- the command ---------------------------------------------------------------------------------------------------


def test_everything_skipped_still_writes_the_report_and_json(tmp_path):
    p = _cli("--quick", "--skip", ALL, "--json", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert p.returncode == 5, p.stderr  # nothing ran, so nothing is proven: never a bare OK
    data = json.loads(p.stdout)
    assert data["verdict"]["status"] == "not proven" and "the runs did not run" in data["verdict"]["text"]
    assert {s["id"]: s["status"] for s in data["steps"]} == {**{s: "skip" for s in STAGE_IDS},
                                                             "checklist": "ok", "report": "ok"}
    assert data["checklist"]["n/a"] == len(data["checklist"]["items"]) and data["checklist"]["fail"] == 0
    assert (tmp_path / "o" / "report.html").is_file() and (tmp_path / "o" / "demo.json").is_file()
    assert json.loads((tmp_path / "o" / "demo.json").read_text())["verdict"] == data["verdict"]


def test_out_folder_rules(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep me")
    p = _cli("--skip", ALL, "--out", str(foreign), cwd=tmp_path)
    assert p.returncode == 2 and str(foreign) in p.stderr and "--force" in p.stderr
    assert sorted(x.name for x in foreign.iterdir()) == ["mine.txt"]  # nothing written
    p = _cli("--skip", ALL, "--out", str(foreign), "--force", cwd=tmp_path)
    assert p.returncode == 5, p.stderr  # written; nothing proven
    assert (foreign / "mine.txt").read_text() == "keep me" and (foreign / "report.html").is_file()
    # an earlier demo's folder is reused without --force, its old outputs cleared
    (foreign / "logs").mkdir()
    (foreign / "logs" / "stale.log").write_text("old")
    p = _cli("--skip", ALL, "--out", str(foreign), cwd=tmp_path)
    assert p.returncode == 5 and not (foreign / "logs" / "stale.log").exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert _cli("--skip", ALL, "--out", str(a_file), cwd=tmp_path).returncode == 2


def test_usage_errors(tmp_path):
    p = _cli("--skip", "bogus", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert p.returncode == 2 and "bogus" in p.stderr and "doctor" in p.stderr
    p = _cli("--jobs", "0", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert p.returncode == 2
    assert not (tmp_path / "o").exists()


def test_a_crashed_step_is_shown_in_the_report_and_exits_3(tmp_path, monkeypatch):
    real = stages.build_jobs

    def crashing(ctx):
        jobs = real(ctx)
        for j in jobs:
            if j.name == "doctor":
                j.argv, j.python = ["-c", "import sys; print('doctor exploded here'); sys.exit(7)"], True
            else:
                j.skipped = "skipped (test)"
        return jobs

    monkeypatch.setattr(stages, "build_jobs", crashing)
    result = demo_pkg.run_demo(demo_pkg.DemoOptions(out=tmp_path / "o", quick=True, device="cpu", lanes=1))
    assert result.exit_code == options.EXIT_STEP_FAILED
    doctor = result.stages["doctor"]
    assert doctor.status == "error" and "status 7" in doctor.error and "doctor exploded here" in doctor.error
    assert result.verdict[0] == "error" and "doctor" in result.verdict[1]
    text = port_page.summary_text(result, width=80)
    assert "doctor failed: doctor exited with status 7" in text and "logs/doctor.log" in text
    page = (tmp_path / "o" / "report.html").read_text()
    assert "doctor exploded here" in page and 'data-status="error"' in page
    data = json.loads((tmp_path / "o" / "demo.json").read_text())
    assert data["verdict"]["exit_code"] == 3
    # the checklist's doctor items say why they were not evaluated
    env_items = [i for i in data["checklist"]["items"] if i["step"] == "doctor"]
    assert all(i["mark"] == "n/a" and "doctor step failed" in i["evidence"] for i in env_items)


def test_front_end_and_package_import_nothing_heavy():
    code = ("import sys, ascendify.commands.demo, ascendify.demo, ascendify.port.checklist, ascendify.port.page\n"
            "heavy = [m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules]\n"
            "assert not heavy, heavy")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("device", ["cpu", "auto", "npu"])
def test_target_without_accelerators_is_the_emulated_npu(device):
    from ascendify.core import devices

    if devices.torch_npu_installed():
        pytest.skip("a real torch_npu is installed here")
    if device == "auto" and __import__("shutil").which("nvidia-smi"):
        pytest.skip("a GPU may be present")
    target, why = options.resolve_target(device)
    assert target == "emulated" and why


def test_terminal_summary_fits_80_columns_whatever_the_lengths(tmp_path):
    results = {k: StageResult(k, status="ok", headline="word " * 30, seconds=1234.5) for k in ALL_STAGES}
    results["compare"].status = "fail"
    item = {"id": "prec.curves", "mark": "✗", "evidence": "divergence within 0.05; leaves the band at step 3"}
    opts = PortOptions(project=tmp_path / "p", command=[], lanes=2, name="demo", shown_as="default sizes")
    ctx = Context(opts, out=tmp_path / ("long-folder-name" * 8), project=tmp_path / "p", migrated=tmp_path / "n",
                  command=[], target="emulated", target_reason="")
    result = PortResult(ctx, results, checklist=[item], seconds=12345.6, cpu_seconds=9999.0)
    text = port_page.summary_text(result, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.splitlines()[0].startswith("ascendify demo: emulated NPU (host CPU), default sizes, 12346 s wall")
    assert "FAIL: findings on the emulated NPU (host CPU)" in text and result.exit_code == options.EXIT_FINDING
    assert "✗ prec.curves: divergence within 0.05; leaves the band at step 3" in text


def test_a_verb_missing_from_the_build_skips_its_step_visibly(tmp_path, monkeypatch):
    from ascendify.port.stages import base

    monkeypatch.setattr(base, "verb_available", lambda verb: verb not in ("bench", "doctor", "migrate", "run",
                                                                        "emulate"))
    result = demo_pkg.run_demo(demo_pkg.DemoOptions(out=tmp_path / "o", quick=True, device="cpu", lanes=1))
    assert result.exit_code == 5 and result.verdict[0] == "not proven"  # no run: nothing proven
    doctor = result.stages["doctor"]
    assert doctor.status == "skip" and doctor.headline == "skipped: ascendify doctor is not available in this build"
    # steps that wait on a skipped one say which
    assert "needs train-golden, which did not run" in result.stages["compare"].to_dict()["jobs"][0]["skipped"]
    assert "needs train-golden, which did not run" in result.stages["bench"].to_dict()["jobs"][0]["skipped"]
    assert "ascendify doctor is not available" in (tmp_path / "o" / "report.html").read_text()


def test_an_interrupted_run_stops_its_children():
    slow = _py("slow", "import time; time.sleep(120)")
    quick = _py("quick", "print('done')")

    def interrupt(job):
        if job.name == "quick":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        jb.run_jobs([slow, quick], lanes=2, log_dir=None, on_done=interrupt)
    assert slow.returncode is not None and slow.returncode < 0 and slow.seconds < 60  # killed, and reaped


def test_jobs_waiting_on_each_other_are_skipped_not_spun_on():
    a, b = _py("a", "pass", deps=("b",)), _py("b", "pass", deps=("a",))
    jb.run_jobs([a, b], lanes=2, log_dir=None)
    assert a.skipped == b.skipped == "its dependencies form a cycle"


def _ctx(tmp_path, target):
    project = demo_pkg.find_project()
    command = demo_pkg.command(demo_pkg.QUICK) + ["--device=cuda"]
    return Context(PortOptions(project=project, command=command, lanes=2, steps=3), out=tmp_path, project=project,
                   migrated=tmp_path / "migrate" / "npu_project", command=command, target=target, target_reason="")


def test_jobs_for_each_target(tmp_path):
    emu = {j.name: j for j in stages.build_jobs(_ctx(tmp_path, "emulated"))}
    t, g = emu["train-target"], emu["train-golden"]
    assert t.argv[:3] == ["emulate", "--devices", "1"] and t.deps == ("copy-target",)
    # each run works in a scratch copy: the project and the migrated copy are never written by a run
    assert emu["copy-target"].deps == ("migrate",) and emu["copy-target"].argv[3].endswith("runs/target/tree/"
                                                                                               "cuda_project")
    # the project's neighbours are linked beside each copy (../data resolves as without port)
    assert emu["copy-target"].argv[4:6] == ["--mirror", str(demo_pkg.find_project().parent)]
    assert emu["copy-golden"].argv[2] == str(demo_pkg.find_project())
    assert t.argv[-1] == "--device=npu" and g.argv[-1] == "--device=cuda"  # the command's CUDA means the NPU there
    assert g.argv[:3] == ["run", "--to", "cpu"] and "ASCENDIFY_EMULATE" not in g.env
    # both runs are watched, stopped after the same steps, from the same seed, each in its own project
    assert g.env["ASCENDIFY_OBSERVE"] != t.env["ASCENDIFY_OBSERVE"]
    assert g.env["ASCENDIFY_OBSERVE_STEPS"] == t.env["ASCENDIFY_OBSERVE_STEPS"] == "3"
    assert g.env["ASCENDIFY_OBSERVE_SEED"] == t.env["ASCENDIFY_OBSERVE_SEED"]
    assert g.cwd == str(tmp_path / "runs" / "golden" / "tree" / "cuda_project")
    assert t.cwd == str(tmp_path / "runs" / "target" / "tree" / "cuda_project")
    assert emu["bench-cpu"].exclusive and emu["bench-target"].exclusive  # timings run alone
    lock = emu["lockstep"].argv
    assert lock[:2] == ["-m", "ascendify.port.lockstep_job"] and lock[lock.index("--target-device") + 1] == "npu"
    assert set(emu["lockstep"].deps) == {"train-golden", "train-target"}
    assert emu["bench-target"].argv[emu["bench-target"].argv.index("--device") + 1] == "npu"
    for j in emu.values():  # what the report shows names no machine path
        assert str(tmp_path) not in j.shown, j.shown
    npu = {j.name: j for j in stages.build_jobs(_ctx(tmp_path, "npu"))}
    assert npu["train-target"].argv[:3] == ["run", "--to", "npu"]
    cuda = {j.name: j for j in stages.build_jobs(_ctx(tmp_path, "cuda"))}
    t = cuda["train-target"]
    assert t.argv[:3] == ["run", "--to", "cuda"] and t.deps == ("copy-target",) and t.argv[-1] == "--device=cuda"
    assert cuda["copy-target"].deps == ()  # the original itself runs on the GPU: no migration to wait for
    assert cuda["bench-target"].argv[cuda["bench-target"].argv.index("--device") + 1] == "cuda"
    for j in [*emu.values(), *npu.values(), *cuda.values()]:  # from the report folder: no path of its own
        assert j.shown and str(tmp_path) not in j.shown, j.shown
    # a project beside the report folder is named as the shell there reaches it, and every command runs as shown
    proj = tmp_path / "proj"
    ctx = Context(PortOptions(project=proj, command=["python", "t.py"], lanes=1), out=tmp_path / "proj-npu-report",
                  project=proj, migrated=tmp_path / "proj-npu", command=["python", "t.py"], target="emulated",
                  target_reason="")
    shown = {j.name: j.shown for j in stages.build_jobs(ctx)}
    assert shown["migrate"] == "ascendify migrate ../proj -o ../proj-npu --to npu --report migrate/report"
    assert shown["copy-golden"] == "python -m ascendify.port.copy_job ../proj runs/golden/tree/proj --mirror .."
    assert shown["train-golden"].startswith("cd runs/golden/tree/proj && ascendify run --to cpu -- python t.py")


def test_an_installed_wheel_carries_the_demo_project(tmp_path):
    """``pip install ascendify`` then ``ascendify demo``: the wheel has examples/cuda_project inside the package,
    and the demo finds it there when no source checkout is around (built from a copy: nothing lands in the tree)."""
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path / "src"
    for f in files:
        if (root / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / f, src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "dist").glob("ascendify-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    packaged = site / "ascendify" / "_examples" / "cuda_project"
    assert sorted(p.name for p in packaged.glob("*.py")) == sorted(
        p.name for p in (root / "examples" / "cuda_project").glob("*.py"))
    assert (site / "ascendify_emulate.pth").is_file() and not list(packaged.rglob("__pycache__"))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ascendify.demo as r; "
            "print(r.__file__.startswith(sys.argv[1]), r.find_project())")
    r = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", str(packaged)]


def test_an_exclusive_job_runs_alone():
    # the bench times each side alone: it waits for what runs to end, and nothing starts beside it
    slow = _py("slow", "import time; time.sleep(1.0)")
    timing = _py("timing", "import time; time.sleep(0.5)", exclusive=True)
    later = _py("later", "pass", deps=("slow",))
    jb.run_jobs([slow, timing, later], lanes=3, log_dir=None)
    assert all(j.returncode == 0 for j in (slow, timing, later))
    assert timing.started >= slow.started + slow.seconds - 0.05  # waited for slow to end
    # later became ready with timing running: it waited for timing to end
    assert later.started >= timing.started + timing.seconds - 0.05
