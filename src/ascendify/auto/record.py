"""What happened during a run: redirections, calls with no effect, unsupported calls, unmapped device values.

Each entry counts calls and keeps the *first call site* (``file:line`` of the first frame outside torch and
ascendify). Calls that torch or another library makes itself are counted apart (``indirect``). Counting is a
look at the few frames up to the nearest caller outside ascendify, a dict lookup and an increment; the whole stack
is walked only the first time an API is seen, so recording stays off the hot path.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import sysconfig
from collections.abc import Callable
from functools import cache
from typing import Any

from ascendify.program import frames
from ascendify.program.frames import is_user_file, user_frame


class UnsupportedOnTarget(RuntimeError):
    """A CUDA API with no equivalent on the target device was called (or, with ``--strict``, a degraded one)."""


# ---------------------------------------------------------------------------------------------- call sites
# The walks are :func:`ascendify.program.frames.user_frame`'s; what is user code is its ``is_user_file``.

_GENERATED = frames.Skip(lambda filename: filename.startswith("<"))
_LIBRARY = frames.LIBRARIES.cache
# call_site's fallback when no frame is the user's: the first outside torch, ascendify and runpy (a library's)
_NOT_A_SITE = frames.passing(prefixes=(os.path.abspath(runpy.__file__),))


def caller_is_user(depth: int = 2) -> bool:
    """True when the nearest real frame above ``depth`` (skipping ``<string>``-style frames) is user code."""
    f = user_frame(depth, _GENERATED)
    if f is None:
        return False
    fn = f.f_code.co_filename
    library = _LIBRARY.get(fn)  # is_user_file's cached answer, read inline: this is on every redirected call
    return not (frames.LIBRARIES(fn) if library is None else library)


_OWNER_CACHE: dict[str, str] = {}
# torch's subpackages that compile or trace: a call made from their frames is torch's own, not the user's
_TORCH_MACHINERY = frozenset({"_dynamo", "_inductor", "_functorch", "fx", "_subclasses", "_higher_order_ops",
                              "_export", "export", "_guards.py", "_prims", "_refs", "_decomp", "_library"})


def _owner(filename: str) -> str:
    """Who a frame belongs to, as far as crediting a call goes: ``"user"``, a library's name (``"torch"`` for its
    compilers and tracers, ``"transformers"``), or ``""`` for frames that only pass a call on (ascendify itself,
    the standard library, the rest of torch, generated code such as ``<string>`` or torch.fx's
    ``<eval_with_key>``)."""
    r = _OWNER_CACHE.get(filename)
    if r is None:
        if filename.startswith("<"):
            r = ""
        elif is_user_file(filename):
            r = "user"
        else:
            path = os.path.abspath(filename)
            own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the ascendify package
            torch = sys.modules.get("torch")
            torch_root = os.path.dirname(os.path.abspath(torch.__file__)) if getattr(torch, "__file__", None) else ""
            if path.startswith(own + os.sep):
                r = ""
            elif torch_root and path.startswith(torch_root + os.sep):
                # torch's compilers make calls of their own (inductor asks for the device's properties, dynamo
                # reads the autocast state while it traces); the rest of torch passes on a call the user made
                # (torch.cuda.amp.autocast() builds a torch.amp.autocast, mp.spawn starts processes)
                sub = path[len(torch_root) + 1 :].split(os.sep, 1)[0]
                r = "torch" if sub in _TORCH_MACHINERY else ""
            else:
                r = ""  # the standard library (threading, contextlib, copy) calls on someone's behalf
                for root in _site_roots():
                    if path.startswith(root + os.sep):
                        r = os.path.relpath(path, root).split(os.sep)[0].removesuffix(".py") or "?"
                        break
        _OWNER_CACHE[filename] = r
    return r


@cache
def _site_roots() -> tuple[str, ...]:
    """The folders third-party libraries are installed in (site-packages, dist-packages)."""
    roots = {os.path.abspath(p) for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(os.path.abspath(p))
    return tuple(sorted(roots, key=len, reverse=True))


# Who made a call: the nearest frame that is not ascendify, the standard library, generated code or torch's plain
# API decides (user_frame past the files whose _owner is ""). A user's frame there means the user called the API
# (directly, or through a torch wrapper such as ``torch.cuda.amp.autocast`` or ``torch.multiprocessing.spawn``); a
# frame of torch's compilers or of another library means that code called it (``"torch"`` while dynamo/inductor
# compile or trace, ``"transformers"``), even when the user's code is further up the stack. Recorder.hit and noop
# read the frame's owner from _OWNER_CACHE (filled by this skip's test): a few frames and a dict lookup each.
_PASSES_ON = frames.Skip(lambda filename: _owner(filename) == "")


def call_site(depth: int = 2) -> str:
    """``file:line`` of the first user frame above ``depth``; failing that, the first frame outside torch,
    ascendify and runpy (a library that called the API itself)."""
    f = frames.user_frame(depth, frames.LIBRARIES) or frames.user_frame(depth, _NOT_A_SITE)
    return frames.site(f, "<unknown>")


TOOL_DEPTH = [0]  # above 0 while ascendify does work of its own in the user's run (tool_calls)


@contextlib.contextmanager
def tool_calls():
    """Calls made inside this block are ascendify's own, never the user's, whatever the stack above holds:
    ``ascendify port``'s observer seeding every generator of the run (``torch.manual_seed`` calls
    ``torch.cuda.manual_seed_all``: counted apart as indirect calls by ``ascendify``), or reading a loss and a
    model's output (``ascendify advise``'s tracer records none of the ops, so none is a sync of the user's)."""
    TOOL_DEPTH[0] += 1
    try:
        yield
    finally:
        TOOL_DEPTH[0] -= 1


