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

A clone has nothing beside it: the project's reference data (``../shared/reference``, from which
``tools/build_kb.py`` makes the package data in ``src/ascendify/data/``) is there in CI and on the developers'
machines only. So in this process a test reads it only when marked ``@pytest.mark.reference`` and given it
through the ``reference_dir`` fixture (which skips, with the reason, where it is absent); any other read of
``../shared`` fails as if the folder were not there (FileNotFoundError) and fails the test, naming the file.
``.ci/run`` runs the marked tests once more in a copy of the clone with nothing beside it.

Started in the background by a script (``nohup pytest &``, a CI runner), pytest inherits an ignored SIGINT, and so
would every program a test starts: a test's Ctrl-C to ``ascendify port`` went unheard and the test hung until
its time-out. Here SIGINT gets Python's own handler back, so the programs the tests start hear it as they would
from a terminal.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path

import pytest
from example_runs import tree_state

from ascendify.core import fileio

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
_SHARED_PREFIXES = tuple({str(SHARED) + os.sep, str(SHARED.resolve()) + os.sep})  # as named, and a link's target
_reads: list[str] = []  # ../shared paths opened by the running test (or by an import outside any test)
_allowed = [False]  # the running test is marked ``reference``


def _audit(event: str, args: tuple) -> None:
    if event != "open" or _allowed[0]:
        return
    path = args[0]
    if isinstance(path, int):
        return
    try:
        path = os.fsdecode(path)
    except TypeError:
        return
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    if os.path.normpath(path).startswith(_SHARED_PREFIXES):
        _reads.append(path)
        raise FileNotFoundError(errno.ENOENT, "../shared is not beside a plain clone (the test suite hides it from "
                                "tests not marked reference)", path)


sys.addaudithook(_audit)

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The compiled helpers (the emulated NPU's C++ kernels, the dump's fused statistics) are cached under
# ~/.cache/ascendify, built once by scripts/setup.sh; a test that moves HOME (pytester does, for the pytest it
# starts) would have every program it starts build them again (a minute or two on 2 cores): keep the one cache.
os.environ.setdefault("ASCENDIFY_CACHE", str(fileio.cache_dir("")))


@pytest.fixture(autouse=True)
def _no_shared_reads(request):
    if _reads:  # before any test: a module read it when it was imported
        read, _reads[:] = sorted(set(_reads)), []
        pytest.fail(f"a test module read {', '.join(read)} when it was imported: a clone has no ../shared beside "
                    "it; use the package data (ascendify.core.knowledge)", pytrace=False)
    _allowed[0] = request.node.get_closest_marker("reference") is not None
    yield
    _allowed[0] = False
    if _reads:
        read, _reads[:] = sorted(set(_reads)), []
        pytest.fail(f"{request.node.nodeid} read {', '.join(read)}: a clone has no ../shared beside it; use the "
                    "package data (ascendify.core.knowledge) or mark the test @pytest.mark.reference and take the "
                    "folder from the reference_dir fixture", pytrace=False)


@pytest.fixture
def reference_dir(request) -> Path:
    """The project's reference data (``../shared/reference``); skips the test where the clone has nothing beside
    it. Only for tests marked ``@pytest.mark.reference``."""
    if request.node.get_closest_marker("reference") is None:
        pytest.fail("reference_dir is for tests marked @pytest.mark.reference", pytrace=False)
    ref = SHARED / "reference"
    if not (ref / "torch_npu_api.json").is_file():
        pytest.skip(f"no reference data beside the clone ({ref}); the package does not need it, only "
                    "tools/build_kb.py does")
    return ref


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """With pytest-xdist (``-n 2``): the workers get the session's ``COLUMNS`` as it was (xdist's workers otherwise
    see ``COLUMNS=80``, and the verbs' output would wrap where it does not in a plain run)."""
    node.workerinput["ascendify_columns"] = os.environ.get("COLUMNS")


def pytest_configure(config):
    given = getattr(config, "workerinput", None)
    if given is not None and "ascendify_columns" in given:
        if given["ascendify_columns"] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = given["ascendify_columns"]


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
