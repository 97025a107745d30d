"""Every check branch on fake hosts: a good install, version mismatches, a missing library, no driver, busy devices,
a hung npu-smi, no NPU at all. The hosts are fixture trees with real ``npu-smi`` executables on PATH."""

from __future__ import annotations

import time

from ascendify.doctor import REGISTRY, run_checks

from .fakes import dists, good_host, host, make_cann, make_driver, make_npu_smi, row, set_env, statuses


def check(h, **kw):
    return run_checks(h, device=False, **kw)


def test_good_install_is_all_ok(tmp_path):
    rep = check(good_host(tmp_path))
    st = statuses(rep)
    assert rep["summary"]["verdict"] == "ok", [r for r in rep["checks"] if r["status"] != "ok"]
    for cid in ("torch", "torch-npu", "torch-npu-import", "cann", "cann-env", "libraries", "driver", "devices",
                "busy", "matrix"):
        assert st[cid] == "ok", (cid, row(rep, cid))
    assert st["emulator"] == "skip"  # a real torch-npu: the emulator stands aside
    assert "CANN 9.1.0" in row(rep, "cann")["found"]
    assert "2 x 910B3 (64 GB each)" in row(rep, "devices")["found"]
    assert rep["summary"]["npu"] == "real npu"


def test_torch_and_torch_npu_versions_differ(tmp_path):
    rep = check(good_host(tmp_path, torch="2.13.0", torch_npu="2.12.0"))
    tn = row(rep, "torch-npu")
    assert tn["status"] == "fail"
    assert "built for torch 2.12" in tn["found"] and "pip install torch==2.12.0" in tn["fix"]
    assert row(rep, "matrix")["status"] == "fail"
    assert rep["summary"]["verdict"] == "fail"


def test_cann_older_than_the_matrix_row(tmp_path):
    rep = check(good_host(tmp_path, cann="8.0.RC2"))
    m = row(rep, "matrix")
    assert m["status"] == "fail"
    assert "CANN 8.0.RC2 is older than the 9.1.0" in m["found"]


def test_missing_library_is_named(tmp_path):
    home = make_cann(tmp_path, "9.1.0", missing=("libhccl.so",))
    make_driver(tmp_path)
    make_npu_smi(tmp_path / "bin", fixture="910b3_idle.txt")
    h = host(tmp_path, set_env(home, tmp_path), bindir=tmp_path / "bin",
             dist_version=dists(torch="2.12.0", torch_npu="2.12.0"),
             probe_result={"imported": False, "error": "ImportError: libhccl.so: cannot open shared object file: "
                                                       "No such file or directory"})
    rep = check(h)
    libs = row(rep, "libraries")
    assert libs["status"] == "fail" and libs["found"] == "not found: libhccl.so"
    imp = row(rep, "torch-npu-import")
    assert imp["status"] == "fail"
    assert imp["details"]["known_errors"] == ["cann-lib-missing"]
    assert "set_env.sh" in imp["fix"]


def test_set_env_not_sourced(tmp_path):
    home = make_cann(tmp_path, "9.1.0")
    make_driver(tmp_path)
    h = host(tmp_path, {}, dist_version=dists(torch="2.12.0", torch_npu="2.12.0"), probe_result={"imported": False,
             "error": "ImportError: libascendcl.so: cannot open shared object file"})
    rep = check(h)
    env = row(rep, "cann-env")
    assert env["status"] == "fail"
    assert "ASCEND_HOME_PATH" in env["found"] and f"{home}/lib64" in env["found"]
    assert env["fix"] == f"source {tmp_path}/usr/local/Ascend/ascend-toolkit/set_env.sh"
    libs = row(rep, "libraries")
    assert libs["status"] == "fail" and libs["found"].startswith("installed but not on LD_LIBRARY_PATH: libascendcl.so")
    assert "libascend_hal.so" in libs["found"]  # device nodes exist: the driver library is expected too
    assert row(rep, "cann")["status"] == "ok"  # found at the default prefix


def test_variable_from_another_install_is_wrong(tmp_path):
    h = good_host(tmp_path, env={"ASCEND_OPP_PATH": "/opt/old-cann/opp"})
    env = row(check(h), "cann-env")
    assert env["status"] == "fail" and "wrong ASCEND_OPP_PATH=/opt/old-cann/opp" in env["found"]


def test_driver_absent_on_a_host_with_torch_npu(tmp_path):
    h = host(tmp_path, {}, dist_version=dists(torch="2.12.0", torch_npu="2.12.0"),
             probe_result={"imported": False,
                           "error": "OSError: libascend_hal.so: cannot open shared object file: No such file or directory"})
    rep = check(h)
    st = statuses(rep)
    assert st["driver"] == "warn" and "no Ascend driver" in row(rep, "driver")["found"]
    assert st["devices"] == "skip" and st["busy"] == "skip"
    imp = row(rep, "torch-npu-import")
    assert imp["status"] == "fail" and imp["details"]["known_errors"] == ["driver-lib-missing"]
    assert st["cann"] == "fail"  # torch-npu without any toolkit


