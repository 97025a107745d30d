"""Fake Ascend hosts for the doctor's tests: a CANN install tree, a driver with device nodes, npu-smi executables.

Everything is written under a temporary root; :func:`host` builds the :class:`ascendify.doctor.Host` that sees it.
The CANN tree has the real layout (``<prefix>/ascend-toolkit/<version>/<arch>-linux/ascend_toolkit_install.info``,
``lib64/*.so``, ``opp``, a ``latest`` link and ``set_env.sh`` beside it); the files are empty stand-ins.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from ascendify.doctor import probe
from ascendify.doctor.probe import Host

FIXTURES = Path(__file__).parent / "fixtures"
ARCH = "x86_64"
TOOLKIT_LIBS = ("libascendcl.so", "libhccl.so", "libacl_op_compiler.so", "libge_runner.so", "libgraph.so",
                "libacl_tdt_channel.so")


def make_cann(root: Path, version: str = "9.1.0", *, missing: tuple[str, ...] = (), layout: str = "toolkit") -> Path:
    """A toolkit under ``root/usr/local/Ascend``; returns its home (the ``latest`` folder)."""
    base = root / "usr/local/Ascend"
    if layout == "toolkit":
        prefix = base / "ascend-toolkit"
        real = prefix / version
        home = prefix / "latest"
    else:  # CANN 8.5+: <prefix>/cann-<version> with a 'cann' link
        prefix = base
        real = base / f"cann-{version}"
        home = base / "cann"
    (real / f"{ARCH}-linux").mkdir(parents=True)
    (real / f"{ARCH}-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\n"
        f"version={version}\n"
        "innerversion=V100R001C25SPC001B100\n"
        f"arch={ARCH}\nos=linux\npath={real}/{ARCH}-linux\n"
    )
    (real / "lib64").mkdir()
    for lib in TOOLKIT_LIBS:
        if lib not in missing:
            (real / "lib64" / lib).write_bytes(b"")
    for d in ("opp", "toolkit", "tools", "python/site-packages", "bin"):
        (real / d).mkdir(parents=True, exist_ok=True)
    home.symlink_to(real.name if layout == "toolkit" else real.name)
    script = (prefix if layout == "toolkit" else home) / "set_env.sh"
    if layout == "toolkit":
        script.write_text(f"export ASCEND_TOOLKIT_HOME={home}\n")
    else:
        (real / "set_env.sh").write_text(f"export ASCEND_TOOLKIT_HOME={home}\n")
    return home


def set_env(home: Path, root: Path, driver: bool = True) -> dict[str, str]:
    """The variables ``source set_env.sh`` leaves in the environment (and the driver's library folders)."""
    h = str(home)
    ld = [f"{h}/lib64", f"{h}/lib64/plugin/opskernel", f"{h}/lib64/plugin/nnengine"]
    if driver:
        ld += [str(root / "usr/local/Ascend/driver/lib64/driver"), str(root / "usr/local/Ascend/driver/lib64/common")]
    return {
        "ASCEND_TOOLKIT_HOME": h,
        "ASCEND_HOME_PATH": h,
        "ASCEND_OPP_PATH": f"{h}/opp",
        "ASCEND_AICPU_PATH": h,
        "TOOLCHAIN_HOME": f"{h}/toolkit",
        "ASCEND_AUTOML_PATH": f"{h}/tools",
        "LD_LIBRARY_PATH": ":".join(ld),
        "PYTHONPATH": f"{h}/python/site-packages",
    }


def make_driver(root: Path, devices: int = 2, version: str = "24.1.rc3", hal: bool = True, control: bool = True) -> None:
    drv = root / "usr/local/Ascend/driver"
    (drv / "lib64/driver").mkdir(parents=True)
    (drv / "lib64/common").mkdir(parents=True)
    if hal:
        (drv / "lib64/driver/libascend_hal.so").write_bytes(b"")
    (drv / "version.info").write_text(f"Version={version}\nascendhal_version=7.35.23\n")
    dev = root / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(devices):
        (dev / f"davinci{i}").write_text("")
    if control:
        for n in ("davinci_manager", "devmm_svm", "hisi_hdc"):
            (dev / n).write_text("")


def make_npu_smi(bindir: Path, *, fixture: str | None = None, text: str | None = None, rc: int = 0,
                 sleep: float = 0) -> Path:
    """An executable ``npu-smi`` that prints a fixture (or ``text``), optionally sleeps, and exits with ``rc``."""
    bindir.mkdir(parents=True, exist_ok=True)
    out = bindir / "npu-smi.out"
    out.write_text(text if text is not None else (FIXTURES / "npu_smi" / fixture).read_text())
    exe = bindir / "npu-smi"
    lines = ["#!/bin/sh"]  # absolute tool paths: the doctor runs npu-smi with the host's own PATH
    if sleep:
        lines.append(f"exec {shutil.which('sleep')} {sleep}")
    lines += [f"{shutil.which('cat')} '{out}'", f"exit {rc}"]
    exe.write_text("\n".join(lines) + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def dists(**versions: str | None):
    """A ``dist_version`` function: ``dists(torch="2.12.0", torch_npu="2.12.0")`` (underscores become dashes)."""
    table = {k.replace("_", "-"): v for k, v in versions.items()}
    return lambda name: table.get(name)


def host(root: Path, env: dict[str, str], *, bindir: Path | None = None, dist_version=None, probe_result=None,
         timeout_cap: float | None = None) -> Host:
    """A Host over ``root``; ``probe_result`` (a dict) is what the ``import torch_npu`` child process answers."""
    environ = dict(env)
    environ["PATH"] = str(bindir) if bindir else str(root / "no-bin")

    def run(argv, timeout, env=None):
        if probe_result is not None and argv[1:2] == ["-c"] and "ASCENDIFY_PROBE" in argv[2]:
            return {"rc": 0, "stdout": "ASCENDIFY_PROBE " + json.dumps(probe_result) + "\n", "stderr": ""}
        return probe._run(argv, min(timeout, timeout_cap) if timeout_cap else timeout, env)

    return Host(
        environ=environ,
        root=str(root),
        home_dir=str(root / "home/user"),
        arch=ARCH,
        dist_version=dist_version or dists(torch="2.13.0"),
        run=run,
    )


def good_host(tmp_path: Path, *, torch: str = "2.12.0", torch_npu: str = "2.12.0", cann: str = "9.1.0",
              smi: str = "910b3_idle.txt", **kw) -> Host:
    """A healthy 910B host: CANN, driver, npu-smi, set_env.sh sourced, torch_npu importing with 2 devices."""
    home = make_cann(tmp_path, cann)
    make_driver(tmp_path)
    bindir = tmp_path / "bin"
    make_npu_smi(bindir, fixture=smi)
    env = set_env(home, tmp_path)
    env.update(kw.pop("env", {}))
    probe_result = kw.pop("probe_result", {
        "imported": True, "torch": torch, "torch_npu": torch_npu, "cann_version": cann,
        "is_available": True, "device_count": 2, "devices": ["Ascend910B3", "Ascend910B3"],
        "allow_hf32": {"matmul": False, "conv": True},
    })
    return host(tmp_path, env, bindir=bindir, dist_version=dists(torch=torch, torch_npu=torch_npu),
                probe_result=probe_result, **kw)


def statuses(report: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in report["checks"]}


def row(report: dict, cid: str) -> dict:
    return next(r for r in report["checks"] if r["id"] == cid)


__all__ = ["good_host", "host", "make_cann", "make_driver", "make_npu_smi", "row", "set_env", "statuses", "os"]
