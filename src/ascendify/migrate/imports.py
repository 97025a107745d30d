"""Resolve names through imports: ``import torch as th`` makes ``th.cuda.synchronize`` mean
``torch.cuda.synchronize``; ``from torch.cuda.amp import autocast as ac`` makes ``ac`` mean
``torch.cuda.amp.autocast``.

A light alias table instead of a full scope analysis (measured: libcst's QualifiedNameProvider runs at a few
hundred lines per second; this table costs one pass over the import statements). A name that is bound by an
import anywhere in the file resolves; a plain variable that happens to be called ``cuda`` does not.

>>> import ast
>>> t = ImportTable.from_tree(ast.parse("import torch as th\\nfrom torch import cuda\\n"))
>>> a, b, c = (ast.parse(s, mode="eval").body for s in ("th.cuda.synchronize", "cuda.Event", "x.cuda"))
>>> t.qualify(a)
'torch.cuda.synchronize'
>>> t.qualify(b), t.qualify(c)
('torch.cuda.Event', None)

(Results are cached by node identity, so the nodes must outlive the table's use, as a file's tree does.)
>>> t.local_for("torch.distributed.init_process_group")
'th.distributed.init_process_group'
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class ImportTable:
    names: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    module_level: set[str] = field(default_factory=set)  # local names bound at module level
    import_nodes: list[ast.stmt] = field(default_factory=list)
    _cache: dict[int, str | None] = field(default_factory=dict, repr=False)

    @classmethod
    def from_tree(cls, tree: ast.AST) -> ImportTable:
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        return cls.from_nodes(nodes, set(map(id, getattr(tree, "body", []))))

    @classmethod
    def from_nodes(cls, nodes: list[ast.AST], top: set[int]) -> ImportTable:
        t = cls()
        for node in nodes:
            if isinstance(node, ast.Import):
                t.import_nodes.append(node)
                for a in node.names:
                    if a.asname:
                        t._bind(a.asname, a.name, id(node) in top)
                    else:
                        root = a.name.split(".")[0]
                        t._bind(root, root, id(node) in top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                t.import_nodes.append(node)
                for a in node.names:
                    if a.name != "*":
                        t._bind(a.asname or a.name, f"{node.module}.{a.name}", id(node) in top)
        return t

    def _bind(self, local: str, qualified: str, top: bool) -> None:
        self.names.setdefault(local, qualified)
        self._cache.clear()
        if top:
            self.module_level.add(local)

    def qualify(self, node: ast.AST) -> str | None:
        """The qualified dotted name of a ``Name``/``Attribute`` chain rooted at an import, or None."""
        key = id(node)
        if key in self._cache:
            return self._cache[key]
        q = self._qualify(node)
        self._cache[key] = q
        return q

    def _qualify(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        q = self.names.get(node.id)
        if q is None:
            return None
        parts.append(q)
        return ".".join(reversed(parts))

    def local_for(self, qualified: str) -> str | None:
        """Text that names ``qualified`` through an existing import, or None when no import reaches it."""
        best: tuple[int, str] | None = None
        for local, q in self.names.items():
            if local not in self.module_level:
                continue
            if qualified == q or qualified.startswith(q + "."):
                cand = local + qualified[len(q) :]
                if best is None or len(q) > best[0]:
                    best = (len(q), cand)
        return best[1] if best else None

    def imports_module(self, module: str) -> bool:
        return any(q == module or q.startswith(module + ".") for q in self.names.values())


def dotted_parts(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None when the chain is not made of names only."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]
