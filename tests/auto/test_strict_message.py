"""``ascendify run --strict``: an annotation call that raises says so, never "skipped"."""

from __future__ import annotations

import pytest
import torch

from ascendify.auto.record import UnsupportedOnTarget


def test_strict_error_says_what_happened(auto_cpu_strict):
    with pytest.raises(UnsupportedOnTarget) as info:
        torch.cuda.nvtx.range_push("x")
    msg = str(info.value)
    assert "--strict made this call an error" in msg and "; skipped" not in msg
    assert "--strict made this call an error" in auto_cpu_strict.rec.unsupported["torch.cuda.nvtx.range_push"][2]


def test_without_strict_the_record_still_says_skipped(auto_cpu):
    torch.cuda.nvtx.range_push("x")
    assert "skipped" in auto_cpu.rec.unsupported["torch.cuda.nvtx.range_push"][2]


def test_the_run_headline_counts_in_words():
    from ascendify.auto.render import headline

    rep = {"target": {"name": "cpu"}, "redirected": [{"count": 1}], "no_effect": [], "unsupported": [],
           "unmapped": [], "findings": [{}]}
    text = headline(rep)
    assert "1 CUDA API redirected (1 call)" in text and text.endswith("1 finding")
