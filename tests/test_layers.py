"""The package's layers: no import circle between its modules (lazy imports inside functions included), and
the few edges the architecture forbids."""

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "ascendify"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_of(p): p for p in PKG.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its text: ``import a.b``, ``from a import b``
    (b a module or a name), relative imports, and ``importlib.import_module("a.b")`` with a literal."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def add(target: str) -> None:
        while target and target not in known:  # "a.b.func" -> "a.b"
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) ==
              "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            add(node.args[0].value)
    return out


@functools.cache  # read once per session: every test below reads the same tree
def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_scanner_sees_lazy_relative_and_by_name_imports(tmp_path):
    known = {"p", "p.a", "p.b", "p.c", "p.d"}
    f = tmp_path / "a.py"
    f.write_text("def f():\n    from . import b\n    from .c import x\n    importlib.import_module('p.d')\n")
    assert _imports("p.a", f, known) == {"p.b", "p.c", "p.d"}
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize("low, high", [
    ("ascendify.core.devices", "ascendify.emulator"),  # detection probes, below everything that decides
    ("ascendify.emulator", "ascendify.auto"),     # auto turns the emulator on; transfer_to_npu is a provider
    ("ascendify.emulator", "ascendify.device.placement"),
    ("ascendify.report", "ascendify.precision"),  # the reporting layer knows no verb
    ("ascendify.report", "ascendify.bench"),
])
def test_lower_layers_do_not_import_higher_ones(low, high):
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m == low or m.startswith(low + ".")
                 for t in ts if t == high or t.startswith(high + "."))
    assert not bad, bad


@pytest.mark.parametrize("layer, allowed", [
    ("ascendify.core", ("ascendify.core",)),  # the shared layers stand on nothing of ascendify's
    ("ascendify.workloads", ("ascendify.core", "ascendify.workloads")),
    ("ascendify.device", ("ascendify.core", "ascendify.device", "ascendify.emulator")),
    ("ascendify.program", ("ascendify.core", "ascendify.program")),  # port watches a run through a hook
])
def test_shared_layers_stand_on_lower_ones_only(layer, allowed):
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m == layer or m.startswith(layer + ".")
                 for t in ts if t.startswith("ascendify") and t != "ascendify"
                 and not any(t == a or t.startswith(a + ".") for a in allowed))
    assert not bad, bad


def test_the_top_level_holds_only_the_cli_and_the_shared_layers():
    import ascendify

    top = {p.name for p in Path(ascendify.__file__).parent.iterdir() if p.suffix == ".py"}
    assert top <= {"__init__.py", "__main__.py", "cli.py", "pytest_plugin.py", "_emulate_hook.py"}, top


# The emulator's layers, from the ground up: a module may import only its own unit (a folder or file directly
# under ascendify/emulator/) and the units of lower layers. ``device/`` is the base the kernels stand on;
# ``install`` alone knows device/, ops/ and api/ together.
EMULATOR_LAYERS = (
    ("errors", "settings", "reporting"),
    ("memory",),
    ("runtime",),
    ("device",),
    ("ops", "compile"),
    ("distributed", "render"),
    ("fused",),
    ("api",),
    ("install",),
    ("",),  # the package's face, ascendify.emulator itself: enable(), report()
    ("runner",),
)


def test_emulator_layers_import_only_downwards():
    graph = _graph()
    rank = {unit: i for i, layer in enumerate(EMULATOR_LAYERS) for unit in layer}
    base = "ascendify.emulator"

    def unit(module: str) -> str:
        return module[len(base) + 1:].split(".")[0] if module != base else ""

    units = {unit(m) for m in graph if m == base or m.startswith(base + ".")}
    assert units <= set(rank), f"put these in EMULATOR_LAYERS: {sorted(units - set(rank))}"
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m == base or m.startswith(base + ".")
                 for t in ts if (t == base or t.startswith(base + ".")) and unit(t) != unit(m)
                 and rank[unit(t)] >= rank[unit(m)])
    assert not bad, bad
