"""Which frame of the stack is the user's: the one walk behind every "called at FILE:LINE" ascendify reports (a
redirected API's first call site, a dumped op's source, a warning's stacklevel, a collective's caller, the line a
model draws random numbers at).

:func:`user_frame` starts some frames above its caller and returns the first frame whose file a :class:`Skip`
does not pass over. Two skips answer the two questions asked:

- :data:`TOOLS`: ascendify's own files, torch's, and generated code (``<string>``, ``<frozen importlib...>``,
  torch.fx's ``<eval_with_key>``): the frame found is the code that made the call, a library's or the user's;
- :data:`LIBRARIES`: also the standard library and every installed package (site-packages), except the folders
  :func:`add_user_root` names: the frame found is the user's own code (:func:`is_user_file`).

A caller that must see through more (the emulator's overflow watch, msprobe's hooks) makes its own with
:func:`passing`. Each skip caches its answer per file name: a walk costs a dict lookup per frame, no call.

>>> import os
>>> TOOLS(os.path.join(_PACKAGE, "auto", "record.py")), TOOLS("<string>"), TOOLS("/home/me/train.py")
(True, True, False)
>>> is_user_file(os.__file__), is_user_file("/home/me/train.py")
(False, True)
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Iterable
from functools import cache
from types import FrameType

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the ascendify package's folder
_getframe = sys._getframe
_SEP = os.sep


class Skip:
    """Which files a walk passes over: ``test(filename) -> bool``, its answers cached per file name."""

    __slots__ = ("cache", "test")

    def __init__(self, test: Callable[[str], bool]):
        self.test = test
        self.cache: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        r = self.cache.get(filename)
        if r is None:
            r = self.cache[filename] = bool(self.test(filename))
        return r


def site(frame: FrameType | None, default: str = "?") -> str:
    """``file:line`` of ``frame``, the file relative to the working folder when under it."""
    if frame is None:
        return default
    return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def short_path(path: str) -> str:
    """``path`` relative to the working folder when it is under it, else as it is."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


# -- the two skips ------------------------------------------------------------------------------------------------


def _torch_root() -> str | None:
    torch = sys.modules.get("torch")  # a torch frame exists only once torch is imported
    f = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.abspath(f)) + _SEP if f else None


def _is_tool(filename: str) -> bool:
    if filename.startswith("<"):
        return True
    if filename.startswith(_PACKAGE + _SEP):
        return True
    torch = _torch_root()
    return torch is not None and filename.startswith(torch)


TOOLS = Skip(_is_tool)

def user_frame(depth: int = 1, skip: Skip = TOOLS) -> FrameType | None:
    """The first frame, from ``depth`` frames above the caller outwards (``sys._getframe(depth)`` as the caller
    would write it), whose file ``skip`` does not pass over; None when every frame is passed over.

    On the hot paths (every redirected call, every dumped op): positional parameters only (a keyword-only one
    keeps CPython 3.11 from specialising the call), one dict lookup per frame."""
    f = _getframe(depth + 1)
    cache = skip.cache
    while f is not None:
        fn = f.f_code.co_filename
        try:
            s = cache[fn]
        except KeyError:
            s = skip(fn)
        if not s:
            return f
        f = f.f_back
    return None


def past_code(f: FrameType | None, code) -> FrameType | None:
    """``f``, or the first frame under it (towards its callers) that does not run ``code``: past a function's own
    frames when it calls itself through torch (a dump's torch-function handler inside another dump's)."""
    while f is not None and f.f_code is code:
        f = f.f_back
    return f


_USER_ROOTS: list[str] = [os.path.abspath(p) for p in os.environ.get("ASCENDIFY_USER_CODE", "").split(os.pathsep)
                          if p]


@cache
def library_roots() -> tuple[str, ...]:
    """Folders that hold library code: the standard library, site-packages, torch, ascendify itself, runpy."""
    import runpy

    roots = {os.path.abspath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
             if (p := sysconfig.get_paths().get(key))}
    roots.update(os.path.abspath(p) for p in sys.path if p and ("site-packages" in p or "dist-packages" in p))
    roots.update((_PACKAGE, os.path.abspath(runpy.__file__)))
    torch = _torch_root()
    if torch:
        roots.add(torch.rstrip(_SEP))
    return tuple(sorted(roots))


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r + _SEP) for r in roots)


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    return not _under(path, _USER_ROOTS) and _under(path, library_roots())


LIBRARIES = Skip(_is_library)


def is_user_file(filename: str) -> bool:
    """True when ``filename`` is the user's code rather than a library (torch, site-packages, the standard
    library, ascendify) or generated code."""
    return not LIBRARIES(filename)


def add_user_root(path: str) -> None:
    """Count files under ``path`` as user code even inside site-packages (the ``-m`` entry package, or the
    folders in ``ASCENDIFY_USER_CODE``)."""
    p = os.path.abspath(path)
    if p not in _USER_ROOTS:
        _USER_ROOTS.append(p)
        LIBRARIES.cache.clear()


def passing(*, prefixes: Iterable[str] = (), contains: Iterable[str] = (), base: Skip | None = TOOLS) -> Skip:
    """A skip that also passes over files starting with one of ``prefixes`` or holding one of ``contains``
    (``base`` too, unless it is None)."""
    prefixes, contains = tuple(prefixes), tuple(contains)

    def test(filename: str) -> bool:
        return ((base is not None and base(filename)) or filename.startswith(prefixes)
                or any(c in filename for c in contains))

    return Skip(test)