def test_busy_device_and_health_warning(tmp_path):
    rep = check(good_host(tmp_path, smi="910b4_busy.txt"))
    busy = row(rep, "busy")
    assert busy["status"] == "warn"
    assert "NPU 0: pid 41717 (python, 25731 MB)" in busy["found"]
    assert busy["fix"].endswith("ASCEND_RT_VISIBLE_DEVICES=1")
    dev = row(rep, "devices")
    assert dev["status"] == "warn" and "NPU 1 chip 0 health Warning" in dev["found"]


def test_device_held_by_another_container(tmp_path):
    h = good_host(tmp_path)
    make_npu_smi(tmp_path / "bin", text="DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
                 "dcmi model initialized failed, because the device is used. ret is -8020\n", rc=255)
    rep = check(h)
    drv, busy = row(rep, "driver"), row(rep, "busy")
    assert drv["status"] == "fail" and "because the device is used" in drv["found"]
    assert busy["status"] == "fail" and "npu-smi-dcmi-busy" in busy["details"]["known_errors"]
    assert "--device /dev/davinci_manager" in busy["fix"]


def test_hung_npu_smi_times_out(tmp_path):
    h = good_host(tmp_path, timeout_cap=0.5)
    make_npu_smi(tmp_path / "bin", fixture="910b3_idle.txt", sleep=5)
    t0 = time.monotonic()
    rep = check(h, only=["driver"])
    assert time.monotonic() - t0 < 4
    assert row(rep, "driver")["status"] == "fail"
    assert "did not answer" in row(rep, "driver")["found"]


def test_visible_devices_out_of_range_and_missing_control_nodes(tmp_path):
    h = good_host(tmp_path, env={"ASCEND_RT_VISIBLE_DEVICES": "0,4"})
    (tmp_path / "dev/devmm_svm").unlink()
    rep = check(h)
    dev = row(rep, "devices")
    assert dev["status"] == "fail" and "ASCEND_RT_VISIBLE_DEVICES=0,4" in dev["found"]
    assert dev["fix"] == "export ASCEND_RT_VISIBLE_DEVICES=0,1"
    drv = row(rep, "driver")
    assert drv["status"] == "warn" and drv["fix"] == "--device /dev/devmm_svm (when starting the container)"


def test_npu_present_but_torch_npu_missing_or_not_available(tmp_path):
    h = good_host(tmp_path, torch_npu=None)
    rep = check(h)
    assert row(rep, "torch-npu")["status"] == "fail"
    assert row(rep, "torch-npu")["fix"] == "pip install torch-npu==2.12.0"
    h2 = good_host(tmp_path / "b", probe_result={"imported": True, "is_available": False})
    imp = row(check(h2), "torch-npu-import")
    assert imp["status"] == "fail" and "is_available() is False" in imp["found"]


def test_cuda_build_of_torch_next_to_torch_npu(tmp_path):
    h = good_host(tmp_path)
    h.dist_version = dists(torch="2.12.0", torch_npu="2.12.0", nvidia_cuda_runtime_cu12="12.4.127")
    t = row(check(h), "torch")
    assert t["status"] == "fail" and "CUDA build" in t["found"]
    assert "--index-url https://download.pytorch.org/whl/cpu" in t["fix"]


def test_no_npu_at_all_says_so_and_what_to_install(tmp_path):
    h = host(tmp_path, {}, dist_version=dists(torch="2.13.0+cpu"))
    rep = check(h)
    st = statuses(rep)
    assert rep["summary"]["verdict"] == "ok" and rep["summary"]["npu"] == "none"
    for cid in ("torch-npu", "torch-npu-import", "cann", "cann-env", "libraries", "driver", "devices", "busy",
                "matrix"):
        assert st[cid] == "skip", cid
    assert row(rep, "torch-npu")["fix"] == "on an NPU host: pip install torch-npu==2.13.0"
    assert st["emulator"] == "ok"


def test_launch_blocking_is_a_warning(tmp_path):
    rep = check(good_host(tmp_path, env={"ASCEND_LAUNCH_BLOCKING": "1"}))
    r = row(rep, "launch-blocking")
    assert r["status"] == "warn" and "ASCEND_LAUNCH_BLOCKING=1" in r["found"]
    assert "unset ASCEND_LAUNCH_BLOCKING" in r["fix"]
    assert statuses(check(good_host(tmp_path / "b")))["launch-blocking"] == "ok"
    assert statuses(check(good_host(tmp_path / "c", env={"ASCEND_LAUNCH_BLOCKING": "0"})))["launch-blocking"] == "ok"


def test_only_and_unknown_ids(tmp_path):
    h = host(tmp_path, {}, dist_version=dists(torch="2.13.0"))
    rep = run_checks(h, device=False, only=["os", "python"])
    assert [r["id"] for r in rep["checks"]] == ["os", "python"]
    try:
        run_checks(h, device=False, only=["nope"])
    except KeyError as e:
        assert "nope" in str(e)
    else:
        raise AssertionError("an unknown check id must be refused")


def test_every_check_is_documented():
    for c in REGISTRY.values():
        assert c.title and "What:" in c.doc and "Why:" in c.doc and "Fix:" in c.doc, c.id


def test_every_check_has_a_row_in_the_docs():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "doctor.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", page, re.M))
    missing = [c.id for c in REGISTRY.values() if c.id not in rows]
    assert not missing, f"checks without a row in docs/doctor.md's table: {missing}"
