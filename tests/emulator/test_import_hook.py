"""``ASCENDIFY_EMULATE=npu python train.py``: the ascendify_emulate.pth hook makes ``import torch_npu`` load the
emulator with no code change, and costs nothing when the variable is unset."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from ascendify import _emulate_hook

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """\
import torch
import torch_npu
from torch_npu.contrib import transfer_to_npu  # noqa: F401  (the shim's automatic migration)
x = torch.arange(6, dtype=torch.float32, device="npu").reshape(2, 3)
y = (x @ x.T).relu()
print("RESULT", y.device.type, y.sum().item(), torch.npu.is_available(), torch_npu.__name__)
"""

PROBE = """\
import sys
print("FINDER", any(type(f).__name__ == "EmulatedTorchNpuFinder" for f in sys.meta_path))
print("MODULES", "torch" in sys.modules, "ascendify._emulate_hook" in sys.modules, "ascendify" in sys.modules)
try:
    import torch_npu
    print("TORCH_NPU", torch_npu.__name__)
except ModuleNotFoundError as e:
    print("TORCH_NPU missing:", e.name)
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCENDIFY_", "TORCH_NPU_"))}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _run(code: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(**env), capture_output=True,
                          text=True, timeout=240)


def _installed_pth() -> Path | None:
    for folder in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}:
        p = Path(folder) / "ascendify_emulate.pth"
        if p.is_file():
            return p
    return None


def test_the_installed_environment_has_the_pth_hook():
    pth = _installed_pth()
    assert pth is not None, "ascendify_emulate.pth is not in site-packages: reinstall with pip install -e ."
    line = pth.read_text().strip()
    assert line.startswith("import os;") and "ascendify._emulate_hook" in line and "ASCENDIFY_EMULATE" in line
    tree = ast.parse((REPO / "setup.py").read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PTH_LINE"]
    assert line == ast.literal_eval(value).strip()  # the installed hook is the current one


def test_import_torch_npu_with_no_code_change(tmp_path):
    r = _run(SCRIPT, tmp_path, ASCENDIFY_EMULATE="npu")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RESULT npu 83.0 True torch_npu" in r.stdout  # x @ x.T = [[5, 14], [14, 50]]


def test_without_the_variable_nothing_is_imported_and_torch_npu_is_missing(tmp_path):
    r = _run(PROBE, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "FINDER False" in r.stdout
    assert "MODULES False False False" in r.stdout  # no torch, not even ascendify, at interpreter start
    assert "TORCH_NPU missing: torch_npu" in r.stdout


def test_with_the_variable_the_hook_is_torch_free_until_torch_npu_is_imported(tmp_path):
    r = _run(PROBE.split("try:")[0], tmp_path, ASCENDIFY_EMULATE="npu")
    assert "FINDER True" in r.stdout and "MODULES False True True" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("env", [{"ASCENDIFY_EMULATE": "npu", "ASCENDIFY_EMULATE_HOOK": "0"},
                                 {"ASCENDIFY_EMULATE": "cpu"}])
def test_hook_can_be_turned_off(tmp_path, env):
    r = _run(PROBE.split("try:")[0], tmp_path, **env)
    assert "FINDER False" in r.stdout and "MODULES False" in r.stdout, r.stdout + r.stderr


def test_install_is_idempotent_and_the_finder_ignores_other_modules(monkeypatch):
    monkeypatch.setenv("ASCENDIFY_EMULATE", "npu")
    monkeypatch.delenv("ASCENDIFY_EMULATE_HOOK", raising=False)
    before = list(sys.meta_path)
    try:
        assert _emulate_hook.install() and _emulate_hook.install()
        added = [f for f in sys.meta_path if isinstance(f, _emulate_hook.EmulatedTorchNpuFinder)]
        assert len(added) == 1 and sys.meta_path[-1] is added[0]
        assert added[0].find_spec("torch_npu_utils") is None and added[0].find_spec("json") is None
    finally:
        sys.meta_path[:] = before
    monkeypatch.setenv("ASCENDIFY_EMULATE", "")
    assert not _emulate_hook.install() and not _emulate_hook.wanted()


@pytest.mark.slow
def test_a_wheel_built_from_the_tree_carries_the_pth(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "src" / "ascendify", src / "src" / "ascendify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path / "dist")], cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = (tmp_path / "dist").glob("ascendify-*.whl")
    with zipfile.ZipFile(whl) as z:
        assert "ascendify_emulate.pth" in z.namelist()  # at the root: pip puts it in site-packages
        assert "ascendify._emulate_hook" in z.read("ascendify_emulate.pth").decode()
        assert "ascendify/_emulate_hook.py" in z.namelist()
        (eps,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        assert "[torch.backends]\nascendify_emulate = ascendify._emulate_hook:autoload" in z.read(eps).decode()
        (entry_points,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        assert "[pytest11]\nascendify = ascendify.pytest_plugin" in z.read(entry_points).decode()


AUTOLOAD_SCRIPT = """\
import sys
import torch
print("ENABLED", "ascendify.emulator" in sys.modules and sys.modules["ascendify.emulator"].is_enabled())
if torch.npu.is_available() if hasattr(torch, "npu") else False:
    x = torch.ones(2, device="npu", requires_grad=True)
    (x * 3).sum().backward()
    print("RESULT", x.device, x.grad.tolist(), sys.modules["torch_npu"].__name__)
"""


def _torch_backends_entry_point(tmp_path: Path) -> Path:
    """A throwaway distribution on PYTHONPATH declaring pyproject.toml's ``torch.backends`` entry points, as
    ``pip install`` of the package does (the shared test environment may predate them)."""
    import tomllib

    group = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["torch.backends"]
    info = tmp_path / "site" / "ascendify_autoload_check-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ascendify-autoload-check\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[torch.backends]\n" + "".join(f"{k} = {v}\n" for k, v in group.items()))
    return info.parent


@pytest.mark.parametrize("variable", ["npu", ""])
def test_import_torch_alone_brings_up_the_emulator(tmp_path, variable):
    """Real torch_npu loads itself on ``import torch`` (torch's device-backend autoload); so does the emulator
    with ASCENDIFY_EMULATE=npu, through the ``torch.backends`` entry point, and nothing happens without it."""
    site = _torch_backends_entry_point(tmp_path)
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    r = _run(AUTOLOAD_SCRIPT, tmp_path, ASCENDIFY_EMULATE=variable, PYTHONPATH=path)
    assert r.returncode == 0, r.stderr[-3000:]
    if variable:
        assert "ENABLED True" in r.stdout and "RESULT npu:0 [3.0, 3.0] torch_npu" in r.stdout, r.stdout
    else:
        assert "ENABLED False" in r.stdout and "RESULT" not in r.stdout, r.stdout


@pytest.mark.parametrize("value", ["1", "NPU1"])
def test_a_value_that_means_neither_on_nor_off_is_said_once(tmp_path, value):
    # "1" or a typo was ignored without a word: the program then ran with no emulated npu and the user did not know
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'])\n"
    r = _run(PROBE.split("try:")[0] + child, tmp_path, ASCENDIFY_EMULATE=value)
    assert r.returncode == 0 and "FINDER False" in r.stdout
    assert r.stderr.count(f"ascendify: ASCENDIFY_EMULATE={value!r} is not understood: the emulated npu is NOT "
                          "enabled") == 1, r.stderr  # once, not again in the child process
    assert "set ASCENDIFY_EMULATE=npu to enable it" in r.stderr
    for ok in ("npu", "0", "cpu"):
        assert "not understood" not in _run("pass\n", tmp_path, ASCENDIFY_EMULATE=ok).stderr
