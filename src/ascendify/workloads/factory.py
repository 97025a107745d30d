"""An object from ``FILE.py:FACTORY``: the one parser, loader and error for every verb that takes a user's model,
loss or inputs from a file (``train``/``bench --model``, ``compare --model/--loss/--inputs``, ``port --model``).

A spec is ``FILE.py:EXPR``, split at the first ``.py:``. ``EXPR`` is a name defined at the file's top level, or
a call expression evaluated in the file's namespace::

    models.py:make_model            a function or class, called (with the keywords it accepts, see :func:`load`)
    models.py:model                 an object used as is (an ``nn.Module`` instance is never called)
    models.py:GPT(vocab_size=64)    evaluated as written

>>> s = parse_spec("models.py:GPT(n_layer=2, note='a:b')")
>>> s.file, s.expr, s.name, s.is_call
('models.py', "GPT(n_layer=2, note='a:b')", 'GPT', True)
>>> is_spec("nets/cnn.py:make"), is_spec("resnet18"), is_spec("netG"), is_spec(None)
(True, False, False, False)

Each file is imported as a module of its own, named after its resolved path, with its folder (and ``root``)
first on ``sys.path`` while it is imported and the factory runs: two files both named ``models.py`` (an original
and its migrated copy) load side by side, and a file's imports of its neighbours work. Importing twice reuses the
module.

Every failure is a :class:`FactoryError` (a ``ValueError``) saying ``FILE.py:EXPR: what happened``: the file,
the factory, the exception and the line of the file it came from, never a traceback::

    models.py:make: make() raised RuntimeError: boom (at models.py:2)
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEP = ".py:"


class FactoryError(ValueError):
    """A ``FILE.py:FACTORY`` that cannot be loaded; the message says which file, which factory and why.
    ``usage`` is True when the spec itself is malformed (a usage error, exit 2), False when its file fails."""

    usage = False

    @classmethod
    def bad_spec(cls, message: str) -> FactoryError:
        e = cls(message)
        e.usage = True
        return e


@dataclass(frozen=True)
class Spec:
    """A parsed ``FILE.py:EXPR``. ``text`` is the spec as the user wrote it (what messages start with)."""

    text: str
    file: str  # "models.py", as written (relative to the root the loader is given)
    expr: str  # "make" or "GPT(n_layer=2)"

    @property
    def name(self) -> str:
        """The top-level name ``expr`` starts with (``GPT`` for ``GPT(n_layer=2)``, ``nets`` for ``nets.cnn()``)."""
        return self.expr.split("(", 1)[0].split(".", 1)[0].strip()

    @property
    def is_call(self) -> bool:
        """True for an expression to evaluate, False for a plain name."""
        return not self.expr.isidentifier()

    def path(self, root: str | os.PathLike[str] | None = None) -> Path:
        return Path(root, self.file) if root is not None else Path(self.file)


def is_spec(text: str | None) -> bool:
    """True for ``FILE.py:EXPR`` (a file to load from), False for anything else (a zoo name, a discovered
    model's name or class, a shape spec such as ``4x16:int64:64``)."""
    if not text or SEP not in text:
        return False
    file, _, expr = text.partition(SEP)
    return bool(file.strip()) and bool(expr.strip())


def parse_spec(text: str) -> Spec:
    """``FILE.py:EXPR`` -> :class:`Spec`; :class:`FactoryError` (a usage error) for anything else."""
    if not is_spec(text):
        raise FactoryError.bad_spec(f"{text!r}: expected FILE.py:NAME (e.g. models.py:make_model)")
    file, _, expr = text.partition(SEP)
    spec = Spec(text, file + ".py", expr.strip())
    if not spec.name.isidentifier():
        raise FactoryError.bad_spec(f"{text}: {spec.expr!r} is not a name or a call (e.g. make_model or "
                                    "GPT(n_layer=2))")
    return spec


def _where(exc: BaseException, path: Path) -> str:
    """`` (at FILE:LINE)``: the last line of ``path`` the exception passed through ('' when none)."""
    want = os.path.realpath(path)
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if os.path.realpath(f.filename) == want]
    if not lines and isinstance(exc, SyntaxError) and exc.lineno and os.path.realpath(exc.filename or "") == want:
        lines = [exc.lineno]
    return f" (at {path}:{lines[-1]})" if lines else ""


class _OnPath:
    """``folders`` first on ``sys.path`` inside the block (each added once; removed after)."""

    def __init__(self, *folders: str):
        self.folders = [f for f in dict.fromkeys(folders) if f not in sys.path]

    def __enter__(self):
        sys.path[:0] = self.folders
        return self

    def __exit__(self, *exc):
        for f in self.folders:
            try:
                sys.path.remove(f)
            except ValueError:
                pass


def _folders(path: Path, root) -> tuple[str, ...]:
    return (str(path.resolve().parent), *([str(Path(root).resolve())] if root is not None else []))


