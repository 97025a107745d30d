"""Makes the shared test helpers in this folder (``example_runs``) importable from every test package, and guards
the source tree: a test session must leave it as it found it.

The guard compares ``git status --porcelain --ignored`` before and after the session and fails (an error at the
teardown of the last test) when a test wrote into the checkout: any change under ``examples/`` (a checkpoint a
script wrote into its own folder is copied into every later migration of that folder), and any new *ignored*
file anywhere (checkpoints, ``out/``, ``runs/``: ignored because programs write them). Caches
(``__pycache__``, ``.pytest_cache``, ``.ruff_cache``, ``*.egg-info``) are left out, and so are new tracked or
untracked files outside ``examples/``, which are people's work in progress. Skipped where the tests do not run
from a git checkout. Run tests from temporary folders: ``tmp_path`` as the working directory, or pass the
program an output path (``--checkpoint``, ``--out-json``) there.
"""

from __future__ import annotations

import pytest
from example_runs import tree_state


@pytest.fixture(scope="session", autouse=True)
def source_tree_untouched():
    before = tree_state()
    yield
    if before is None:
        return
    after = tree_state()
    if after is None:
        return
    changed = sorted(after - before) + [f"(gone) {line}" for line in sorted(before - after)]
    if changed:
        pytest.fail("the tests wrote into the source tree (run them from tmp_path, or pass an output path):\n  "
                    + "\n  ".join(changed), pytrace=False)
