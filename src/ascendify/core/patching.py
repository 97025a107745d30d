"""A registry of monkey patches that can be undone exactly: the one patching mechanism of ascendify.

Shared by every capability that replaces attributes of torch (``ascendify run``'s redirections in
:mod:`ascendify.auto`, the emulated device in :mod:`ascendify.emulator`): patch through one :class:`Patches`
object per feature and call :meth:`Patches.restore` to undo all of it, in reverse order. The registry also
works as a context manager (``with Patches() as p: p.set(...)`` restores on exit).

Every attribute ascendify replaces goes through :class:`Patches`, which remembers whether the owner held the
attribute in its own ``__dict__`` (restored with ``setattr``) or inherited it (restored with ``delattr``), so
``disable()`` leaves every object as it found it. Other undo steps (environment variables, ``copyreg``) are
registered as callables.

>>> import types
>>> m = types.SimpleNamespace(f=1)
>>> p = Patches()
>>> p.set(m, "f", 2); p.set(m, "g", 3)
>>> (m.f, m.g)
(2, 3)
>>> p.restore(); (m.f, hasattr(m, "g"))
(1, False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


def own_attr(owner: Any, name: str) -> Any:
    """The raw value in ``owner.__dict__`` (descriptors unresolved), or a sentinel when inherited/absent."""
    try:
        return vars(owner).get(name, _MISSING)
    except TypeError:  # objects without __dict__
        return getattr(owner, name, _MISSING)


def light_wraps(wrapper: Callable, wrapped: Any) -> Callable:
    """A cheaper ``functools.wraps``: name, qualname, doc and ``__wrapped__`` (enable() makes hundreds)."""
    try:
        wrapper.__name__ = getattr(wrapped, "__name__", wrapper.__name__)
        wrapper.__qualname__ = getattr(wrapped, "__qualname__", wrapper.__qualname__)
        wrapper.__doc__ = getattr(wrapped, "__doc__", None)
        wrapper.__wrapped__ = wrapped
    except (AttributeError, TypeError):
        pass
    return wrapper


class Patches:
    """Ordered set of replaced attributes and extra undo steps."""

    def __init__(self) -> None:
        self._items: list[tuple[Any, str, Any]] = []
        self._seen: set[tuple[int, str]] = set()
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """Replace ``owner.name`` with ``value`` and remember how to put it back (first patch wins)."""
        key = (id(owner), name)
        if key in self._seen:
            setattr(owner, name, value)
            return
        self._seen.add(key)
        self._items.append((owner, name, own_attr(owner, name)))
        setattr(owner, name, value)

    def on_restore(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the patches are undone (before attributes are restored)."""
        self._undo.append(fn)

    def targets(self) -> list[tuple[Any, str]]:
        """Every ``(owner, name)`` patched, in order."""
        return [(o, n) for o, n, _ in self._items]

    def originals(self) -> list[tuple[Any, str, Any]]:
        """Every ``(owner, name, original)`` patched, in order; ``original`` is None where it was inherited or
        absent."""
        return [(o, n, None if v is _MISSING else v) for o, n, v in self._items]

    def restore(self) -> None:
        for fn in reversed(self._undo):
            fn()
        self._undo.clear()
        for owner, name, orig in reversed(self._items):
            if orig is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, orig)
        self._items.clear()
        self._seen.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __enter__(self) -> Patches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def allow_on_lazy_parameters(patches: Patches, pairs: list[tuple[Any, Callable]]) -> None:
    """A LazyModule's uninitialised parameters allow a fixed list of Tensor methods, checked by identity, and
    PyTorch hands ``__torch_function__`` a method's *current* attribute: with ``Tensor.to`` patched, ``.to`` of a
    lazy model would be refused. Allow each ``(original, wrapper)``'s wrapper where they allow the original
    (``original`` None: always), through ``patches`` (undone with them)."""
    from torch.nn.parameter import UninitializedTensorMixin

    allowed = UninitializedTensorMixin._allowed_methods
    extra = [wrapper for original, wrapper in pairs if original is None or original in allowed]
    if extra:
        patches.set(UninitializedTensorMixin, "_allowed_methods", [*allowed, *extra])
