"""``ascendify run`` end to end (subprocesses): scripts, -m modules, exit codes, logs, strict, import form."""

from __future__ import annotations

import json

import pytest
from auto_support import PYTHON, REPO, SCRIPTS, ascendify_run, last_json, rank_results, run_cmd


def test_script_runs_with_argv_and_exit_code(tmp_path):
    log = tmp_path / "run.json"
    r = ascendify_run("--to", "cpu", "--log", str(log), str(SCRIPTS / "cuda_train.py"), "--steps", "2",
                      "--exit-code", "3")
    assert r.returncode == 3, r.stderr
    out = last_json(r.stdout)
    assert out["steps"] == 2 and out["param_device"] == "cpu"
    rep = json.loads(log.read_text())
    red = {row["api"]: row for row in rep["redirected"]}
    assert red["Module.cuda"]["first_site"].endswith("cuda_train.py:25")
    assert red["torch.cuda.Event"]["count"] == 2
    assert "torch.load(map_location)" in red
    assert {row["api"] for row in rep["no_effect"]} >= {"torch.backends.cudnn.benchmark",
                                                         "torch.cuda.max_memory_allocated"}
    assert rep["target"]["device_type"] == "cpu" and rep["target"]["dist_backend"] == "gloo"
    assert "ascendify run → cpu" in r.stderr  # the summary goes to stderr, stdout stays the script's


def test_python_and_its_options_before_the_script(tmp_path):
    script = tmp_path / "warns.py"
    script.write_text("import json, sys, warnings\n"
                      "print(json.dumps({'argv': sys.argv[1:], 'bytecode': sys.dont_write_bytecode}))\n"
                      "warnings.warn('as an error', UserWarning)\n")
    r = ascendify_run("--to", "cpu", "-q", "--", "python", "-u", "-B", "-W", "error::UserWarning", str(script),
                      "-u", cwd=tmp_path, env={"PYTHONDONTWRITEBYTECODE": None})
    assert last_json(r.stdout) == {"argv": ["-u"], "bytecode": True}
    assert r.returncode == 1 and "UserWarning: as an error" in r.stderr  # -W made the warning an error


def test_exceptions_print_a_traceback_and_exit_1():
    r = ascendify_run("--to", "cpu", str(SCRIPTS / "raises.py"))
    assert r.returncode == 1
    assert "ValueError: boom from the user script" in r.stderr
    assert "raises.py" in r.stderr


@pytest.mark.parametrize("rewrite", [[], ["--no-rewrite-checks"]])
def test_a_syntax_error_of_the_script_reads_as_python_prints_it(tmp_path, rewrite):
    (tmp_path / "syn.py").write_text("import torch\nx = (1,\n")
    r = ascendify_run("--to", "cpu", "-q", *rewrite, "syn.py", cwd=tmp_path)
    want = run_cmd([PYTHON, "syn.py"], cwd=tmp_path).stderr
    assert r.returncode == 1
    assert r.stderr == want.replace(str(tmp_path / "syn.py"), "syn.py")  # no frame of ascendify, ast or runpy


def test_a_redirected_call_that_fails_folds_ascendify_frames(tmp_path):
    (tmp_path / "arch.py").write_text("import torch\n\n\ndef f():\n    return torch.cuda.get_arch_list()\n\n\nf()\n")
    r = ascendify_run("--to", "cpu", "-q", "arch.py", cwd=tmp_path)
    lines = r.stderr.splitlines()
    assert r.returncode == 1
    assert lines[:2] == ["Traceback (most recent call last):", '  File "arch.py", line 8, in <module>']
    assert [x for x in lines if x.startswith("  [")] == ["  [ascendify.auto: 2 frames folded]"]
    assert "/ascendify/" not in r.stderr and "runpy" not in r.stderr
    assert lines[-1].startswith("ascendify.auto.record.UnsupportedOnTarget: torch.cuda.get_arch_list")


