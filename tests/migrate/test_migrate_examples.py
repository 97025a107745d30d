"""Round trips over real code: every file of examples/cuda_project and tests/migrate/fixtures, both targets.

The converted code compiles, a second run changes nothing, every torch_npu name in the output exists, and
every CUDA-specific token left in the output is listed in the report (none silently left behind).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from ascendify.core import knowledge
from ascendify.migrate import Options, migrate_source
from ascendify.migrate.engine import Context
from ascendify.migrate.rules.backends import NPU_PROPERTIES
from ascendify.migrate.rules.general import cuda_tokens
from ascendify.migrate.source import SourceFile

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "cuda_project"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FILES = sorted(EXAMPLES.rglob("*.py")) + sorted(FIXTURES.glob("*.py"))
IDS = [p.relative_to(REPO).as_posix() for p in FILES]


def test_there_is_real_input():
    assert len([p for p in FILES if EXAMPLES in p.parents]) >= 6


@cache
def _convert(target: str):
    opts = Options(target=target)
    out = {}
    for p in FILES:
        data = p.read_bytes()
        new, result = migrate_source(data, opts, path=p.name)
        again, result2 = migrate_source(new, opts, path=p.name)
        out[p] = (data, new, result, again, result2)
    return target, out


@pytest.fixture(scope="module", params=["npu", "portable"])
def converted(request):
    return _convert(request.param)


@pytest.fixture(scope="module")
def npu_converted():
    return _convert("npu")


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_converted_file_compiles_and_is_idempotent(converted, path):
    target, out = converted
    data, new, result, again, result2 = out[path]
    compile(new, str(path), "exec")
    assert again == new, f"second --to {target} run changed {path.name}"
    assert not [f for f in result2.findings if f.kind == "change"]
    if new == data:
        assert result.status == "unchanged"


def _npu_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = []
            n = node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name):
                dotted = ".".join([n.id, *reversed(parts)])
                if dotted.startswith(("torch.npu.", "torch_npu.")):
                    names.add(dotted)
    return names


def test_every_emitted_npu_name_exists(npu_converted):
    _, out = npu_converted
    seen = set()
    for path, (_, new, *_rest) in out.items():
        for name in _npu_names(ast.parse(new)):
            if name in NPU_PROPERTIES:
                assert knowledge.npu_name_exists(name.rsplit(".", 1)[0])
            else:
                assert knowledge.npu_name_exists(name), f"{path.name}: {name}"
            seen.add(name)
    assert "torch.npu.synchronize" in seen


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_leftover_cuda_token_is_listed(converted, path):
    target, out = converted
    _, new, _, _, result2 = out[path]
    text = new.decode("utf-8")
    ctx = Context(SourceFile.from_text(text), ast.parse(text), Options(target=target))
    listed = {line for f in result2.findings if f.kind == "report" for line in range(f.line, f.end_line + 1)}
    for node, what in cuda_tokens(ctx):
        assert node.lineno in listed, f"{path.name}:{node.lineno}: {what} left in the --to {target} output, unlisted"


def test_the_examples_need_no_safety_net(converted):
    """On the realistic examples every CUDA site is claimed by a specific rule (no ASC099 review rows)."""
    target, out = converted
    for path, (_, _, result, _, _) in out.items():
        if EXAMPLES in path.parents:
            assert not [f for f in result.findings if f.rule == "ASC099"], path.name
            assert not [f for f in result.findings if f.rule == "ASC000"], path.name


def test_must_not_change_fixture_is_byte_identical(converted):
    _, out = converted
    data, new, result, _, _ = out[FIXTURES / "must_not_change.py"]
    assert new == data
    # the one bare "cuda" string (a logger name) is listed for review, not rewritten
    assert [(f.rule, f.line) for f in result.findings if f.kind == "report"] == [("ASC099", 6)]


def test_reports_cover_the_issue_checklist(npu_converted):
    _, out = npu_converted
    rules: set[str] = set()
    for _, (_, _, result, _, _) in out.items():
        rules.update(f.rule for f in result.findings)
    for rid in ("ASC101", "ASC102", "ASC103", "ASC104", "ASC201", "ASC202", "ASC203", "ASC204", "ASC301",
                "ASC302", "ASC303", "ASC304", "ASC401", "ASC402", "ASC403", "ASC501", "ASC601", "ASC602",
                "ASC603", "ASC606", "ASC607", "ASC801", "ASC803", "ASC804", "ASC901", "ASC902", "ASC903",
                "ASC904"):
        assert rid in rules, rid


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_crlf_bom_and_declared_encoding_survive_every_rewrite(converted, path):
    """The same file with CRLF line ends, a UTF-8 BOM, or a latin-1 PEP 263 declaration converts to exactly the
    LF conversion in that form: no rule (inserted blocks, guards, re-indented ranges) writes a bare LF or
    touches the encoding."""
    target, out = converted
    data, new, *_ = out[path]
    if new == data:
        return
    crlf, _ = migrate_source(data.replace(b"\n", b"\r\n"), Options(target=target), path=path.name)
    assert crlf == new.replace(b"\n", b"\r\n")
    bom, _ = migrate_source(b"\xef\xbb\xbf" + data, Options(target=target), path=path.name)
    assert bom == b"\xef\xbb\xbf" + new
    if data.isascii() and not data.startswith((b"#!", b"# -*-")):
        head = b"# -*- coding: latin-1 -*-\n# caf\xe9\n"  # a latin-1 byte that is not UTF-8
        latin, _ = migrate_source(head + data, Options(target=target), path=path.name)
        assert latin == head + new


@pytest.mark.parametrize(("project", "target"), [("npu_project", "npu"), ("portable_project", "portable")])
def test_hand_ports_are_left_as_they_are(project, target):
    """Code already written for the target (the careful hand ports) is a fixed point: nothing to convert."""
    for path in sorted((REPO / "examples" / project).rglob("*.py")):
        data = path.read_bytes()
        new, result = migrate_source(data, Options(target=target), path=path.name)
        assert new == data, (path.name, [(f.rule, f.line, f.after) for f in result.findings if f.kind == "change"])
