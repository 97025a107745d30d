"""Membership tests of a device in a collection (`assert device_type in {'cuda'}`, llm.c's LLaMA trainer)."""

from __future__ import annotations

from ascendify.migrate import Options, migrate_source

SRC = ("import torch\n"
       "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
       "device_type = 'cuda' if 'cuda' in device else 'cpu'\n"
       "assert device_type in {'cuda'}, 'GPU required'\n"
       "fast = device not in ['cuda', 'mps']\n"
       "kinds = mode in ('cuda', 'mps')\n")


def test_npu_names_the_npu_where_the_collection_names_cuda():
    out, result = migrate_source(SRC, Options(target="npu"))
    assert "assert device_type in {'npu'}, 'GPU required'\n" in out  # was left 'cuda': the assert always failed
    assert "fast = device not in ['npu', 'mps']\n" in out
    assert "kinds = mode in ('cuda', 'mps')\n" in out  # `mode` is not a device
    rows = [f for f in result.findings if f.api == "device comparison" and f.kind == "change"]
    assert sorted(f.line for f in rows) == [3, 4, 5] and {f.rule for f in rows} == {"ASC104"}
    assert not [f for f in result.findings if f.rule == "ASC099" and f.line in (4, 5)]


def test_portable_lists_the_collection_test_by_its_rule():
    out, result = migrate_source(SRC, Options(target="portable"))
    assert "assert device_type in {'cuda'}" in out
    listed = [f for f in result.findings if f.line == 4 and f.kind == "report"]
    assert [f.rule for f in listed] == ["ASC104"] and '"cpu"' in listed[0].tip
