"""The environment checks, one small documented unit each (the ruff style: id, title, doc, a pure function).

Each function reads the facts :func:`ascendify.doctor.probe.gather` collected and returns a
:class:`~ascendify.doctor.model.CheckResult`. Docstrings are the checks' documentation
(``ascendify doctor --list-checks``, ``docs/doctor.md``): what is checked, why it matters, and how to fix it.
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any

from ascendify.doctor import cann as cann_mod
from ascendify.doctor import explain, matrix
from ascendify.doctor.model import CheckResult, check

CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def npu_hardware(f: dict[str, Any]) -> bool:
    """True when the host shows Ascend hardware: device nodes, or npu-smi listing devices."""
    drv = f.get("driver") or {}
    smi = drv.get("npu_smi") or {}
    return bool(drv.get("device_nodes") or smi.get("devices"))


def _pk(f: dict[str, Any], name: str) -> str | None:
    return (f.get("packages") or {}).get(name)


def _kb_fix(text: str) -> tuple[str, list[str]]:
    """The fix of the first knowledge-base entry matching ``text``, and the ids of every match."""
    hits = explain.match_text(text or "")
    if not hits:
        return "", []
    return hits[0]["entry"]["fix"], list(dict.fromkeys(h["entry"]["id"] for h in hits))


@check("os", "Operating system and kernel")
def check_os(f: dict[str, Any]) -> CheckResult:
    """What: the operating system, kernel, CPU architecture and C library.

    Why: the Ascend driver, CANN and torch_npu exist for Linux on x86_64 and aarch64 only.

    Fix: use a supported Linux host for a real NPU; elsewhere ``ascendify emulate`` still runs NPU code on the CPU.
    """
    o = f.get("os") or {}
    desc = f"{o.get('distro') or o.get('system')} (kernel {o.get('kernel')}, {o.get('machine')}"
    desc += f", {o['libc']})" if o.get("libc") else ")"
    if o.get("system") != "Linux":
        return CheckResult(
            "warn",
            desc + ": Ascend's driver, CANN and torch_npu are Linux-only",
            "run on Linux (x86_64 or aarch64) for a real NPU; `ascendify emulate` works here",
        )
    if o.get("machine") not in ("x86_64", "aarch64"):
        return CheckResult("warn", desc + ": CANN ships for x86_64 and aarch64 only", "use an x86_64 or aarch64 host")
    return CheckResult("ok", desc)


@check("python", "Python version")
def check_python(f: dict[str, Any]) -> CheckResult:
    """What: the Python version, against the versions torch_npu wheels exist for (version matrix).

    Why: pip finds no torch-npu wheel for a Python outside the range of its release (for example 3.9 for torch-npu
    2.10 and later, or 3.14 before 2.13).

    Fix: a Python in the range the matrix lists for the torch-npu you need.
    """
    py = (f.get("python") or {}).get("version", "?")
    tn, torch = _pk(f, "torch-npu"), _pk(f, "torch")
    row = matrix.row_for(tn) if tn else None
    rows = [row] if row else matrix.rows_for_torch(torch) if torch else matrix.rows()[:1]
    rows = [r for r in rows if r]
    if not rows:
        return CheckResult("ok", f"Python {py} (torch {torch} is not in the version matrix)")
    spec = rows[0]["python_x86_64_wheels"]
    ok = matrix.python_ok(spec, py)
    who = f"torch-npu {rows[0]['torch_npu']}"
    if ok is False:
        status = "fail" if tn else "warn"
        return CheckResult(status, f"Python {py}; {who} has wheels for {spec}", f"use Python {spec.replace('-', ' to ')}")
    return CheckResult("ok", f"Python {py} ({who} wheels: {spec})")


@check("torch", "PyTorch build")
def check_torch(f: dict[str, Any]) -> CheckResult:
    """What: torch is installed, its version, and whether it is a CUDA build.

    Why: torch_npu needs the CPU build of the same torch version; a CUDA build next to it makes ``import torch_npu``
    fail with "Two accelerators cannot be used at the same time".

    Fix: ``pip install torch==<version> --index-url https://download.pytorch.org/whl/cpu``.
    """
    torch, tn = _pk(f, "torch"), _pk(f, "torch-npu")
    pk = f.get("packages") or {}
    want = matrix.base(tn) or "2.13.0"
    if not torch:
        return CheckResult("fail", "torch is not installed", f"pip install torch=={want} {CPU_INDEX}")
    cuda = pk.get("torch_cuda") or ("+cu" in torch and torch.split("+cu", 1)[1])
    wheels = pk.get("cuda_runtime_wheels") or []
    if cuda or wheels:
        what = f"torch {torch}: a CUDA build" + (f" (CUDA {cuda})" if cuda else f" ({', '.join(wheels)} installed)")
        if tn or npu_hardware(f):
            return CheckResult(
                "fail",
                what + ": torch_npu needs the CPU build (import fails: two accelerators)",
                f"pip install --force-reinstall torch=={matrix.base(torch)} {CPU_INDEX}",
            )
        return CheckResult("ok", what)
    return CheckResult("ok", f"torch {torch} (CPU build)")


@check("torch-npu", "torch_npu installed and matching torch")
def check_torch_npu(f: dict[str, Any]) -> CheckResult:
    """What: torch-npu is installed and its version is torch's (``2.5.1.post1`` goes with torch ``2.5.1``).

    Why: torch_npu is built against one torch release; another torch fails at import (undefined symbols) or pip
    refuses the pair.

    Fix: ``pip install torch-npu==<torch version>`` (a ``.postN`` from the version matrix for your CANN), or install
    the torch that matches the torch-npu you have.
    """
    torch, tn = _pk(f, "torch"), _pk(f, "torch-npu")
    cann_v = (f.get("cann") or {}).get("version")
    sugg = matrix.suggest_torch_npu(torch, cann_v) if torch else []
    pick = sugg[0] if sugg else matrix.base(torch) or "<torch version>"
    if not tn:
        if npu_hardware(f):
            return CheckResult(
                "fail", "torch-npu is not installed, but this host has Ascend NPUs", f"pip install torch-npu=={pick}"
            )
        return CheckResult(
            "skip",
            "torch-npu not installed (no NPU on this host); `ascendify emulate` runs NPU code on the CPU",
            f"on an NPU host: pip install torch-npu=={pick}",
        )
    if torch and matrix.base(tn) != matrix.base(torch):
        return CheckResult(
            "fail",
            f"torch-npu {tn} is built for torch {matrix.base(tn)}, but torch is {torch}",
            f"pip install torch=={matrix.base(tn)} {CPU_INDEX}  (or pip install torch-npu=={pick})",
            {"torch": torch, "torch_npu": tn},
        )
    return CheckResult("ok", f"torch-npu {tn} (matches torch {torch})")


@check("torch-npu-import", "import torch_npu and torch.npu.is_available()")
def check_torch_npu_import(f: dict[str, Any]) -> CheckResult:
    """What: ``import torch_npu`` in a child process (a broken CANN can abort the process that imports it), then
    ``torch.npu.is_available()``, the device count and names, and the CANN version torch_npu reports.

    Why: this is what every NPU program does first; the error it prints names the missing piece.

    Fix: the fix of the known error the import printed (see ``ascendify doctor --explain``), usually
    ``source <CANN>/set_env.sh``.
    """
    p = f.get("torch_npu_probe") or {}
    if not p.get("ran"):
        return CheckResult("skip", f"not run: {p.get('why', 'torch-npu is not installed')}")
    if p.get("timeout"):
        return CheckResult(
            "fail",
            "import torch_npu did not finish in time (hung on device initialisation?)",
            "check `npu-smi info`; a device held by another process or being reset blocks initialisation",
        )
    if not p.get("imported"):
        err = (p.get("error") or "").strip()
        text = err + "\n" + (p.get("stderr_tail") or "")
        fix, ids = _kb_fix(text)
        first = err.splitlines()[0] if err else "failed"
        return CheckResult(
            "fail",
            f"import torch_npu failed: {first[:200]}",
            fix or "run `ascendify doctor --explain` on the full error",
            {"known_errors": ids, "stderr_tail": p.get("stderr_tail")},
        )
    if not p.get("is_available"):
        status = "fail" if npu_hardware(f) else "warn"
        fix = (
            "check the `driver` and `devices` rows; inside a container pass --device /dev/davinciN and the control "
            "nodes; check ASCEND_RT_VISIBLE_DEVICES"
            if status == "fail"
            else "no NPU on this host: torch_npu cannot run here (uninstall it, or use `ascendify emulate`)"
        )
        return CheckResult(status, "torch_npu imported, but torch.npu.is_available() is False", fix)
    names = p.get("devices") or []
    desc = f"{len(names)} device(s): {', '.join(sorted(set(names)))}" if names else "available"
    if p.get("cann_version"):
        desc += f"; CANN {p['cann_version']} (as torch_npu reports it)"
    return CheckResult("ok", f"imported; {desc}", details={"allow_hf32": p.get("allow_hf32")})


@check("cann", "CANN toolkit")
def check_cann(f: dict[str, Any]) -> CheckResult:
    """What: where the CANN toolkit is (``ASCEND_HOME_PATH``, ``ASCEND_TOOLKIT_HOME``, ``ASCEND_HOME``, then the
    default prefixes ``/usr/local/Ascend/ascend-toolkit/latest``, ``/usr/local/Ascend/cann``, ``~/Ascend/...``)
    and its version (``ascend_toolkit_install.info``, ``version.cfg``, ``version.info``).

    Why: torch_npu runs on CANN; its version must match torch_npu's (see the ``matrix`` check).

    Fix: install ``Ascend-cann-toolkit_<version>_linux-<arch>.run --install`` (and the kernels/ops package for
    the chip), then ``source <prefix>/set_env.sh``.
    """
    c = f.get("cann") or {}
    tn = _pk(f, "torch-npu")
    broken = [x for x in c.get("candidates", []) if x["via"].startswith("$") and not x["exists"]]
    if c.get("home"):
        desc = f"CANN {c['version']} at {c['home']} (via {c['found_via']})"
        if broken:
            bad = ", ".join(f"{x['via']}={x['path']}" for x in broken)
            return CheckResult("warn", desc + f"; {bad} does not exist", "unset or correct it: source the set_env.sh of one install")
        return CheckResult("ok", desc, details={"version_file": c.get("version_file")})
    row = matrix.row_for(tn) if tn else None
    need = f"CANN {row['cann']}" if row and row.get("cann") else "the CANN version the matrix lists"
    fix = (
        f"install {need}: ./Ascend-cann-toolkit_<version>_linux-<arch>.run --install, then "
        "source /usr/local/Ascend/ascend-toolkit/set_env.sh"
    )
    if broken:
        bad = ", ".join(f"{x['via']}={x['path']}" for x in broken)
        return CheckResult("fail", f"no CANN toolkit: {bad} does not exist", fix)
    if tn or npu_hardware(f):
        return CheckResult("fail", "no CANN toolkit found (environment variables and default prefixes)", fix)
    return CheckResult("skip", "no CANN toolkit (needed only with a real NPU)", "on an NPU host: " + fix)


def _expected(template: str, home: str, root: str = "/") -> str:
    path = template.format(home=home)
    if not template.startswith("{home}") and root not in ("", "/"):
        path = os.path.join(root, path.lstrip("/"))  # a system path (the driver's), seen under the host's root
    return os.path.normpath(path)


@check("cann-env", "Environment variables set_env.sh sets")
def check_cann_env(f: dict[str, Any]) -> CheckResult:
    """What: the variables CANN's ``set_env.sh`` exports (``ASCEND_TOOLKIT_HOME``, ``ASCEND_HOME_PATH``,
    ``ASCEND_OPP_PATH``, ``ASCEND_AICPU_PATH``, ``TOOLCHAIN_HOME``...) and the ``LD_LIBRARY_PATH`` / ``PYTHONPATH``
    / ``PATH`` entries it adds, compared with the toolkit found.

    Why: without them ``import torch_npu`` fails ("libhccl.so: cannot open shared object file"), and variables left
    from another install mix two CANN versions.

    Fix: ``source <toolkit prefix>/set_env.sh`` in the shell, the job script or ``~/.bashrc``.
    """
    c = f.get("cann") or {}
    home = c.get("home")
    if not home:
        return CheckResult("skip", "no CANN toolkit found")
    env = f.get("env") or {}
    spec = cann_mod.facts()["set_env_vars"]
    missing, wrong, optional = [], [], []
    for v in spec["vars"]:
        val = env.get(v["name"])
        want = _expected(v["value"], home)
        if not val:
            (missing if v["required"] else optional).append(v["name"])
        elif os.path.normpath(os.path.realpath(val)) != os.path.normpath(os.path.realpath(want)):
            wrong.append(f"{v['name']}={val} (expected {want})")
    have_driver = npu_hardware(f) or bool((f.get("driver") or {}).get("version"))
    for e in spec["path_entries"]:
        if e.get("when") == "driver" and not have_driver:
            continue
        entries = [os.path.normpath(x) for x in (env.get(e["var"]) or "").split(":") if x]
        root = (f.get("host") or {}).get("root", "/")
        wants = [_expected(e["entry"], home, root)] + ([_expected(e["alt"], home, root)] if e.get("alt") else [])
        if not any(w in entries for w in wants):
            (missing if e["required"] else optional).append(f"{e['var']} += {wants[0]}")
    script = c.get("set_env") or os.path.join(os.path.dirname(home.rstrip("/")), "set_env.sh")
    details = {"missing": missing, "wrong": wrong, "optional_missing": optional, "set_env": script}
    if missing or wrong:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"wrong {', '.join(wrong)}"] if wrong else [])
        return CheckResult("fail", "; ".join(parts), f"source {script}", details)
    n = len(spec["vars"]) - len(optional)
    extra = f" ({len(optional)} optional not set)" if optional else ""
    return CheckResult("ok", f"set ({n} variables, library path includes {home}/lib64){extra}", details=details)


@check("libraries", "Shared libraries torch_npu needs")
def check_libraries(f: dict[str, Any]) -> CheckResult:
    """What: the CANN and driver libraries ``libtorch_npu.so`` links against (``libascendcl.so``, ``libhccl.so``,
    ``libacl_op_compiler.so``, ``libge_runner.so``, ``libgraph.so``, ``libacl_tdt_channel.so``; the driver's
    ``libascend_hal.so``), looked up on ``LD_LIBRARY_PATH`` the way the loader will.

    Why: a library missing from the path is the most common ``import torch_npu`` failure.

    Fix: ``source <CANN>/set_env.sh`` (toolkit libraries) and add ``/usr/local/Ascend/driver/lib64/driver`` and
    ``.../common`` to ``LD_LIBRARY_PATH`` (driver libraries); install what is absent.
    """
    libs = (f.get("libraries") or {}).get("libs") or []
    c = f.get("cann") or {}
    if not c.get("home") and not _pk(f, "torch-npu") and not npu_hardware(f):
        return CheckResult("skip", "no CANN and no torch-npu: nothing loads these libraries here")
    hw = npu_hardware(f)
    off_path, absent, ok, opt_missing = [], [], [], []
    for lib in libs:
        if lib["on_library_path"]:
            ok.append(lib["name"])
        elif lib["optional"]:
            opt_missing.append(lib["name"])
        elif lib["where"] == "driver" and not hw:
            continue
        elif lib["installed_at"]:
            off_path.append(lib["name"])
        else:
            absent.append(lib["name"])
    details = {"on_path": ok, "not_on_path": off_path, "absent": absent, "optional_missing": opt_missing}
    if off_path or absent:
        parts = []
        if off_path:
            parts.append(f"installed but not on LD_LIBRARY_PATH: {', '.join(off_path)}")
        if absent:
            parts.append(f"not found: {', '.join(absent)}")
        script = c.get("set_env") or "/usr/local/Ascend/ascend-toolkit/set_env.sh"
        fix = f"source {script}"
        if any(n == "libascend_hal.so" for n in off_path + absent):
            fix += "; export LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:$LD_LIBRARY_PATH"
        if absent and not c.get("home"):
            fix = "install the CANN toolkit, then " + fix
        return CheckResult("fail", "; ".join(parts), fix, details)
    note = f" (optional, absent: {', '.join(opt_missing)})" if opt_missing else ""
    return CheckResult("ok", f"{len(ok)} found on LD_LIBRARY_PATH{note}", details=details)


@check("driver", "NPU driver and npu-smi")
def check_driver(f: dict[str, Any]) -> CheckResult:
    """What: ``npu-smi info`` runs (10 s timeout) and lists devices; the driver version
    (``/usr/local/Ascend/driver/version.info``); the device nodes ``/dev/davinciN`` and the control nodes
    ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc``.

    Why: without the driver (or, in a container, without these nodes and the npu-smi/dcmi mounts) no NPU program
    sees a device.

    Fix: install ``Ascend-hdk-<chip>-npu-driver_<version>_linux-<arch>.run --full``; start containers with
    ``--device /dev/davinciN --device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc``.
    """
    d = f.get("driver") or {}
    smi = d.get("npu_smi")
    nodes = d.get("device_nodes") or []
    if smi is None and not nodes:
        if _pk(f, "torch-npu"):
            return CheckResult(
                "warn",
                "torch-npu is installed but this host has no Ascend driver (no npu-smi, no /dev/davinci*)",
                "on a CPU-only host torch_npu cannot run: pip uninstall torch-npu, or use `ascendify emulate`",
            )
        return CheckResult("skip", "no Ascend driver or NPU on this host (no npu-smi, no /dev/davinci*)")
    ver = d.get("version")
    if smi is None:
        return CheckResult(
            "warn",
            f"device nodes {', '.join(nodes)} but no npu-smi on PATH" + (f" (driver {ver})" if ver else ""),
            "add the driver tools to PATH (containers: -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi "
            "-v /usr/local/dcmi:/usr/local/dcmi)",
        )
    if smi.get("timeout"):
        return CheckResult(
            "fail",
            "npu-smi info did not answer within its timeout",
            "check the driver (dmesg | grep -i -E 'davinci|npu'); a device stuck in reset needs `npu-smi set -t reset` or a reboot",
        )
    if smi.get("rc") != 0:
        out = (smi.get("output") or "").strip()
        last = out.splitlines()[-1] if out else f"exit code {smi.get('rc')}"
        fix, ids = _kb_fix(out)
        return CheckResult(
            "fail",
            f"npu-smi info failed: {last[:160]}",
            fix or "reinstall the driver matching the firmware; check dmesg",
            {"known_errors": ids, "output": out[-2000:]},
        )
    missing_ctl = [n for n, there in (d.get("control_nodes") or {}).items() if not there]
    desc = f"driver {ver or '?'} (npu-smi {smi.get('version') or '?'}), {len(nodes)} device node(s)"
    if missing_ctl:
        return CheckResult(
            "warn",
            desc + f"; missing {', '.join('/dev/' + n for n in missing_ctl)}",
            " ".join(f"--device /dev/{n}" for n in missing_ctl) + " (when starting the container)",
        )
    return CheckResult("ok", desc)


def _visible(env: dict[str, Any]) -> list[int] | None:
    raw = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return None
    try:
        return [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        return [-1]


@check("devices", "NPUs: names, health, visible devices")
def check_devices(f: dict[str, Any]) -> CheckResult:
    """What: the NPUs ``npu-smi info`` lists (chip name, health, memory) and ``ASCEND_RT_VISIBLE_DEVICES``.

    Why: a device whose health is not OK fails or slows jobs; ``ASCEND_RT_VISIBLE_DEVICES`` naming devices that do
    not exist (or not in ascending order) makes torch_npu see none. ``CUDA_VISIBLE_DEVICES`` has no effect on NPUs.

    Fix: drain a device in Warning/Alarm state (``npu-smi info -t health -i <id>`` says why); set
    ``ASCEND_RT_VISIBLE_DEVICES`` to existing ids in ascending order.
    """
    smi = (f.get("driver") or {}).get("npu_smi")
    if not smi or smi.get("rc") != 0:
        return CheckResult("skip", "npu-smi not available" if not smi else "npu-smi failed (see driver)")
    devs = smi.get("devices") or []
    if not devs:
        return CheckResult("fail", "npu-smi lists no device", "check the driver and firmware installation (npu-smi info -l)")
    names = sorted({d["name"] for d in devs})
    mem = {d.get("memory_total_mb") for d in devs if d.get("memory_total_mb")}
    desc = f"{len(devs)} x {'/'.join(names)}" + (f" ({max(mem) // 1024} GB each)" if mem else "")
    bad = [d for d in devs if d.get("health") not in ("OK", "NA")]
    vis = _visible(f.get("env") or {})
    problems, status, fixes = [], "ok", []
    for d in bad:
        sev = "warn" if d["health"] == "Warning" else "fail"
        status = "fail" if sev == "fail" or status == "fail" else "warn"
        problems.append(f"NPU {d['npu']} chip {d['chip']} health {d['health']}")
        fixes.append(f"npu-smi info -t health -i {d['npu']}")
    if vis is not None:
        if -1 in vis or any(v >= len(devs) or v < 0 for v in vis):
            status = "fail"
            problems.append(f"ASCEND_RT_VISIBLE_DEVICES={(f.get('env') or {}).get('ASCEND_RT_VISIBLE_DEVICES')} names devices beyond 0..{len(devs) - 1}")
            fixes.append(f"export ASCEND_RT_VISIBLE_DEVICES={','.join(str(i) for i in range(len(devs)))}")
        elif vis != sorted(vis):
            status = "fail" if status == "fail" else "warn"
            problems.append("ASCEND_RT_VISIBLE_DEVICES ids are not ascending")
            fixes.append(f"export ASCEND_RT_VISIBLE_DEVICES={','.join(str(i) for i in sorted(vis))}")
    if problems:
        return CheckResult(status, desc + "; " + "; ".join(problems), "; ".join(fixes), {"devices": devs})
    return CheckResult("ok", desc + ", health OK", details={"devices": devs})


@check("busy", "NPUs in use by other processes")
def check_busy(f: dict[str, Any]) -> CheckResult:
    """What: the process table of ``npu-smi info`` (who holds which NPU and how much memory), devices whose memory
    is nearly full without a listed process (another container), and npu-smi's "device is used" errors.

    Why: one training process per device: a second process on a busy NPU fails ("The resources are busy", EL0005)
    or runs out of memory.

    Fix: stop the other process, or pick a free device with ``ASCEND_RT_VISIBLE_DEVICES``.
    """
    smi = (f.get("driver") or {}).get("npu_smi")
    if not smi:
        return CheckResult("skip", "npu-smi not available")
    if smi.get("rc") != 0:
        out = smi.get("output") or ""
        fix, ids = _kb_fix(out)
        if any(i in ("npu-smi-dcmi-busy", "resource-busy") for i in ids):
            return CheckResult("fail", "the device is held by another container or process (npu-smi: dcmi)", fix, {"known_errors": ids})
        return CheckResult("skip", "npu-smi failed (see driver)")
    procs = smi.get("processes") or []
    devs = smi.get("devices") or []
    held = {p["npu"] for p in procs}
    full = [
        d for d in devs
        if d["npu"] not in held and d.get("memory_total_mb") and d.get("memory_used_mb", 0) > 0.5 * d["memory_total_mb"]
    ]
    if not procs and not full:
        return CheckResult("ok", f"no process on {len(devs)} NPU(s)")
    parts = [f"NPU {p['npu']}: pid {p['pid']} ({p['name']}, {p['memory_mb']:.0f} MB)" for p in procs if p.get("memory_mb") is not None]
    parts += [f"NPU {p['npu']}: pid {p['pid']} ({p['name']})" for p in procs if p.get("memory_mb") is None]
    parts += [f"NPU {d['npu']}: {d['memory_used_mb']} of {d['memory_total_mb']} MB used, no process listed (another container?)" for d in full]
    free = [d["npu"] for d in devs if d["npu"] not in held and d not in full]
    fix = "stop the process holding the device" + (f", or use a free one: export ASCEND_RT_VISIBLE_DEVICES={','.join(map(str, sorted(set(free))))}" if free else "")
    return CheckResult("warn", "; ".join(parts), fix, {"processes": procs})


@check("matrix", "Version matrix: torch_npu, torch, CANN, Python")
def check_matrix(f: dict[str, Any]) -> CheckResult:
    """What: the installed torch-npu, torch, CANN and Python against the compatibility matrix
    (``data/compat_matrix.json``, from Ascend/pytorch's table and the PyPI wheel tags).

    Why: each torch-npu release is built for one torch and one CANN; other pairs fail at import or at the first op
    (undefined symbols, "does not has any binary").

    Fix: install the listed combination: the torch-npu ``.postN`` built for your CANN, or the CANN your torch-npu
    names.
    """
    v = matrix.verdict(
        _pk(f, "torch"),
        _pk(f, "torch-npu"),
        (f.get("cann") or {}).get("version"),
        (f.get("python") or {}).get("version"),
    )
    return CheckResult(v["status"], v["found"], v["fix"], {"row": v["row"], "problems": v["problems"]})


@check("launch-blocking", "Synchronous kernel launches (ASCEND_LAUNCH_BLOCKING)")
def check_launch_blocking(f: dict[str, Any]) -> CheckResult:
    """What: whether ``ASCEND_LAUNCH_BLOCKING=1`` is set.

    Why: it makes every kernel launch on an NPU synchronous (the host waits for each operator), which locates the
    operator behind an asynchronous error but slows training down: a setting for debugging only.

    Fix: ``unset ASCEND_LAUNCH_BLOCKING`` (or set it to 0) outside a debugging session.
    """
    value = (f.get("env") or {}).get("ASCEND_LAUNCH_BLOCKING")
    if (value or "").strip() == "1":
        return CheckResult("warn", "ASCEND_LAUNCH_BLOCKING=1: every kernel launch waits for the NPU (debugging only)",
                           "unset ASCEND_LAUNCH_BLOCKING (or set it to 0) unless you are debugging")
    return CheckResult("ok", "kernel launches are asynchronous" + (f" (ASCEND_LAUNCH_BLOCKING={value})" if value else ""))


@check("cuda", "NVIDIA GPUs")
def check_cuda(f: dict[str, Any]) -> CheckResult:
    """What: NVIDIA GPUs ``nvidia-smi -L`` lists (the doctor can compare them with the NPU in device checks).

    Why: information only: CUDA code runs on NPUs through ``ascendify migrate`` or ``ascendify run``.

    Fix: none needed.
    """
    c = f.get("cuda") or {}
    gpus = c.get("gpus") or []
    if not c.get("nvidia_smi"):
        return CheckResult("skip", "no nvidia-smi (no NVIDIA GPU)")
    if not gpus:
        return CheckResult("skip", "nvidia-smi lists no GPU")
    names = sorted({re.sub(r"^GPU \d+:\s*|\s*\(UUID.*$", "", g) for g in gpus})
    return CheckResult("ok", f"{len(gpus)} x {', '.join(names)}")


def verified_torch() -> tuple[str, ...]:
    """The torch versions the emulator was verified with, read from its source without importing torch."""
    import ascendify

    base = os.path.join(os.path.dirname(ascendify.__file__), "emulator")
    # read as text: find_spec("ascendify.emulator...") would import ascendify.emulator, and torch with it
    for src in (os.path.join(base, "device", "backend.py"), os.path.join(base, "backend.py")):
        try:
            tree = ast.parse(open(src, encoding="utf-8").read())
        except (OSError, SyntaxError):
            continue
        found = _verified_in(tree)
        if found:
            return found
    return ()


def _verified_in(tree: ast.Module) -> tuple[str, ...]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "VERIFIED_TORCH" for t in node.targets):
            try:
                return tuple(ast.literal_eval(node.value))
            except ValueError:
                return ()
    return ()


@check("emulator", "The emulated npu device")
def check_emulator(f: dict[str, Any]) -> CheckResult:
    """What: whether ``ascendify emulate`` (the emulated ``npu`` device on the CPU) can run here: no real torch-npu,
    a torch version the emulator was verified with.

    Why: without an NPU, the emulator is how NPU code is tested (it fails where a real NPU would).

    Fix: install the CPU build of a verified torch, or set ``ASCENDIFY_EMULATE_UNVERIFIED_TORCH=1`` to try anyway.
    """
    torch, tn = _pk(f, "torch"), _pk(f, "torch-npu")
    if tn:
        return CheckResult("skip", "a real torch-npu is installed: the emulator stands aside (it never replaces hardware)")
    if not torch:
        return CheckResult("skip", "torch is not installed")
    ok = verified_torch()
    if matrix.base(torch) in ok:
        return CheckResult("ok", f"available for torch {torch}: `ascendify emulate -- python train.py`")
    if (f.get("env") or {}).get("ASCENDIFY_EMULATE_UNVERIFIED_TORCH") == "1":
        return CheckResult("warn", f"torch {torch} is not verified ({', '.join(ok)}); trying anyway as asked")
    return CheckResult(
        "warn",
        f"torch {torch} is not a version the emulator was verified with ({', '.join(ok) or '?'})",
        f"pip install torch=={ok[0] if ok else '2.13.0'} {CPU_INDEX}, or ASCENDIFY_EMULATE_UNVERIFIED_TORCH=1",
    )
