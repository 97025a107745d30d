"""docs/migrate.md documents every rule and the report schema."""

from pathlib import Path

from ascendify.migrate.render import SCHEMA
from ascendify.migrate.rules import rules_markdown_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrate.md"


def test_docs_carry_the_generated_rule_table_and_the_schema():
    text = DOC.read_text(encoding="utf-8")
    assert rules_markdown_table() in text
    assert SCHEMA in text
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"):
        assert code in text
