"""The shortcuts that keep `migrate` fast give the answers of the long way: a re-parse of only the touched
top-level statements, rule prefilters, report.json's one-line file entries, the automatic job count."""

from __future__ import annotations

import ast
import json
import random
import warnings
from pathlib import Path

from ascendify.migrate import Options, migrate_source
from ascendify.migrate.engine import _still_parses
from ascendify.migrate.files import FILES_PER_JOB, Task, auto_jobs
from ascendify.migrate.model import Edit
from ascendify.migrate.render import report_json
from ascendify.migrate.source import SourceFile

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).parents[2] / "examples" / "cuda_project"


def _full_parse_ok(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


def test_partial_reparse_agrees_with_a_full_parse_on_random_edits():
    from ascendify.migrate.engine import apply_edits

    warnings.simplefilter("ignore", SyntaxWarning)  # random text: "1x" literals and the like

    rng = random.Random(7)
    snippets = ["", ")", "(", "\n", "    ", "x = 1\n", "pass", ":", "if x:\n", "    y = 2\n", "#", '"']
    files = sorted(FIXTURES.glob("*.py")) + sorted(EXAMPLES.glob("*.py"))
    checked = broken = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        src = SourceFile.from_text(text)
        tree = ast.parse(text)
        starts = src.line_starts
        for _ in range(40):
            edits = []
            for _ in range(rng.randint(1, 3)):
                a = rng.choice(starts[:-1]) if rng.random() < 0.5 else rng.randrange(len(text))
                b = min(len(text), a + rng.choice([0, 0, 1, 3, 12]))
                if any(a < e.end and e.start < b or a == e.start for e in edits):
                    continue
                edits.append(Edit(a, b, rng.choice(snippets)))
            full = _full_parse_ok(apply_edits(text, edits))
            assert _still_parses(src, tree, edits) == full, (path.name, edits)
            checked += 1
            broken += not full
    assert checked > 200 and 0 < broken < checked  # both answers were exercised


NESTED = """\
import torch


class Trainer:
    def step(self, x):
        y = x.cuda()
        torch.cuda.synchronize()
        return y


@torch.no_grad()
def evaluate(m):
    return m
"""


def test_a_nested_statement_is_checked_alone_and_never_passes_a_broken_file():
    """An edit inside a nested statement is parsed with that statement alone (under ``if 1:``); the cases that
    parse there but not in the file (a moved first line, a line break before a top-level statement replaced)
    are refused, and a statement that grows a block is accepted."""
    src, tree = SourceFile.from_text(NESTED), ast.parse(NESTED)
    sync = NESTED.index("torch.cuda.synchronize")
    at = NESTED.index("@torch")
    cases = [
        [Edit(sync, sync + 4, "    ")],  # the statement's first line moves right: unexpected indent
        [Edit(at - 1, at, "    ")],  # the line break before a decorator becomes spaces
        [Edit(sync, sync, "\n")],  # the statement starts on the next line, at column 0
        [Edit(sync, sync + len("torch.cuda.synchronize()"), "if torch.npu.is_available():\n"
                                                           "            torch.npu.synchronize()")],
        [Edit(sync + 6, sync + 10, "npu")],
        [Edit(sync, sync, "else:\n        ")],
    ]
    from ascendify.migrate.engine import apply_edits

    answers = []
    for edits in cases:
        full = _full_parse_ok(apply_edits(NESTED, edits))
        assert _still_parses(src, tree, edits) == full, edits
        answers.append(full)
    assert answers == [False, False, False, True, True, False]


def test_rule_prefilter_does_not_change_a_conversion():
    """Each rule skipped on a file without its tokens would not have acted there: the same file with one of
    a rule's tokens added in a comment converts to the same text (and findings) as without it."""
    from ascendify.migrate.rules import RULES

    tokens = sorted({t for r in RULES.values() for t in r.tokens})
    for path in sorted(FIXTURES.glob("*.py")) + sorted(EXAMPLES.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for target in ("npu", "portable"):
            out, res = migrate_source(text, Options(target=target))
            tail = "".join(f"# {t}\n" for t in tokens)
            out2, res2 = migrate_source(text + tail, Options(target=target))
            assert out2 == out + tail, path.name
            key = [(f.rule, f.kind, f.line, f.message) for f in res.findings]
            assert [(f.rule, f.kind, f.line, f.message) for f in res2.findings] == key, path.name


def test_report_json_is_json_with_one_line_per_file():
    report = {"schema": "s", "totals": {"files": 2}, "files": [{"path": "a.py", "findings": [{"x": "é"}]},
                                                              {"path": "b.py", "findings": []}], "rules": {}}
    text = report_json(report)
    assert json.loads(text) == report
    assert sum(1 for line in text.splitlines() if line.startswith('    {"path"')) == 2
    assert json.loads(report_json({**report, "files": []}))["files"] == []


def test_jobs_follow_the_tree_size():
    def tasks(n):
        return [Task(f"/x/f{i}.py", f"f{i}.py", None, "check", Options()) for i in range(n)]

    assert auto_jobs(tasks(3)) == 1
    assert auto_jobs(tasks(FILES_PER_JOB * 64)) >= 1
    assert auto_jobs(tasks(FILES_PER_JOB * 64)) <= (__import__("os").cpu_count() or 1)
