"""ascendify.program.frames: the one walk to the user's frame (auto, the emulator, precision, advise)."""

import doctest
import functools
import os
import re
import sys
from pathlib import Path

from ascendify.program import frames

SRC = Path(frames.__file__).resolve().parents[1]


def test_docstring_examples():
    result = doctest.testmod(frames)
    assert result.attempted > 0 and result.failed == 0


def _caller_in(filename: str):
    """``call(fn, *args) -> fn(*args)``, as if written in ``filename`` (a library, ascendify, generated code)."""
    scope: dict = {}
    exec(compile("def call(fn, *args):\n    return fn(*args)\n", filename, "exec"), scope)
    return scope["call"]


def test_user_frame_passes_over_tools_and_generated_code():
    here = sys._getframe()
    assert frames.user_frame(0) is here  # this test's own file is neither a tool nor generated
    wrapper = _caller_in(os.path.join(str(SRC), "auto", "fake_wrapper.py"))
    generated = _caller_in("<string>")
    # called through an ascendify file and a <string> frame: the frame found is still this test's
    assert wrapper(functools.partial(generated, frames.user_frame)) is here
    got, line = wrapper(functools.partial(generated, lambda: frames.site(frames.user_frame(2)))), here.f_lineno
    assert got == f"{frames.short_path(__file__)}:{line}"
    library = _caller_in(os.path.join(frames.library_roots()[0], "somelib", "core.py"))
    assert library(frames.user_frame, 0).f_code.co_filename.endswith("core.py")  # a library made the call
    assert library(frames.user_frame, 0, frames.LIBRARIES) is here  # the user's line behind it


def test_libraries_are_passed_over_only_for_the_users_own_code(tmp_path):
    site_lib = os.path.join(frames.library_roots()[0], "somelib", "core.py")
    assert frames.TOOLS(site_lib) is False and frames.LIBRARIES(site_lib) is True
    mine = str(tmp_path / "train.py")
    assert frames.is_user_file(mine) and not frames.is_user_file(os.__file__) and not frames.is_user_file("<x>")
    saved = list(frames._USER_ROOTS)
    try:
        frames.add_user_root(os.path.dirname(site_lib))  # an installed package run with -m is the user's
        assert frames.is_user_file(site_lib)
    finally:
        frames._USER_ROOTS[:] = saved
        frames.LIBRARIES.cache.clear()


def test_passing_adds_prefixes_and_substrings():
    skip = frames.passing(prefixes=("/opt/hooks/",), contains=("/msprobe/",))
    assert skip("/opt/hooks/h.py") and skip("/x/msprobe/core.py") and skip("<string>")
    assert not skip("/home/me/train.py")
    bare = frames.passing(contains=("/emulator/",), base=None)
    assert bare("/a/emulator/b.py") and not bare("<string>")


def test_no_second_walker_to_the_users_frame():
    """The walks to "the user's line" go through frames.user_frame; a loop over f_back elsewhere is one of these
    (each says why it walks itself), or a module whose owner wires it to user_frame (see the docs)."""
    own_walk = {
        "emulator/ops/fidelity.py",  # counts the levels up to the frame user_frame found (a warning's stacklevel)
        "advise/trace.py",  # one pass per op that also reads the fused op and the library on the way
        "port/seen.py",  # names the variable that holds a model (the locals of three frames up), spots torch.compile
    }
    found = {str(p.relative_to(SRC)).replace(os.sep, "/") for p in SRC.rglob("*.py")
             if re.search(r"\bf_back\b", p.read_text(encoding="utf-8"))}
    assert found - {"program/frames.py"} <= own_walk, sorted(found - own_walk)
