"""Main module of processes spawned under redirection (see :mod:`ascendify.auto.redirects.spawn`).

multiprocessing runs this file as ``__mp_main__``; it enables redirection (target, strictness and the check
rewrite from the environment the parent set) and then runs the parent's real main script or module under the
same name, so the functions the parent pickled by reference (``__main__.worker``) are found here.
"""

import os
import runpy

import ascendify.auto as _auto

_s = _auto.enable(os.environ.get("ASCENDIFY_TARGET") or "auto", strict=os.environ.get("ASCENDIFY_STRICT") == "1")
if os.environ.get("ASCENDIFY_REWRITE_CHECKS") == "1":
    from ascendify.auto.rewrite import RewriteFinder, compile_user_source

    RewriteFinder(_s.target.device_type, _s.target.dist_backend, None).install()
if os.environ.get("ASCENDIFY_SPAWN_MODULE"):
    globals().update(runpy.run_module(os.environ["ASCENDIFY_SPAWN_MODULE"], run_name="__mp_main__"))
elif os.environ.get("ASCENDIFY_REWRITE_CHECKS") == "1":
    _path = os.environ["ASCENDIFY_SPAWN_PATH"]
    with open(_path, "rb") as _f:
        _code = compile_user_source(_f.read(), _path, _s.target.device_type, _s.target.dist_backend)
    _ns = {"__name__": "__mp_main__", "__file__": _path, "__builtins__": __builtins__}
    exec(_code, _ns)
    globals().update({k: v for k, v in _ns.items() if k not in ("__name__", "__builtins__")})
else:
    globals().update(runpy.run_path(os.environ["ASCENDIFY_SPAWN_PATH"], run_name="__mp_main__"))
