"""Patch a module when it is first imported, not before: importing FSDP or DeviceMesh up front would cost
seconds at start-up for programs that never use them.

>>> hooks = PostImportHooks()
>>> hooks.watch("json", lambda m: None)   # already imported: the callback runs at once
True
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType


class PostImportHooks(importlib.abc.MetaPathFinder):
    """A meta-path finder that runs ``callback(module)`` right after a watched module is executed."""

    def __init__(self) -> None:
        self._hooks: dict[str, Callable[[ModuleType], None]] = {}

    def watch(self, name: str, callback: Callable[[ModuleType], None]) -> bool:
        """Run ``callback`` on module ``name`` now if imported (returns True), else when it is imported."""
        mod = sys.modules.get(name)
        if mod is not None:
            callback(mod)
            return True
        self._hooks[name] = callback
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)
        return False

    def remove(self) -> None:
        self._hooks.clear()
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, name, path, target=None):
        if name not in self._hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real_exec = loader.exec_module
        hooks = self._hooks

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            cb = hooks.pop(name, None)
            if cb is not None:
                cb(module)

        loader.exec_module = exec_module
        return spec