def test_module_mode_has_main_semantics():
    r = ascendify_run("--to", "cpu", "-m", "pkg_demo.main", "7", "--flag", cwd=SCRIPTS)
    assert r.returncode == 7, r.stderr
    out = last_json(r.stdout)
    assert out["name"] == "__main__"
    assert out["args"] == ["7", "--flag"]
    assert out["argv0"] == out["module_file"] and out["argv0"].endswith("main.py")
    assert out["device"] == "cpu"


def test_missing_script_and_bad_target():
    r = ascendify_run("--to", "cpu", "does_not_exist.py")
    assert r.returncode == 2 and "no such script" in r.stderr
    r = ascendify_run("--to", "xpu", str(SCRIPTS / "raises.py"))
    assert r.returncode == 2 and "xpu" in r.stderr


def test_strict_turns_annotations_into_errors_at_the_call():
    r = ascendify_run("--to", "cpu", str(SCRIPTS / "uses_nvtx.py"))
    assert r.returncode == 0 and "sum 6.0" in r.stdout
    assert "torch.cuda.nvtx.range_push" in r.stderr
    r = ascendify_run("--to", "cpu", "--strict", str(SCRIPTS / "uses_nvtx.py"))
    assert r.returncode == 1
    assert "UnsupportedOnTarget: torch.cuda.nvtx.range_push is not supported on cpu (called at" in r.stderr
    assert "uses_nvtx.py:6" in r.stderr


def test_import_ascendify_auto_at_the_top_of_the_entry_script(tmp_path):
    log = tmp_path / "imp.json"
    r = run_cmd([PYTHON, str(SCRIPTS / "imports_auto.py"), "a", "b"],
                env={"ASCENDIFY_TARGET": "cpu", "ASCENDIFY_LOG": str(log)})
    assert r.returncode == 0, r.stderr
    out = last_json(r.stdout)
    assert out == {"device": "cpu", "available": True, "argv": ["a", "b"], "name": "__main__"}
    assert "ascendify run → cpu" in r.stderr
    sites = {row["api"]: row["first_site"] for row in json.loads(log.read_text())["redirected"]}
    assert sites["torch.randn"].endswith("imports_auto.py:8")


def test_import_ascendify_auto_is_cheap_and_inert_outside_main():
    code = ("import importlib, sys\n"
            "importlib.import_module('ascendify.auto')\n"
            "import ascendify.commands.run, ascendify.auto.runner\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert not ascendify.auto.is_enabled()\n"
            "print('ok')\n")
    r = run_cmd([PYTHON, "-c", code])
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_device_checks_are_rewritten_in_memory_and_reported(tmp_path):
    src = (SCRIPTS / "cuda_compares.py").read_bytes()
    log = tmp_path / "f.json"
    r = ascendify_run("--to", "cpu", "--log", str(log), "-q", str(SCRIPTS / "cuda_compares.py"),
                      env={"PYTHONDONTWRITEBYTECODE": None})  # bytecode caching on, as usual
    assert r.returncode == 0, r.stderr
    assert "use_amp True False True True" in r.stdout  # `.type == "cuda"` now tests for the target, here and
    assert r.stderr.strip() == ""  # --quiet                  in the imported user module; `in str()` is left
    findings = {(f["file"].rsplit("/", 1)[-1], f["line"], f["code"]): f["message"]
                for f in json.loads(log.read_text())["findings"]}
    assert "rewritten" in findings[("cuda_compares.py", 5, "device.type == 'cuda'")]
    assert "rewritten" in findings[("devcheck_helper.py", 5, "device.type == 'cuda'")]
    assert "takes its non-CUDA branch" in findings[("cuda_compares.py", 6, "'cuda' in str(device)")]
    # a plain string that still says "cuda": the CUDA branch runs, and the finding says so
    assert "at run time it is 'cuda', a plain value that still says 'cuda'" in findings[
        ("cuda_compares.py", 6, "'cuda' == 'cu' + 'da'")]
    assert (SCRIPTS / "cuda_compares.py").read_bytes() == src  # nothing written
    assert not list(SCRIPTS.glob("__pycache__/devcheck_helper*"))  # no bytecode cached for rewritten code

    r = ascendify_run("--to", "cpu", "--no-rewrite-checks", "--log", str(log), "-q",
                      str(SCRIPTS / "cuda_compares.py"))
    assert "use_amp False False False True" in r.stdout
    assert {f["line"] for f in json.loads(log.read_text())["findings"]} == {5, 6}


