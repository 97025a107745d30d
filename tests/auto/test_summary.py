"""The ``ascendify run`` summary at the exit: call sites keep their file name and line at 80 columns."""

from __future__ import annotations

import io

from ascendify.auto import render


def _rep():
    site = "examples/cuda_project/some/deeper/folder/train_gpt.py:{}"
    return {
        "target": {"name": "cpu", "notes": []},
        "redirected": [
            {"api": "torch.cuda.synchronize", "count": 8, "first_site": site.format(177), "to": "cpu: synchronize"},
            {"api": "torch.cuda.get_device_name", "count": 1, "first_site": site.format(108),
             "to": "cpu: get_device_name"},
        ],
        "no_effect": [{"api": "torch.cuda.max_memory_allocated", "count": 2, "first_site": site.format(207),
                       "reason": "no device memory statistics on cpu: returns 0"}],
        "unsupported": [],
        "unmapped": [],
        "findings": [{"file": site.format(113).rpartition(":")[0], "line": 113, "code": "device.type == 'cuda'",
                      "message": "rewritten in memory to test for 'cpu' / 'gloo'"}],
    }


def test_sites_and_api_names_are_whole_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    render.render(_rep(), file=buf)
    text = buf.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    for line_no in (177, 108, 207, 113):  # every call site names its file and line (used to be cut to "examples/cu…")
        assert f"train_gpt.py:{line_no}" in text, text
    assert "torch.cuda.synchronize" in text
    assert "…" not in text.replace("…/", "")  # nothing truncated with an ellipsis except shortened folders
    assert text.splitlines()[0].startswith("ascendify run → cpu")
