"""One traversal of the syntax tree that everything else reads: nodes in source order, parents, f-string
members, and the nodes each rule hook wants. (``ast.walk`` + ``iter_child_nodes`` several times over was the
largest cost of a run; this walker reads ``_fields`` directly and skips operator/context singletons.)
"""

from __future__ import annotations

import ast

_SKIP_FIELDS = frozenset({"ctx", "op", "ops", "type_comment"})
# fields that hold names, numbers or flags, never nodes
_SCALAR_FIELDS = frozenset({"id", "attr", "arg", "name", "module", "level", "is_async", "conversion", "simple",
                            "kind", "lineno", "col_offset", "end_lineno", "end_col_offset"})
_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> its fields that may hold child nodes


class Index:
    __slots__ = ("order", "parents", "in_fstring", "imports", "top_ids", "calls", "assigns", "funcs", "compares",
                 "strings", "attributes", "chains")

    def __init__(self, tree: ast.Module):
        self.parents: dict[int, ast.AST] = {}
        self.in_fstring: set[int] = set()
        self.order: list[ast.AST] = []
        self.imports: list[ast.stmt] = []
        self.top_ids = {id(n) for n in tree.body}
        self.calls: list[ast.Call] = []
        self.assigns: list[ast.AST] = []
        self.funcs: list[ast.AST] = []
        self.compares: list[ast.Compare] = []
        self.strings: list[ast.Constant] = []
        self.attributes: list[ast.Attribute] = []  # in load context
        self.chains: list[ast.AST] = []  # outermost Name/Attribute chains (roots filtered later)
        parents, in_f, order = self.parents, self.in_fstring, self.order
        AST = ast.AST
        Attribute, Name, Call, Constant, JoinedStr = ast.Attribute, ast.Name, ast.Call, ast.Constant, ast.JoinedStr
        Load = ast.Load
        fields = _FIELDS
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            order.append(node)
            t = type(node)
            if t is Call:
                self.calls.append(node)
            elif t is Name:
                p = parents.get(id(node))
                if not (type(p) is Attribute and p.value is node) and type(node.ctx) is Load:
                    self.chains.append(node)
                continue  # no children of interest
            elif t is Attribute:
                p = parents.get(id(node))
                load = type(node.ctx) is Load
                if load:
                    self.attributes.append(node)
                if not (type(p) is Attribute and p.value is node):
                    self.chains.append(node)
            elif t is Constant:
                if type(node.value) is str:
                    self.strings.append(node)
                continue
            elif t is ast.Compare:
                self.compares.append(node)
            elif t is ast.Assign or t is ast.AnnAssign:
                self.assigns.append(node)
            elif t is ast.FunctionDef or t is ast.AsyncFunctionDef or t is ast.Lambda:
                self.funcs.append(node)
            elif t is ast.Import or t is ast.ImportFrom:
                self.imports.append(node)
            inside_f = t is JoinedStr or id(node) in in_f
            children: list[ast.AST] = []
            names = fields.get(t)
            if names is None:
                names = fields[t] = tuple(n for n in t._fields if n not in _SKIP_FIELDS and n not in _SCALAR_FIELDS)
            for name in names:
                v = getattr(node, name, None)
                if type(v) is list:
                    for c in v:
                        if isinstance(c, AST):
                            children.append(c)
                elif isinstance(v, AST):
                    children.append(v)
            if not children:
                continue
            for c in children:
                parents[id(c)] = node
                if inside_f:
                    in_f.add(id(c))
            children.reverse()
            stack.extend(children)
