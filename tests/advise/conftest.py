"""Shared runs for the advise tests: the four test programs (two with planted slow patterns, their two clean twins)
run through `ascendify advise` in ONE subprocess (one emulator start), the planted language model with
`--apply`. Each run leaves NAME.json, NAME.trace.json, NAME-html/ and NAME.txt (the terminal output at 80 columns)
in a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).resolve().parent / "programs"
RUNS = ("lm_planted", "lm_clean", "loop_planted", "loop_clean")

DRIVER = r"""
import contextlib, io, os, sys
from ascendify.cli import main
out, programs = sys.argv[1], sys.argv[2]
for name in sys.argv[3:]:
    prog = os.path.join(programs, name + ".py")
    argv = ["advise", "--steps", "3", "--json", f"{out}/{name}.json", "--trace", f"{out}/{name}.trace.json",
            "--html", f"{out}/{name}-html"]
    if name == "lm_planted":
        argv += ["--apply", f"{out}/lm-fast", "--project", programs]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv + ["--", "python", prog])
    with open(f"{out}/{name}.txt", "w") as f:
        f.write(buf.getvalue())
    with open(f"{out}/{name}.code", "w") as f:
        f.write(str(code))
"""


@pytest.fixture(scope="session")
def advised(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("advise-runs")
    env = dict(os.environ, COLUMNS="80", PYTHONDONTWRITEBYTECODE="1")
    env.pop("ASCENDIFY_ADVISE", None)
    r = subprocess.run([sys.executable, "-c", DRIVER, str(out), str(PROGRAMS), *RUNS], cwd=out, env=env,
                       capture_output=True, text=True, timeout=1500)
    (out / "driver.log").write_text(r.stdout + "\n--- stderr\n" + r.stderr)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def planted(name: str) -> list[tuple[int, str]]:
    """``(line, rule)`` for every ``# PLANT ADVxxx [ADVyyy]`` comment of a test program."""
    out = []
    for i, line in enumerate((PROGRAMS / f"{name}.py").read_text().splitlines(), 1):
        if "# PLANT " in line:
            out += [(i, r) for r in line.split("# PLANT ", 1)[1].split()]
    return out
