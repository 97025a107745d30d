"""Robustness on code nobody wrote for these tests: PyTorch's own CUDA-heavy modules (read from the installed
torch package, never imported). Every file converts, compiles, and a second run changes nothing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ascendify.migrate import Options, migrate_source


def _torch_files() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    files = sorted((root / "cuda").glob("*.py")) + sorted((root / "amp").glob("*.py"))
    files += sorted((root / "distributed").glob("*.py"))[:12]
    return [p for p in files if p.stat().st_size < 400_000]


FILES = _torch_files()


@pytest.mark.skipif(not FILES, reason="torch is not installed")
@pytest.mark.parametrize("target", ["npu", "portable"])
def test_torch_sources_convert_compile_and_are_idempotent(target):
    opts = Options(target=target)
    changed = 0
    for path in FILES:
        data = path.read_bytes()
        new, result = migrate_source(data, opts, path=path.name)
        compile(new, path.name, "exec")
        assert not [f for f in result.findings if f.rule == "ASC000"], path
        again, _ = migrate_source(new, opts, path=path.name)
        assert again == new, path
        changed += new != data
    assert changed >= 5
