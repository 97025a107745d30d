"""``ascendify demo --quick`` end to end (one run for the module, about 1-2 minutes on 2 cores): the files, the
JSON, the terminal summary, and report.html opened in headless Chromium (sections, verdicts, checklist, plots as
data: URIs, links to every step's outputs), with a screenshot kept as a test artifact.

The browser part is skipped, with the reason, where Debian's chromium is not installed (CI installs it)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascendify.core import knowledge
from ascendify.demo import QUICK
from ascendify.port.options import ALL_STAGES

CHROMIUM = "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is not None
SECTIONS = ("summary", "checklist", "doctor", "migrate", "train", "compare", "bench")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCENDIFY_", "TORCH_NPU_"))}
    env["COLUMNS"] = "80"
    env["PYTHONWARNINGS"] = "ignore"
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One ``ascendify demo --quick`` run: (out folder, completed process, demo.json)."""
    base = tmp_path_factory.mktemp("demo")
    out = base / "out"
    proc = subprocess.run([sys.executable, "-m", "ascendify", "demo", "--quick", "--out", str(out)], cwd=base,
                          capture_output=True, text=True, timeout=900, env=_env())
    data = json.loads((out / "demo.json").read_text()) if (out / "demo.json").exists() else None
    return out, proc, data


def test_demo_succeeds_on_the_emulated_npu(demo):
    out, proc, data = demo
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert data["schema"] == "ascendify.demo/1"
    assert data["target"] == "emulated" and data["sizes"] == "quick"
    assert data["verdict"]["status"] == "ok" and data["verdict"]["exit_code"] == 0
    assert [s["id"] for s in data["steps"]] == list(ALL_STAGES)
    assert all(s["status"] == "ok" for s in data["steps"]), [(s["id"], s["status"], s["error"]) for s in data["steps"]]
    assert data["seconds"] > 0 and data["cpu_seconds"] > 0


def test_each_step_left_its_own_outputs(demo):
    out, _, data = demo
    for rel in ("report.html", "demo.json", "doctor/doctor.json", "doctor/doctor.md",
                "migrate/report/report.json", "migrate/report/report.md", "migrate/npu_project/train_gpt.py",
                "migrate/npu_project/models.py", "runs/golden/history.json", "runs/target/history.json",
                "runs/target/emulate.json", "runs/golden/run.json", "runs/loss.png", "compare/lockstep/compare.html",
                "compare/lockstep/compare.json", "compare/curves/curves.html", "compare/curves/curves.json",
                "bench/cpu/bench.json", "bench/npu/bench.json", "logs/train-target.log", "logs/lockstep.log"):
        assert (out / rel).is_file(), rel
    # every file a step lists is there
    for s in data["steps"]:
        for f in s["files"]:
            assert (out / f).exists() or Path(f).exists(), (s["id"], f)
    # the migrated trainer really is NPU code, and the original was left alone
    migrated = (out / "migrate/npu_project/train_gpt.py").read_text()
    assert "import torch_npu" in migrated and 'device_type="cuda"' not in migrated
    assert "torch_npu" not in (_project() / "train_gpt.py").read_text()


def _project() -> Path:
    from ascendify.demo import find_project

    return find_project()


def test_training_histories_are_the_two_runs(demo):
    out, _, data = demo
    g = json.loads((out / "runs/golden/history.json").read_text())
    t = json.loads((out / "runs/target/history.json").read_text())
    # port stopped both runs after the demo's steps, counted from the optimizer's steps
    assert g["step"] == t["step"] == list(range(QUICK.steps))
    assert all(math.isfinite(x) and 0 < x < 10 for x in g["loss"] + t["loss"])
    assert all(abs(a - b) <= 0.05 * abs(a) for a, b in zip(g["loss"], t["loss"], strict=True))
    obs = json.loads((out / "runs/golden/observe.json").read_text())
    (model,) = obs["models"]  # the GPT, found by watching the run, with its real parameter count
    assert model["class"] == "GPT" and model["params"] > 0 and model["optimizers"] == [0]
    assert obs["optimizers"][0]["class"] == "AdamW" and obs["stopped"] == f"{QUICK.steps} steps done"
    assert model["first_call"]["batch_size"] == QUICK.batch
    emu = json.loads((out / "runs/target/emulate.json").read_text())
    assert emu["enabled"] and emu["ops_run"] > 0 and emu["exit_code"] == 0
    train = next(s for s in data["steps"] if s["id"] == "train")
    assert train["facts"]["runs"]["golden"]["redirected"] > 0  # ascendify run redirected CUDA calls to the CPU


