"""Fixtures for ascendify.auto: in-process redirection to the CPU (always undone), subprocess helpers."""

from __future__ import annotations

import pytest


@pytest.fixture
def auto_cpu():
    """Redirect CUDA to the CPU for one test; every patch is undone afterwards, even on failure."""
    import ascendify.auto

    s = ascendify.auto.enable("cpu")
    try:
        yield s
    finally:
        ascendify.auto.disable()


@pytest.fixture
def auto_cpu_strict():
    import ascendify.auto

    s = ascendify.auto.enable("cpu", strict=True)
    try:
        yield s
    finally:
        ascendify.auto.disable()
