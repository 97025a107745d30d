"""The guides name only what exists: every source path, module, test, benchmark and tool that docs/*.md and
README.md name is checked here, so a rename that forgets the docs fails (the docs index is in docs/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]

# a path in the repository: src/ascendify/..., ascendify/... (short for src/ascendify/...), tests/, benchmarks/,
# tools/, scripts/, examples/; a test may carry ::name
PATH = re.compile(r"(?<![\w./-])((?:src/)?ascendify/[\w./-]*\w|(?:tests|benchmarks|tools|scripts|examples)/[\w./-]*\w)"
                  r"(?:::(\w+))?")
# a dotted module (with attributes after it): ascendify.emulator.ops.table, ascendify.doctor.Host
MODULE = re.compile(r"(?<![\w.])ascendify(?:\.\w+)+(?![\w/-])")
# dotted names that are not modules: entry-point groups and schema ids (ascendify.migrate.report/1)
NOT_MODULES = {"ascendify.torch_npu_shim"}
# paths that exist in a built wheel only (setup.py copies examples/cuda_project there)
WHEEL_ONLY = {"ascendify/_examples/cuda_project"}


def _spans(text: str, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    return list(pattern.finditer(text))


def _path(name: str) -> Path:
    return REPO / name if not name.startswith("ascendify/") else SRC / name


def _module_file(dotted: str) -> tuple[Path | None, list[str]]:
    """The file of the longest importable prefix of ``dotted`` and the names left after it."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = SRC.joinpath(*parts[:n])
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if f.is_file():
                return f, parts[n:]
    return None, parts


def _named() -> list[tuple[str, str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(REPO).as_posix()
        for m in _spans(text, PATH):
            if m.group(1) in WHEEL_ONLY or text[m.end():m.end() + 2].lstrip("/").startswith("<"):
                continue  # a wheel's path, or a pattern: tests/emulator/fused/test_fused_<family>.py
            out.append((rel, "path", m.group(0)))
        for m in _spans(text, MODULE):
            if text[m.end():m.end() + 1] == "/" or m.group(0) in NOT_MODULES:
                continue
            out.append((rel, "module", m.group(0)))
    return sorted(set(out))


NAMED = _named()


def test_the_pages_name_modules_and_paths():
    kinds = {k for _, k, _ in NAMED}
    assert kinds == {"path", "module"} and len(NAMED) > 100, len(NAMED)


@pytest.mark.parametrize(("page", "kind", "name"), NAMED, ids=[f"{p}:{n}" for p, _, n in NAMED])
def test_what_the_docs_name_exists(page, kind, name):
    if kind == "path":
        path, _, test = name.partition("::")
        target = _path(path)
        assert target.exists(), f"{page} names {path}, which does not exist"
        if test:
            assert re.search(rf"^\s*def {re.escape(test)}\b", target.read_text(encoding="utf-8"), re.M), \
                f"{page} names {name}: no such test"
        return
    f, rest = _module_file(name)
    assert f is not None and f != SRC / "ascendify" / "__init__.py" or name == "ascendify" or not rest, \
        f"{page} names {name}: no module ascendify.{rest[0] if rest else ''}"
    if rest:  # an attribute of the module: defined or imported there
        text = f.read_text(encoding="utf-8")
        assert re.search(rf"\b{re.escape(rest[0])}\b", text), f"{page} names {name}: {f.name} has no {rest[0]}"


def test_the_checker_sees_a_stale_name(tmp_path):
    assert _module_file("ascendify.emulator.ops.table")[0] == SRC / "ascendify/emulator/ops/table.py"
    assert _module_file("ascendify.port.pipeline")[1] == ["pipeline"]  # a retired module: left over, not found
    assert not _path("ascendify/port/pipeline.py").exists()
    assert [m.group(1) for m in PATH.finditer("see `src/ascendify/core/fileio.py` and tests/x.py::t.")] == \
        ["src/ascendify/core/fileio.py", "tests/x.py"]


LINK = re.compile(r"\]\(([^)\s]+?\.md)(?:#([\w-]+))?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


LINKS = sorted({(p.relative_to(REPO).as_posix(), m.group(1), m.group(2) or "")
                for p in PAGES for m in LINK.finditer(p.read_text(encoding="utf-8"))
                if not m.group(1).startswith("http")})


@pytest.mark.parametrize(("page", "target", "anchor"), LINKS, ids=[f"{p}->{t}#{a}" for p, t, a in LINKS])
def test_links_between_the_pages_resolve(page, target, anchor):
    path = (REPO / page).parent / target
    assert path.is_file(), f"{page} links to {target}, which does not exist"
    if anchor:
        assert anchor in _anchors(path), f"{page} links to {target}#{anchor}: no such heading"


def test_slugs_are_githubs():
    assert _slug("The import hook: `ASCENDIFY_EMULATE=npu`") == "the-import-hook-ascendify_emulatenpu"
    assert _slug("torch_npu's fused operators") == "torch_npus-fused-operators"
