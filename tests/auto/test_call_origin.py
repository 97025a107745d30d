"""Who made a redirected call: the user's code directly, or torch (or another library) on its behalf.

A new user's run listed ``torch.cuda.get_device_properties`` and ``torch.is_autocast_enabled`` at their own line:
torch.compile's dynamo/inductor and autocast made those calls, the script did not. Only calls made from a user
frame directly (no torch frame between it and the redirect) are the user's; the others are counted apart."""

from __future__ import annotations

import contextlib
import json
import os

import torch
from auto_support import SCRIPTS, ascendify_run, last_json

from ascendify.auto import record, render
from ascendify.auto.record import Recorder


def _library_function(folder: str, name: str):
    """A function whose frames belong to ``folder`` (as if torch or an installed library defined it)."""
    ns: dict = {}
    code = compile("def call(f, *a):\n    return f(*a)\n", os.path.join(folder, name), "exec")
    exec(code, ns)
    return ns["call"]


def test_a_call_torch_makes_is_counted_apart_with_the_users_line_that_led_to_it():
    rec = Recorder("cpu")
    inside_torch = _library_function(os.path.dirname(torch.__file__), "_dynamo/fake_for_test.py")
    inside_torch(rec.hit, "torch.cuda.get_device_properties", "cpu: get_device_properties")  # torch's call
    inside_torch(rec.noop, "torch.backends.cudnn.benchmark", "no cudnn")
    rec.hit("torch.cuda.synchronize", "cpu: synchronize")  # the user's own call
    rep = rec.as_dict()
    assert [r["api"] for r in rep["redirected"]] == ["torch.cuda.synchronize"]
    assert rep["no_effect"] == []
    ind = {(r["by"], r["kind"], r["api"]): r for r in rep["indirect"]}
    assert set(ind) == {("torch", "redirected", "torch.cuda.get_device_properties"),
                        ("torch", "no_effect", "torch.backends.cudnn.benchmark")}
    site = ind[("torch", "redirected", "torch.cuda.get_device_properties")]["first_site"]
    assert "test_call_origin.py:" in site  # the user's line that led torch to the call
    for _ in range(2):
        inside_torch(rec.hit, "torch.cuda.get_device_properties", "cpu: get_device_properties")
    assert rec.as_dict()["indirect"][0]["count"] == 3


def test_other_libraries_are_named_and_the_standard_library_passes_the_call_on():
    rec = Recorder("cpu")
    lib = _library_function(os.path.join(record._site_roots()[0], "somelib"), "core.py")
    lib(rec.hit, "torch.cuda.current_device", "cpu: current_device")
    with contextlib.ExitStack() as stack:  # contextlib (stdlib) makes the call: the user's code asked for it
        stack.callback(rec.hit, "torch.cuda.synchronize", "cpu: synchronize")
    rep = rec.as_dict()
    assert [(r["by"], r["api"]) for r in rep["indirect"]] == [("somelib", "torch.cuda.current_device")]
    assert [r["api"] for r in rep["redirected"]] == ["torch.cuda.synchronize"]
    assert "test_call_origin.py:" in rep["redirected"][0]["first_site"]


def test_the_summary_lists_library_calls_apart_from_the_tables():
    rows = [{"api": "torch.cuda.get_device_properties", "count": 1, "first_site": "t.py:8", "by": "torch",
             "kind": "redirected", "detail": "cpu"},
            {"api": "torch.is_autocast_enabled", "count": 5, "first_site": "t.py:8", "by": "torch",
             "kind": "redirected", "detail": "cpu"}]
    assert render.indirect_lines(rows) == [
        "  by torch: 2 CUDA APIs (6 calls) reached from t.py:8: torch.is_autocast_enabled, "
        "torch.cuda.get_device_properties"]


def test_torch_compile_under_autocast_credits_only_the_scripts_own_calls(tmp_path):
    log = tmp_path / "run.json"
    r = ascendify_run("--to", "cpu", "--log", str(log), str(SCRIPTS / "compiled_autocast.py"),
                      env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert last_json(r.stdout) == {"dtype": "torch.bfloat16", "device": "cpu"}
    rep = json.loads(log.read_text())
    mine = {row["api"]: row["first_site"] for row in rep["redirected"]}
    assert {"Module.cuda", "torch.autocast", "torch.randn", "torch.cuda.synchronize"} <= set(mine)
    torchs = {row["api"] for row in rep["indirect"] if row["by"] == "torch"}
    assert "torch.cuda.get_device_properties" in torchs  # inductor asked, not the script
    assert not torchs & set(mine)  # none of torch's calls is credited to the script's lines
    assert all("compiled_autocast.py:" in s for s in mine.values())
    assert "by torch:" in r.stderr and "get_device_properties" in r.stderr
    table = r.stderr.split("Called by libraries")[0]
    assert "get_device_properties" not in table and "is_autocast_enabled" not in table


def test_a_call_through_torchs_plain_api_is_the_users():
    """``torch.cuda.amp.autocast()`` builds a ``torch.amp.autocast``, ``mp.spawn`` prepares processes: torch's own
    frames sit between the user's line and the redirect, but the user asked for it."""
    rec = Recorder("cpu")
    wrapper = _library_function(os.path.dirname(torch.__file__), "cuda/amp/fake_for_test.py")
    wrapper(rec.hit, "torch.autocast", "cuda -> cpu")
    rep = rec.as_dict()
    assert [r["api"] for r in rep["redirected"]] == ["torch.autocast"] and rep["indirect"] == []
    assert "test_call_origin.py:" in rep["redirected"][0]["first_site"]


def test_calls_ascendify_makes_itself_are_never_the_users(auto_cpu, tmp_path):
    """``ascendify port``'s observer seeds the run (``torch.manual_seed`` calls ``torch.cuda.manual_seed_all``):
    no frame of the user's is on that stack, and the call is ascendify's, not one of the user's CUDA calls."""
    from ascendify.port import observe

    obs = observe.Observer(str(tmp_path), steps=None, seconds=None, seed=0, root=str(tmp_path))
    obs.install()
    try:
        torch.cuda.manual_seed_all(1)  # the user's own call is still the user's
    finally:
        obs.finish(0)
    rep = auto_cpu.rec.as_dict()
    mine = {r["api"]: r for r in rep["redirected"]}
    assert mine["torch.cuda.manual_seed_all"]["count"] == 1
    assert "test_call_origin.py:" in mine["torch.cuda.manual_seed_all"]["first_site"]
    assert ("ascendify", "torch.cuda.manual_seed_all") in {(r["by"], r["api"]) for r in rep["indirect"]}