# ---------------------------------------------------------------------------------------------- recorder


class Recorder:
    """Counts and first call sites, in four kinds (see ``docs/auto.md``).

    - ``redirected``: a CUDA API or value now goes to the target (``torch.cuda.synchronize`` -> ``torch.npu...``);
    - ``no_effect``: accepted but does nothing on the target (``torch.backends.cudnn.benchmark``), or approximated;
    - ``unsupported``: no equivalent on the target; the call raised :class:`UnsupportedOnTarget` (or was
      skipped, for pure annotations such as NVTX ranges, unless ``strict``);
    - ``unmapped``: a CUDA-looking string in a device position that is not a device (``"cuda:x"``); passed on.

    Redirected and no-effect calls that torch (or another library) makes itself, rather than the user's code
    (dynamo and inductor querying the device while they compile, ``autocast.__enter__`` reading the autocast
    state), are kept apart in ``indirect``, keyed by the library, so the user's tables list only the user's calls.
    """

    def __init__(self, target: str = "", strict: bool = False) -> None:
        self.target = target
        self.strict = strict
        self.redirected: dict[str, list[Any]] = {}
        self.no_effect: dict[str, list[Any]] = {}
        self.unsupported: dict[str, list[Any]] = {}
        self.unmapped: dict[str, list[Any]] = {}
        self.findings: list[dict[str, Any]] = []
        self.indirect: dict[tuple[str, str, str], list[Any]] = {}  # (library, kind, api): calls torch etc. made
        self.on_first: Callable[[], None] | None = None  # run when a new API is first seen (env translation)

    # hot path: a short walk to the nearest caller that is not ascendify, and one dict lookup
    def hit(self, api: str, detail: str = "") -> None:
        if TOOL_DEPTH[0]:
            return self._indirect("ascendify", "redirected", api, detail)
        f = user_frame(1, _PASSES_ON)  # from hit's caller up: ascendify's frames pass on (see _PASSES_ON)
        by = _OWNER_CACHE[f.f_code.co_filename] if f is not None else "user"
        if by != "user":
            self._indirect(by, "redirected", api, detail)
            return
        e = self.redirected.get(api)  # _count's common case, inline: an API seen before
        if e is not None:
            e[0] += 1
        elif self._count(self.redirected, api, detail, 3) and self.on_first is not None:
            self.on_first()

    def _count(self, table: dict, key: Any, detail: str, depth: int) -> bool:
        """One more call under ``key`` in ``table``; the first keeps its site (``depth`` frames above the caller,
        as :func:`call_site` counts them there) and ``detail``, and returns True."""
        e = table.get(key)
        if e is not None:
            e[0] += 1
            return False
        table[key] = [1, call_site(depth + 1), detail]
        return True

    def _indirect(self, by: str, kind: str, api: str, detail: str) -> None:
        """A call that torch (or another library) made, not the user's code: counted apart, with the user's line
        that led to it (``with autocast(...):``, the call of a compiled model) as its site."""
        if self._count(self.indirect, (by, kind, api), detail, 4) and self.on_first is not None:
            self.on_first()

    def noop(self, api: str, reason: str) -> None:
        if TOOL_DEPTH[0]:
            return self._indirect("ascendify", "no_effect", api, reason)
        f = user_frame(1, _PASSES_ON)  # from the caller up: ascendify's frames pass on (see _PASSES_ON)
        by = _OWNER_CACHE[f.f_code.co_filename] if f is not None else "user"
        if by != "user":
            self._indirect(by, "no_effect", api, reason)
            return
        e = self.no_effect.get(api)  # _count's common case, inline
        if e is not None:
            e[0] += 1
        else:
            self._count(self.no_effect, api, reason, 3)

    def unsupported_call(self, api: str, reason: str, ignorable: bool = False) -> None:
        """Record an unsupported call; raise :class:`UnsupportedOnTarget` unless it is ignorable and not strict."""
        site = call_site(3)
        if self.strict and ignorable:  # the reason tells what happens without --strict: say what happens now
            reason = (reason.replace("; skipped", "") + "; --strict made this call an error (without --strict it "
                      "is skipped)")
        e = self.unsupported.get(api)
        if e is None:
            self.unsupported[api] = [1, site, reason]
        else:
            e[0] += 1
        if self.strict or not ignorable:
            raise UnsupportedOnTarget(f"{api} is not supported on {self.target} (called at {site}): {reason}")

    def unmapped_value(self, api: str, value: Any) -> None:
        key = f"{api}({value!r})"
        site = call_site(4)
        e = self.unmapped.get(key)
        if e is None:
            self.unmapped[key] = [1, site, f"{value!r} looks like a CUDA device but is not one; passed on unchanged"]
        else:
            e[0] += 1
        if self.strict:
            raise UnsupportedOnTarget(
                f"{api}: {value!r} in a device position could not be mapped to {self.target} (called at {site})"
            )

    def finding(self, site: str, message: str) -> None:
        self.findings.append({"site": site, "message": message})

    def as_dict(self) -> dict[str, Any]:
        def rows(d: dict[str, list[Any]], third: str) -> list[dict[str, Any]]:
            out = [{"api": k, "count": v[0], "first_site": v[1], third: v[2]} for k, v in d.items()]
            return sorted(out, key=lambda r: (-r["count"], r["api"]))

        return {
            "target": self.target,
            "strict": self.strict,
            "redirected": rows(self.redirected, "to"),
            "no_effect": rows(self.no_effect, "reason"),
            "unsupported": rows(self.unsupported, "reason"),
            "unmapped": rows(self.unmapped, "reason"),
            "findings": list(self.findings),
            "indirect": sorted(({"api": api, "count": v[0], "first_site": v[1], "by": by, "kind": kind,
                                 "detail": v[2]} for (by, kind, api), v in self.indirect.items()),
                               key=lambda r: (r["by"], -r["count"], r["api"])),
        }
