"""Device checks: target planning, the emulated npu end to end (labelled, host speed), tolerance verdicts, and the
real-NPU child process failing cleanly where there is no NPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascendify.doctor import device


def facts(torch_npu=None, available=False, gpus=()):
    return {
        "packages": {"torch": "2.13.0", "torch-npu": torch_npu},
        "torch_npu_probe": {"ran": bool(torch_npu), "is_available": available},
        "cuda": {"gpus": list(gpus)},
    }


def test_plan_prefers_the_real_npu_and_runs_the_emulator_before_the_cpu():
    assert [t["kind"] for t in device.plan(facts())] == ["emulated", "cpu"]
    assert [t["kind"] for t in device.plan(facts("2.12.0", True))] == ["npu", "cpu"]
    assert [t["kind"] for t in device.plan(facts(gpus=["GPU 0: NVIDIA H100"]))] == ["cuda", "emulated", "cpu"]
    asked = device.plan(facts(), ["npu", "cpu"])
    assert asked[0]["kind"] == "npu" and "no usable NPU" in asked[0]["skip"]
    with pytest.raises(ValueError, match="tpu"):
        device.plan(facts(), ["tpu"])


def _smoke(rel_err, tol=1e-4):
    return {"op": "matmul", "dtype": "fp32", "tol": tol, "mode": "fp32", "rel_err": rel_err,
            "status": "ok" if rel_err <= tol else "fail"}


def test_rows_fail_beyond_tolerance_and_show_peak_percentages():
    res = [{
        "kind": "cuda", "label": "cuda:0 NVIDIA H100 80GB HBM3", "name": "NVIDIA H100 80GB HBM3", "emulated": False,
        "smoke": [_smoke(2e-7), _smoke(3e-3)],
        "perf": {"matmul": [{"dtype": "bf16", "n": 4096, "reps": 20, "tflops": 650.0, "peak_tflops": 989.4,
                             "pct_of_peak": 65.7, "event_timing_ok": True}],
                 "copy": {"h2d_gbps": 50.1, "d2h_gbps": 48.0, "link_gbps": 63.0, "link": "PCIe 5.0 x16",
                          "h2d_pct": 79.5, "d2h_pct": 76.2, "mb": 256, "pinned": True}},
    }]
    smoke, perf = device.result_rows(res)
    assert smoke["id"] == "smoke:cuda" and smoke["status"] == "fail"
    assert "rel err 3.0e-03 > 1e-04" in smoke["found"]
    assert perf["status"] == "ok"
    assert "matmul bf16 650 TFLOP/s (66% of 989)" in perf["found"]
    assert "H2D 50.1 / D2H 48.0 GB/s (80%/76% of PCIe 5.0 x16 63)" in perf["found"]


def test_real_npu_child_process_reports_instead_of_crashing():
    res = device._run_child("npu", timeout=120)
    assert res["kind"] == "npu"
    assert "torch_npu" in (res.get("skipped") or res.get("error") or "")


@pytest.mark.slow
def test_emulated_npu_and_cpu_end_to_end(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "ascendify", "doctor", "--check", "device", "--device", "emulated", "--device", "cpu",
         "--json", "--quiet"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads(p.stdout)
    rows = {r["id"]: r for r in rep["checks"]}
    assert set(rows) == {"smoke:emulated", "perf:emulated", "smoke:cpu", "perf:cpu"}
    assert rows["smoke:emulated"]["title"] == "Smoke ops on emulated npu (host CPU)"
    assert rows["smoke:emulated"]["status"] == "ok" and rows["smoke:cpu"]["status"] == "ok"
    assert rows["smoke:emulated"]["found"].startswith("emulated npu (host CPU): ")
    assert "host speed, no chip peak" in rows["perf:emulated"]["found"]
    emu = next(d for d in rep["devices"] if d["kind"] == "emulated")
    assert emu["emulated"] is True and emu["name"].startswith("emulated npu (host CPU")
    got = {(s["op"], s["dtype"]) for s in emu["smoke"]}
    assert {("matmul", "fp32"), ("matmul", "bf16"), ("matmul", "fp16"), ("conv2d", "fp32"), ("backward", "fp32")} <= got
    # conv2d fp32 is checked at the HF32 tolerance: torch.npu.conv.allow_hf32 defaults to True, as on hardware
    conv = next(s for s in emu["smoke"] if s["op"] == "conv2d" and s["dtype"] == "fp32")
    assert conv["mode"] == "fp32_reduced"
    assert all(s["rel_err"] <= s["tol"] for s in emu["smoke"])
    assert emu["perf"]["timer"] == "device events"
    assert emu["perf"]["copy"]["h2d_gbps"] > 0


def test_smoke_verdict_fails_when_the_error_exceeds_the_tolerance():
    # in a child process: smoke ops run a backward(), which must not happen in the test process before the emulator
    # tests enable the emulated device
    code = (
        "import json, torch\n"
        "from ascendify.doctor import device, cann\n"
        "sizes = device._sizes('cpu')\n"
        "good = device.smoke(torch, 'cpu', 'cpu', sizes, {})\n"
        "cann.facts()['smoke']['tolerances'].update(fp32=1e-12)\n"
        "bad = device.smoke(torch, 'cpu', 'cpu', sizes, {})\n"
        "print(json.dumps([good, bad]))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    good, bad = json.loads(p.stdout.splitlines()[-1])
    assert [(s["op"], s["status"]) for s in good] == [
        ("matmul", "ok"), ("conv2d", "ok"), ("softmax", "ok"), ("sum", "ok"), ("backward", "ok")]
    assert all(0 < s["rel_err"] < 1e-5 for s in good)
    assert {s["status"] for s in bad} == {"fail"}
    rows = device.result_rows([{"kind": "cpu", "label": "cpu", "smoke": bad, "perf": {}}])
    assert rows[0]["status"] == "fail" and "rel err" in rows[0]["found"]