def test_findings_on_plain_device_strings_say_which_branch_ran(tmp_path):
    """nanoGPT's shape: `device` is a string the command line may override; under redirection a string that
    still says "cuda" keeps the CUDA branch (the finding must not say it takes the other one)."""
    (tmp_path / "t.py").write_text("import sys\ndevice = sys.argv[1]\n"
                                   "device_type = 'cuda' if 'cuda' in device else 'cpu'\n"
                                   "print('fused', device_type == 'cuda')\n")
    log = tmp_path / "f.json"
    messages = {}
    for device in ("cuda", "cpu"):
        r = ascendify_run("--to", "cpu", "-q", "--log", str(log), "t.py", device, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert f"fused {device == 'cuda'}" in r.stdout
        messages[device] = [f["message"] for f in json.loads(log.read_text())["findings"]]
    assert messages["cuda"] == [
        "compares `device` with 'cuda': at run time it is 'cuda', a plain value that still says 'cuda' (not "
        "redirected), so the CUDA branch runs (its CUDA calls are redirected)",
        "compares `device_type` with 'cuda': at run time it is 'cuda', a plain value that still says 'cuda' (not "
        "redirected), so the CUDA branch runs (its CUDA calls are redirected)"]
    assert messages["cpu"] == [
        "compares `device` with 'cuda': at run time it is 'cpu', so this takes its non-CUDA branch",
        "compares `device_type` with 'cuda': at run time it is 'cpu', so this takes its non-CUDA branch"]
    r = ascendify_run("--to", "cpu", "-q", "--no-rewrite-checks", "--log", str(log), "t.py", "cuda", cwd=tmp_path)
    assert all("may take its non-CUDA branch" in f["message"] for f in json.loads(log.read_text())["findings"])


@pytest.mark.slow
def test_torchrun_two_processes_nccl_and_cuda_local_rank_on_cpu(tmp_path):
    log = tmp_path / "ddp.json"
    r = ascendify_run("--to", "cpu", "--log", str(log), "torchrun", "--standalone", "--nproc-per-node", "2",
                      str(SCRIPTS / "ddp_nccl.py"), env={"DDP_OUT": str(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = rank_results(tmp_path)
    assert sorted(x["rank"] for x in lines) == [0, 1]
    assert {x["backend"] for x in lines} == {"gloo"} and {x["device"] for x in lines} == {"cpu"}
    assert lines[0]["param_checksum"] == lines[1]["param_checksum"]  # DDP kept the replicas equal
    assert {x["rank_sum"] for x in lines} == {1.0}
    assert r.stderr.count("ascendify run → cpu") == 1  # only rank 0 prints the summary
    rep0 = json.loads(log.read_text())
    rep1 = json.loads((tmp_path / "ddp.rank1.json").read_text())
    for rep in (rep0, rep1):
        apis = {row["api"] for row in rep["redirected"]}
        assert {"dist.init_process_group(backend)", "DistributedDataParallel(device_ids)", "torch.device",
                "Tensor.cuda"} <= apis


def test_run_from_repo_root_relative_paths():
    r = ascendify_run("--to", "cpu", "-q", "tests/auto/scripts/uses_nvtx.py", cwd=REPO)
    assert r.returncode == 0 and "sum 6.0" in r.stdout


@pytest.mark.slow
def test_multiprocessing_spawn_children_are_redirected():
    r = ascendify_run("--to", "cpu", str(SCRIPTS / "mp_spawn.py"), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads([s for s in r.stdout.splitlines() if s.startswith("[")][-1])
    assert out == [{"rank": 0, "device": "cpu", "sum": 2.0, "avail": True},
                   {"rank": 1, "device": "cpu", "sum": 4.0, "avail": True}]
    assert "multiprocessing spawn" in r.stderr