def test_compare_names_the_verdicts(demo):
    out, _, data = demo
    compare = next(s for s in data["steps"] if s["id"] == "compare")
    assert compare["facts"]["lockstep"]["verdict"] == "match"
    assert compare["facts"]["curves"]["verdict"] == "match"
    assert "lockstep MATCH" in compare["headline"] and "curves MATCH" in compare["headline"]
    lock = json.loads((out / "compare/lockstep/compare.json").read_text())
    assert "npu" in lock["target"] and "bfloat16" in lock["target"] and "cpu" in lock["golden"]


def test_bench_is_labelled_host_speed(demo):
    out, _, data = demo
    npu = json.loads((out / "bench/npu/bench.json").read_text())
    assert npu["emulated"] is True
    bench = next(s for s in data["steps"] if s["id"] == "bench")
    assert bench["facts"]["best"]["cpu"] > 0 and bench["facts"]["best"]["target"] > 0
    assert "host speed" in bench["headline"]


def test_checklist_is_every_item_with_evidence(demo):
    _, _, data = demo
    items = data["checklist"]["items"]
    # every item but those an option asks for (prec.overflow: port --overflow)
    assert [i["id"] for i in items] == [i["id"] for i in knowledge.load("migration_checklist")["items"]
                                        if not i.get("when")]
    assert {i["section"] for i in items} == {"environment", "code", "performance", "precision", "deployment"}
    assert all(i["mark"] in ("✓", "✗", "n/a") and i["evidence"] for i in items)
    by_id = {i["id"]: i for i in items}
    assert by_id["prec.lockstep"]["mark"] == "✓" and by_id["prec.curves"]["mark"] == "✓"
    assert by_id["code.runs-on-target"]["mark"] == "✓"
    assert by_id["deploy.real-npu"]["mark"] == "n/a"  # no Ascend NPU on a test machine
    assert by_id["perf.baseline"]["mark"] == "n/a" and "host speed" in by_id["perf.baseline"]["evidence"]
    assert data["checklist"]["fail"] == 0


def test_progress_and_terminal_summary(demo):
    _, proc, _ = demo
    for i in range(1, len(ALL_STAGES) + 1):
        assert f"[{i}/{len(ALL_STAGES)}]" in proc.stderr
    lines = proc.stdout.rstrip("\n").splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = proc.stdout
    for step in ALL_STAGES:
        assert re.search(rf"^{step}\s", text, re.M), step
    assert re.search(r"^OK: proven: the migrated project runs on the emulated NPU", text, re.M)
    assert "report.html" in text


def test_report_is_self_contained(demo):
    out, _, _ = demo
    page = (out / "report.html").read_text()
    # no external requests (a script, an image, a style sheet); a link a person may follow (a source) is no request
    assert not re.search(r"""(src=|<link[^>]*href=)["'](https?:)?//""", page), "no external requests"
    assert page.count("data:image/png;base64,") >= 4
    assert 'class="code diff"' in page  # the migrated trainer shown as a diff against the original
    # relative links point at files that exist (links to sources on the web are not the report's files)
    for href in re.findall(r'href="([^"#][^"]*)"', page):
        assert href.startswith("https://") or (out / href).exists(), href


@pytest.mark.skipif(not HAVE_CHROMIUM, reason="Debian's chromium is not installed here (CI installs it)")
def test_report_in_headless_chromium(demo, tmp_path):
    out, _, data = demo
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    page = (out / "report.html").as_uri()
    p = subprocess.run([*flags, "--dump-dom", page], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout
    for anchor in SECTIONS:
        assert f'id="{anchor}"' in dom, anchor
    # the verdicts: the whole demo's, each step's, lockstep and curves by name
    assert re.search(r'class="verdict ok" data-status="ok">.*?the migrated project runs on the emulated NPU', dom,
                     re.S)
    for anchor in SECTIONS:  # every section opens with its verdict
        body = dom.split(f'id="{anchor}"', 1)[1]
        assert re.match(r'><h2>[^<]*</h2><div class="verdict (ok|warn)"', body), (anchor, body[:300])
    compare = dom.split('id="compare"', 1)[1].split('id="bench"', 1)[0]
    assert "MATCH: GPT on npu under torch.bfloat16 autocast" in compare
    assert re.search(r"MATCH: loss within 0.05", compare)
    # the checklist: one row per item, with its mark
    rows = re.findall(r'<tr data-item="([^"]+)" data-mark="([^"]+)"', dom)
    assert [r[0] for r in rows] == [i["id"] for i in data["checklist"]["items"]]
    # plots: images as data URIs (summary figures, the loss curves, curve compare, bench)
    imgs = re.findall(r'<img [^>]*src="data:image/png;base64,', dom)
    assert len(imgs) >= 4
    art = Path(os.environ.get("ASCENDIFY_TEST_ARTIFACTS") or tmp_path)
    art.mkdir(parents=True, exist_ok=True)
    shot = art / "demo_report.png"
    p = subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1280,2400", page], capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, p.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot of report.html: {shot}")