def load_module(spec: Spec | str, *, root: str | os.PathLike[str] | None = None):
    """The module ``spec``'s file defines, imported once under a name of its own (see the module doc)."""
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    path = spec.path(root)
    if not path.is_file():
        raise FactoryError(f"{path}: no such file")
    name = "_ascendify_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    ispec = importlib.util.spec_from_file_location(name, path)
    if ispec is None or ispec.loader is None:
        raise FactoryError(f"{spec.text}: {path} is not an importable Python file")
    mod = importlib.util.module_from_spec(ispec)
    sys.modules[name] = mod
    try:
        with _OnPath(*_folders(path, root)):
            ispec.loader.exec_module(mod)
    except Exception as e:
        sys.modules.pop(name, None)
        raise FactoryError(f"{spec.text}: importing {path} failed: {type(e).__name__}: {e}{_where(e, path)}") from None
    return mod


def _is_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def accepted_keywords(fn: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``kwargs`` (None values dropped) that ``fn``'s signature accepts (all, with ``**kw``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in kwargs.items() if v is not None and (takes_any or k in params)}


def load(spec: Spec | str, *, root: str | os.PathLike[str] | None = None, call: bool = True,
         kwargs: Mapping[str, Any] | None = None) -> Any:
    """What ``spec`` names, from its file (relative to ``root`` when given).

    A name bound to a callable that is not an ``nn.Module`` is called (``call=False``: returned as is, a loss
    function), with the entries of ``kwargs`` its signature accepts; an expression is evaluated as written.
    Raises :class:`FactoryError`.
    """
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    mod = load_module(spec, root=root)
    path = spec.path(root)
    with _OnPath(*_folders(path, root)):
        if not spec.is_call:
            if not hasattr(mod, spec.expr):
                raise FactoryError(f"{spec.text}: {path} defines no callable {spec.expr!r}")
            obj = getattr(mod, spec.expr)
            if not call or not callable(obj) or _is_module(obj):
                return obj
            what = f"{spec.expr}()"
            try:
                return obj(**accepted_keywords(obj, kwargs or {}))
            except Exception as e:  # the user's code: which file, which factory, what it raised (no traceback)
                raise FactoryError(f"{spec.text}: {what} raised {type(e).__name__}: {e}{_where(e, path)}") from None
        try:
            return eval(spec.expr, vars(mod))  # noqa: S307 - the user's own expression over the user's own file
        except Exception as e:
            raise FactoryError(f"{spec.text}: {spec.expr} raised {type(e).__name__}: {e}{_where(e, path)}") from None


def load_model(spec: Spec | str, *, root: str | os.PathLike[str] | None = None,
               kwargs: Mapping[str, Any] | None = None):
    """The ``torch.nn.Module`` that ``spec`` makes (see :func:`load`); :class:`FactoryError` for anything else."""
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    model = load(spec, root=root, kwargs=kwargs)
    if not _is_module(model):
        named = None if spec.is_call else getattr(load_module(spec, root=root), spec.expr)
        if named is not None and not callable(named):
            raise FactoryError(f"{spec.text}: {spec.expr} holds {type(named).__name__}, expected a torch.nn.Module "
                               "or a callable that returns one")
        what = spec.expr if spec.is_call else f"{spec.expr}()"
        raise FactoryError(f"{spec.text}: {what} returned {type(model).__name__}, expected a torch.nn.Module")
    return model


def load_function(spec: Spec | str, *, root: str | os.PathLike[str] | None = None):
    """The callable ``spec`` names, not called (a loss function); an expression is evaluated to get it."""
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    fn = load(spec, root=root, call=False)
    if not callable(fn):
        raise FactoryError(f"{spec.text}: {type(fn).__name__} is not callable")
    return fn


def precheck(spec: Spec | str, *, root: str | os.PathLike[str]) -> None:
    """Check ``spec`` without importing anything (before a run that will build it in a child process): its file
    is under ``root``, its name is defined at the file's top level, and importing the file runs no program (a
    script without a ``__main__`` guard would start training when the model is built). Raises
    :class:`FactoryError` saying which."""
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    path = spec.path(root)
    if not path.is_file():
        raise FactoryError(f"{spec.text}: {spec.file} is not in {root}")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except SyntaxError as e:
        raise FactoryError(f"{spec.text}: {spec.file} does not parse ({e.msg}, line {e.lineno})") from None
    defined: set[str] = set()
    runs: list[int] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        elif not isinstance(node, ast.If):
            runs.append(node.lineno)
    if spec.name not in defined:
        raise FactoryError(f"{spec.text}: {spec.file} defines no {spec.name!r} at its top level")
    if runs:
        raise FactoryError(f"{spec.text}: importing {spec.file} runs the program (top-level code at line {runs[0]}, "
                           "no `if __name__ == '__main__':` guard), so the model cannot be built from it")
