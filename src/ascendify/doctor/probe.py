"""Gather every fact the checks read, once, without importing torch or torch_npu into this process.

:class:`Host` is the machine as the doctor sees it: environment, filesystem root, installed distributions and a
command runner. Tests build one over a fixture tree (a fake CANN install, a fake ``npu-smi`` on ``PATH``); the
default is this machine. Every probe catches its own errors and has a timeout, so :func:`gather` never raises
and never hangs: ``npu-smi`` gets ``npu_smi_timeout_s`` seconds, the ``import torch_npu`` probe runs in a child
process (a broken CANN can abort the process that imports it) with ``torch_npu_import_probe_timeout_s``.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendify.doctor import cann, npusmi


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except Exception:
        return None


def _run(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=dict(env) if env else None)
        return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"rc": None, "stdout": out, "stderr": f"timed out after {timeout:g} s", "timeout": True}
    except OSError as e:
        return {"rc": None, "stdout": "", "stderr": f"{type(e).__name__}: {e}"}


@dataclass
class Host:
    """The machine the doctor examines. Every field has a real default; tests replace what they fake."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    root: str = "/"
    home_dir: str | None = None
    arch: str = field(default_factory=platform.machine)
    python: str = sys.executable
    dist_version: Callable[[str], str | None] = _dist_version
    run: Callable[..., dict[str, Any]] = _run
    probe_torch_npu: bool = True

    def path(self, p: str) -> str:
        """``p`` (an absolute system path such as ``/dev/davinci0``) under this host's root."""
        if self.root in ("", "/"):
            return p
        return os.path.join(self.root, p.lstrip("/"))

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.environ.get("PATH", ""))


def gather(host: Host | None = None) -> dict[str, Any]:
    """Every fact, as JSON-ready data. Never raises."""
    host = host or Host()
    facts: dict[str, Any] = {"host": {"root": host.root, "arch": host.arch}}
    for key, fn in (
        ("os", _os),
        ("python", _python),
        ("packages", _packages),
        ("cann", _cann),
        ("driver", _driver),
        ("env", _env),
        ("libraries", _libraries),
        ("torch_npu_probe", _torch_npu_probe),
        ("cuda", _cuda),
    ):
        try:
            facts[key] = fn(host, facts)
        except Exception as e:  # a probe with a bug reports itself instead of stopping the doctor
            facts[key] = {"error": f"{type(e).__name__}: {e}"}
    return facts


