"""Which file of a tree is a program to run (for the next step the summary prints): read once, by the
conversion, from the syntax tree it already has."""

from __future__ import annotations

import ast

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCKS = (ast.If, ast.With, ast.Try)


def runs_as_program(text: str, tree: ast.Module | None = None, index=None) -> bool:
    """``text`` is a program to run: it has an ``if __name__ == "__main__":`` block, or it is a plain script
    (most research code): its module-level code loops (``for``/``while``) or reads the command line
    (``parse_args()``, ``sys.argv``). A module of definitions is not. ``tree``: ``text`` parsed, when it is;
    ``index``: its :class:`~.walk.Index`, when there is one (the attributes are then looked up, not walked)."""
    if "__main__" in text and "__name__" in text:
        return True
    if tree is not None and index is not None:
        return _program(tree, index)
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


def _program(tree: ast.Module, index) -> bool:
    """:func:`runs_as_program` from the index: module-level loops, then the reads of ``parse_args`` /
    ``sys.argv`` whose statement the module runs (not in a definition; in an ``if``/``with``/``try`` at module
    level only in its body, ``else`` or ``finally``), as the walk above counts them."""
    todo = list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)):
            return True
        if isinstance(stmt, _BLOCKS):
            todo.extend(stmt.body + getattr(stmt, "orelse", []) + getattr(stmt, "finalbody", []))
    parents = index.parents
    stored = [n for n in index.chains if type(n) is ast.Attribute and type(n.ctx) is not ast.Load]
    for node in index.attributes + stored:  # read, or assigned (``sys.argv = [...]``)
        if not (node.attr == "parse_args" or node.attr == "argv" and isinstance(node.value, ast.Name)
                and node.value.id == "sys"):
            continue
        chain = [node]
        p = parents.get(id(node))
        while p is not None:
            chain.append(p)
            p = parents.get(id(p))
        chain.reverse()  # the module, its statement, ..., the attribute
        k = 1
        while isinstance(chain[k], _BLOCKS):  # its body, else and finally are the module's; not its test
            blk, nxt = chain[k], chain[k + 1]
            if not any(nxt in part for part in (blk.body, getattr(blk, "orelse", []), getattr(blk, "finalbody", []))):
                break
            k += 1
        if not isinstance(chain[k], _BLOCKS + _DEFS):
            return True
    return False
