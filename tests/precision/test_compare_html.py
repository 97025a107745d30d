"""The HTML report opened in headless Chromium: verdict, first divergence with its source line, the plot, the
drill-down table (skipped, with the reason, where Debian's chromium is not installed; CI installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from precision_conftest import planted_models as M

from ascendify.precision import compare_models
from ascendify.precision.compare_render import html_report, write_outputs

CHROMIUM = "/usr/bin/chromium"


def _dom(html_file: Path, tmp_path: Path) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", html_file.as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_page_is_self_contained_without_a_browser():
    r = compare_models(M.reference(), M.twin("gelu_tanh"), M.inputs(), copy_weights=True)
    page = html_report(r).to_html()
    assert "data:image/png;base64," in page
    assert not re.search(r"""(src|href)=["']https?://""", page), "no external requests"
    assert "blocks.1.mlp.act" in page


@pytest.mark.skipif(not Path(CHROMIUM).exists() or not shutil.which(CHROMIUM),
                    reason="Debian's chromium is not installed here (CI installs it)")
def test_report_in_headless_chromium(tmp_path):
    r = compare_models(M.reference(), M.twin("head_permutation"), M.inputs(), copy_weights=True)
    paths = write_outputs(r, tmp_path / "out")
    dom = _dom(Path(paths[2]), tmp_path)
    for anchor in ("verdict", "first-divergence", "error-plot", "flagged", "drill-down", "unmatched", "settings"):
        assert f'id="{anchor}"' in dom, anchor
    verdict = re.search(r'<div class="verdict fail"[^>]*>.*?</div>', dom, re.S)
    assert verdict and "DIVERGENCE" in verdict.group(0) and "blocks.1.attn" in verdict.group(0)
    # the source of the first divergence, with its line highlighted
    assert re.search(r'class="line hl"><span class="ln">\d+</span>\s*x = x \+ self\.attn', dom)
    # the plot rendered as an image, and the drill-down table has one row per target call
    assert re.search(r'<img [^>]*src="data:image/png;base64,', dom)
    table = dom.split('id="drill-down"', 1)[1]
    assert table.count("<tr") - 1 >= len(r.nodes)
    assert 'class="highlight"' in table