def _os(host: Host, _f: dict) -> dict[str, Any]:
    info = {"system": platform.system(), "kernel": platform.release(), "machine": host.arch, "distro": None}
    try:
        with open(host.path("/etc/os-release"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["distro"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    libc = platform.libc_ver()
    info["libc"] = "-".join(x for x in libc if x) or None
    return info


def _python(host: Host, _f: dict) -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": host.python,
    }


PACKAGES = ("torch", "torch-npu", "numpy", "ascendify", "transformers", "accelerate", "mindstudio-probe")
CUDA_MARKERS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cublas-cu12", "nvidia-cublas-cu11")


def _packages(host: Host, _f: dict) -> dict[str, Any]:
    out = {name: host.dist_version(name) for name in PACKAGES}
    out["cuda_runtime_wheels"] = [n for n in CUDA_MARKERS if host.dist_version(n)]
    out["torch_cuda"] = _torch_cuda_version()
    return out


def _torch_cuda_version() -> str | None:
    """``torch.version.cuda`` read from torch/version.py as text: knowing the build must not cost importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if not spec or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = os.path.join(loc, "version.py")
        try:
            text = open(p, encoding="utf-8").read()
        except OSError:
            continue
        m = re.search(r"^cuda\s*(?::[^=]*)?=\s*(.+)$", text, re.M)
        if m:
            val = m.group(1).strip().strip("'\"")
            return None if val in ("None", "") else val
    return None


def _cann(host: Host, _f: dict) -> dict[str, Any]:
    return cann.find(dict(host.environ), host.arch, root=host.root, home_dir=host.home_dir)


def _driver(host: Host, _f: dict) -> dict[str, Any]:
    dfacts = cann.facts()["driver"]
    info: dict[str, Any] = {}
    vi = host.path(dfacts["version_info"])
    info["version_info"] = cann.read_kv(vi) if os.path.isfile(vi) else None
    info["version"] = (info["version_info"] or {}).get("Version")
    info["device_nodes"] = sorted(
        os.path.basename(p) for p in glob.glob(host.path(dfacts["device_node_glob"])) if re.search(r"davinci\d+$", p)
    )
    info["control_nodes"] = {os.path.basename(n): os.path.exists(host.path(n)) for n in dfacts["control_nodes"]}
    smi = host.which("npu-smi")
    info["npu_smi_path"] = smi
    if smi:
        res = host.run([smi, "info"], timeout=float(dfacts["npu_smi_timeout_s"]), env=host.environ)
        text = (res.get("stdout") or "") + ("\n" + res["stderr"] if res.get("stderr") else "")
        info["npu_smi"] = {
            "rc": res.get("rc"),
            "timeout": bool(res.get("timeout")),
            "output": text[-4000:],
            **(npusmi.parse(res.get("stdout") or "") if res.get("rc") == 0 else {"devices": [], "processes": []}),
        }
    else:
        info["npu_smi"] = None
    return info


def _env(host: Host, facts: dict) -> dict[str, Any]:
    spec = cann.facts()["set_env_vars"]
    names = [v["name"] for v in spec["vars"]]
    names += cann.facts()["cann_home_env"]["names"]
    names += ["LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES"]
    names += ["TORCH_DEVICE_BACKEND_AUTOLOAD", "ASCENDIFY_EMULATE", "ASCENDIFY_EMULATE_UNVERIFIED_TORCH"]
    names += ["CUDA_VISIBLE_DEVICES", "PYTORCH_NPU_ALLOC_CONF", "HCCL_CONNECT_TIMEOUT", "ASCEND_LAUNCH_BLOCKING"]
    return {n: host.environ.get(n) for n in dict.fromkeys(names)}


def _lib_dirs(host: Host, facts: dict) -> list[str]:
    dirs = [d for d in (host.environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    return dirs


def _libraries(host: Host, facts: dict) -> dict[str, Any]:
    spec = cann.facts()["libraries"]
    home = (facts.get("cann") or {}).get("home")
    search = _lib_dirs(host, facts)
    driver_dirs = [host.path(d) for d in cann.facts()["driver"]["lib_dirs"]]
    out: dict[str, Any] = {"search_path": search, "libs": []}
    for lib in spec["libs"] + [dict(x, optional=True) for x in spec["optional"]]:
        on_path = next((os.path.join(d, lib["name"]) for d in search if os.path.exists(os.path.join(d, lib["name"]))), None)
        installed = None
        roots = [home] if home and lib["where"] == "toolkit" else []
        roots += driver_dirs if lib["where"] == "driver" else []
        for r in roots:
            for p in (os.path.join(r, lib["name"]), os.path.join(r, "lib64", lib["name"])):
                if os.path.exists(p):
                    installed = p
                    break
            if installed:
                break
        out["libs"].append(
            {
                "name": lib["name"],
                "where": lib["where"],
                "optional": bool(lib.get("optional")),
                "on_library_path": on_path,
                "installed_at": installed,
            }
        )
    return out


PROBE_CODE = r"""
import json, sys
out = {"imported": False}
try:
    import torch
    out["torch"] = torch.__version__
    import torch_npu
    out["imported"] = True
    out["torch_npu"] = getattr(torch_npu, "__version__", None)
    try:
        from torch_npu.utils import get_cann_version
        out["cann_version"] = get_cann_version()
    except Exception as e:
        out["cann_version_error"] = f"{type(e).__name__}: {e}"
    out["is_available"] = bool(torch.npu.is_available())
    out["device_count"] = int(torch.npu.device_count()) if out["is_available"] else 0
    out["devices"] = [torch.npu.get_device_name(i) for i in range(out["device_count"])]
    try:
        out["allow_hf32"] = {"matmul": bool(torch.npu.matmul.allow_hf32), "conv": bool(torch.npu.conv.allow_hf32)}
    except Exception:
        pass
except BaseException as e:
    out["error"] = f"{type(e).__name__}: {e}"
print("ASCENDIFY_PROBE " + json.dumps(out))
"""


def _torch_npu_probe(host: Host, facts: dict) -> dict[str, Any]:
    """``import torch_npu`` in a child process: only where a real torch-npu is installed."""
    if not (facts.get("packages") or {}).get("torch-npu"):
        return {"ran": False, "why": "torch-npu is not installed"}
    if not host.probe_torch_npu:
        return {"ran": False, "why": "disabled"}
    timeout = float(cann.facts()["torch_npu_import_probe_timeout_s"])
    res = host.run([host.python, "-c", PROBE_CODE], timeout=timeout, env=host.environ)
    out: dict[str, Any] = {"ran": True, "rc": res.get("rc"), "timeout": bool(res.get("timeout"))}
    for line in (res.get("stdout") or "").splitlines():
        if line.startswith("ASCENDIFY_PROBE "):
            try:
                out.update(json.loads(line[len("ASCENDIFY_PROBE ") :]))
            except ValueError:
                pass
    if not out.get("imported") and not out.get("error"):
        out["error"] = "the probe process ended without an answer (crashed?)"
    out["stderr_tail"] = (res.get("stderr") or "")[-3000:]
    return out


def _cuda(host: Host, _f: dict) -> dict[str, Any]:
    smi = host.which("nvidia-smi")
    if not smi:
        return {"nvidia_smi": None, "gpus": []}
    res = host.run([smi, "-L"], timeout=10.0, env=host.environ)
    gpus = [ln.strip() for ln in (res.get("stdout") or "").splitlines() if ln.strip().startswith("GPU ")]
    return {"nvidia_smi": smi, "rc": res.get("rc"), "gpus": gpus}
