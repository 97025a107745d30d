"""One name per role (the convention is in README.md, "Layout"): a verb's front-end is ``commands/<verb>.py``, its
driver ``<package>/runner.py`` and its presenter ``<package>/render.py`` (``<verb>_runner.py`` /
``<verb>_render.py`` in a package behind two verbs); ``model.py`` is a data model, never a network."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "ascendify"
CAPABILITIES = ("advise", "auto", "bench", "doctor", "emulator", "migrate", "port", "precision", "train")

# verb -> its driver, and its presenter where it has one
DRIVERS = {
    "advise": "advise/runner.py",
    "bench": "bench/runner.py",
    "doctor": "doctor/runner.py",
    "dump": "precision/dump_runner.py",
    "emulate": "emulator/runner.py",
    "migrate": "migrate/runner.py",
    "port": "port/runner.py",
    "run": "auto/runner.py",
    "train": "train/runner.py",
}
PRESENTERS = {
    "advise": "advise/render.py",
    "bench": "bench/render.py",
    "compare": "precision/compare_render.py",
    "doctor": "doctor/render.py",
    "emulate": "emulator/render.py",
    "migrate": "migrate/render.py",
    "port": "port/render.py",
    "run": "auto/render.py",
}
# the names these roles had before: a driver called cli/launch/run_X, a presenter called output/summary/report
RETIRED = {"cli", "launch", "output", "summary", "report"}


def _imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


@pytest.mark.parametrize("verb", sorted(DRIVERS))
def test_each_verb_front_end_calls_its_runner(verb):
    driver = DRIVERS[verb]
    assert (PKG / driver).is_file(), driver
    module = "ascendify." + driver.removesuffix(".py").replace("/", ".")
    face = module.rpartition(".")[0]  # a package face that hands the runner's names on counts too
    imported = _imported(PKG / "commands" / f"{verb}.py")
    assert module in imported or (face in imported and module in _imported(PKG / driver.split("/")[0] /
                                                                           "__init__.py")), (verb, module)


def test_each_presenter_is_named_render():
    missing = [p for p in PRESENTERS.values() if not (PKG / p).is_file()]
    assert not missing, missing


def test_no_capability_module_keeps_a_retired_name():
    bad = []
    for pkg in CAPABILITIES:
        for path in (PKG / pkg).rglob("*.py"):
            stem = path.stem
            if stem in RETIRED or stem.startswith("run_") or stem.endswith("_report"):
                bad.append(str(path.relative_to(PKG)))
    assert not bad, f"driver: runner.py, presenter: render.py; found {bad}"


def test_model_modules_are_data_models_not_networks():
    for path in PKG.rglob("model.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nets = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                and any(ast.unparse(b).endswith("Module") for b in n.bases)]
        nn_imports = {m for m in _imported(path) if m.startswith("torch.nn")}
        assert not nets and not nn_imports, f"{path.relative_to(PKG)}: {nets or nn_imports}: a network is network.py"
