"""A model's inputs written on the command line (``compare --inputs``, ``bench --inputs``): tensors by shape, in
tuples, lists and dicts of any nesting, positional and keyword.

A tensor is ``SHAPE[:DTYPE[:HIGH]]``: ``2x3x32x32`` (standard normal float32), ``4x16:int64:64`` (integers in
``[0, 64)``), ``2x8:bool``. Around them: ``(a, b)`` a tuple, ``[a, b]`` a list, ``{name=a, other=b}`` a dict,
``None``/``True``/``False``; at the top level ``a, b`` are the positional inputs and ``name=a`` keyword inputs.
An LSTM language model's ``model(x, (h, c))``::

    5x2:int64:40, (1x2x16, 1x2x16)

Tensors are drawn in the order they are written, the n-th from generator seed ``seed + n`` (so ``4x16:int64:64,
2x3`` gives the same tensors as before nesting existed).

>>> args, kwargs = parse("5x2:int64:40, (1x2x16, 1x2x16), mask={keep=3:bool, scale=None}")
>>> [type(a).__name__ for a in args], tuple(args[1][0].shape), sorted(kwargs["mask"])
(['Tensor', 'tuple'], (1, 2, 16), ['keep', 'scale'])
>>> describe(args, kwargs)
'(5x2:int64, (1x2x16:float32, 1x2x16:float32), mask={keep=3:bool, scale=None})'
"""

from __future__ import annotations

from typing import Any

DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool", "long",
          "int", "float")
_ALIASES = {"long": "int64", "int": "int64", "float": "float32"}
_LITERALS = {"None": None, "True": True, "False": False}


class SpecError(ValueError):
    """A malformed input spec: a usage error (exit 2), not bad input."""

    usage = True


def tensor(one: str, seed: int, index: int):
    """One tensor from ``SHAPE[:DTYPE[:HIGH]]``, drawn from generator seed ``seed + index``."""
    import torch

    parts = one.strip().split(":")
    try:
        shape = tuple(int(s) for s in parts[0].lower().split("x") if s)
    except ValueError:
        raise SpecError(f"input spec {one!r}: the shape must be like 4x16") from None
    if any(n < 1 for n in shape):  # a negative size is torch's traceback, a 0 an empty tensor that proves nothing
        raise SpecError(f"input spec {one!r}: every size must be at least 1")
    dtype = parts[1].lower() if len(parts) > 1 and parts[1] else "float32"
    if dtype not in DTYPES:
        raise SpecError(f"input spec {one!r}: unknown dtype {dtype!r} (use one of {', '.join(DTYPES)})")
    dtype = _ALIASES.get(dtype, dtype)
    g = torch.Generator().manual_seed(seed + index)
    tdt = getattr(torch, dtype)
    if tdt.is_floating_point:
        return torch.randn(shape, generator=g).to(tdt)
    if tdt == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    try:
        high = int(parts[2]) if len(parts) > 2 and parts[2] else 2
    except ValueError:
        raise SpecError(f"input spec {one!r}: the upper bound must be an integer") from None
    if high < 1:
        raise SpecError(f"input spec {one!r}: the upper bound must be at least 1 (integers are drawn below it)")
    return torch.randint(0, high, shape, generator=g, dtype=tdt)


class _Parser:
    def __init__(self, text: str, seed: int):
        self.s, self.i, self.seed, self.n = text, 0, seed, 0

    def fail(self, what: str):
        raise SpecError(f"input spec {self.s!r}: {what} at position {self.i + 1}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        self.ws()
        return self.s[self.i] if self.i < len(self.s) else ""

    def word(self) -> str:
        self.ws()
        j = self.i
        while self.i < len(self.s) and self.s[self.i] not in ",()[]{}=" and not self.s[self.i].isspace():
            self.i += 1
        return self.s[j:self.i]

    def name_eq(self) -> str | None:
        """``NAME =`` ahead: consume it and return NAME; otherwise consume nothing."""
        save = self.i
        w = self.word()
        if w.isidentifier() and self.peek() == "=":
            self.i += 1
            return w
        self.i = save
        return None

    def value(self) -> Any:
        c = self.peek()
        if c == "(" or c == "[":
            close = ")" if c == "(" else "]"
            self.i += 1
            items = self.items(close, keywords=False)[0]
            return tuple(items) if c == "(" else list(items)
        if c == "{":
            self.i += 1
            return self.items("}", keywords=True, only_keywords=True)[1]
        w = self.word()
        if not w:
            self.fail("a tensor shape, (...), [...], {...} or None expected")
        if w in _LITERALS:
            return _LITERALS[w]
        t = tensor(w, self.seed, self.n)
        self.n += 1
        return t

    def items(self, close: str, keywords: bool, only_keywords: bool = False) -> tuple[list, dict]:
        args: list = []
        kwargs: dict = {}
        while True:
            c = self.peek()
            if c == close:
                if close:
                    self.i += 1
                return args, kwargs
            name = self.name_eq() if keywords else None
            if name is None and (only_keywords or kwargs):
                self.fail("NAME=VALUE expected" if only_keywords else "a positional input after keyword ones")
            v = self.value()
            if name is None:
                args.append(v)
            elif name in kwargs:
                self.fail(f"{name!r} given twice")
            else:
                kwargs[name] = v
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c != close:
                self.fail(f"',' or {close!r} expected" if close else "',' expected")


def parse(spec: str, seed: int = 0) -> tuple[tuple, dict[str, Any]]:
    """``(args, kwargs)`` from a spec (see the module docstring); ``SpecError`` says what is wrong and where."""
    if not spec or not spec.strip():
        raise SpecError("empty input spec")
    p = _Parser(spec, seed)
    args, kwargs = p.items("", keywords=True)
    if not args and not kwargs:
        raise SpecError(f"input spec {spec!r}: no input")
    return tuple(args), kwargs


def describe(args: tuple, kwargs: dict | None = None) -> str:
    """A short text of a batch's structure: shapes and dtypes, nesting kept (for records and reports)."""

    def one(v) -> str:
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            shape = "x".join(str(d) for d in v.shape) or "scalar"
            return f"{shape}:{str(v.dtype).replace('torch.', '')}"
        if isinstance(v, tuple):
            return "(" + ", ".join(one(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if isinstance(v, list):
            return "[" + ", ".join(one(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}={one(x)}" for k, x in v.items()) + "}"
        return repr(v)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in (kwargs or {}).items()]
    return "(" + ", ".join(parts) + ")"


def from_value(val: Any, where: str) -> tuple[tuple, dict[str, Any]]:
    """``(args, kwargs)`` from what a ``FILE:FUNC`` returned: a tensor (one input), a tuple or list (the positional
    inputs, any nesting), or a dict (keyword inputs, ``model(**batch)``; return ``(batch,)`` to pass a dict as one
    positional input)."""
    import torch

    if isinstance(val, torch.Tensor):
        return (val,), {}
    if isinstance(val, (tuple, list)):
        return tuple(val), {}
    if isinstance(val, dict) and all(isinstance(k, str) for k in val):
        return (), dict(val)
    raise ValueError(f"{where}: returned a {type(val).__name__}, not a tensor, a tuple/list of inputs or a dict "
                     "of keyword inputs")
