"""Which file of a tree is a program to run (for the next step the summary prints): read once, by the
conversion, from the syntax tree it already has."""

from __future__ import annotations

import ast


def runs_as_program(text: str, tree: ast.Module | None = None) -> bool:
    """``text`` is a program to run: it has an ``if __name__ == "__main__":`` block, or it is a plain script
    (most research code): its module-level code loops (``for``/``while``) or reads the command line
    (``parse_args()``, ``sys.argv``). A module of definitions is not. ``tree``: ``text`` parsed, when it is."""
    if "__main__" in text and "__name__" in text:
        return True
    if tree is None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return False
    todo = list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)):
            return True
        if isinstance(stmt, (ast.If, ast.With, ast.Try)):
            todo.extend(stmt.body + getattr(stmt, "orelse", []) + getattr(stmt, "finalbody", []))
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Attribute) and (node.attr == "parse_args" or node.attr == "argv" and isinstance(
                    node.value, ast.Name) and node.value.id == "sys"):
                return True
    return False
