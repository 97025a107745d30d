"""Processes started with ``multiprocessing``'s *spawn* method (``torch.multiprocessing.spawn``, DataLoader
workers in spawn mode) re-import the main script in a fresh interpreter, where nothing is redirected. Their main
module is replaced by a small bootstrap (``ascendify/auto/spawn_main.py``) that enables redirection to the same
target first and then runs the real main script as ``__mp_main__``, exactly as multiprocessing would.
"""

from __future__ import annotations

import os
from typing import Any

BOOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spawn_main.py")


def install(s) -> None:
    import multiprocessing.spawn as sp

    real = sp.get_preparation_data
    target = s.target.device_type

    def get_preparation_data(name: str) -> dict[str, Any]:
        d = real(name)
        main_path = d.get("init_main_from_path")
        main_name = d.get("init_main_from_name")
        if main_name and main_name != "__main__":
            os.environ["ASCENDIFY_SPAWN_MODULE"] = main_name
            os.environ.pop("ASCENDIFY_SPAWN_PATH", None)
        elif main_path:
            os.environ["ASCENDIFY_SPAWN_PATH"] = main_path
            os.environ.pop("ASCENDIFY_SPAWN_MODULE", None)
        else:
            return d
        d.pop("init_main_from_name", None)
        d["init_main_from_path"] = BOOT
        os.environ["ASCENDIFY_TARGET"] = target
        os.environ["ASCENDIFY_STRICT"] = "1" if s.strict else "0"
        s.rec.hit("multiprocessing spawn", f"child process redirected to {target}")
        return d

    s.patches.set(sp, "get_preparation_data", get_preparation_data)
    saved = {k: os.environ.get(k) for k in ("ASCENDIFY_SPAWN_PATH", "ASCENDIFY_SPAWN_MODULE", "ASCENDIFY_STRICT",
                                            "ASCENDIFY_REWRITE_CHECKS")}

    def undo() -> None:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    s.patches.on_restore(undo)
