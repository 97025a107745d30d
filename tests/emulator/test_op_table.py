"""The one per-op table: every per-op decision comes from it, and the kernels follow it."""

from __future__ import annotations

import ast
import doctest
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ascendify.core import knowledge  # noqa: E402
from ascendify.emulator.ops import autocast, autocast_lists, opinfo, table  # noqa: E402

EMULATOR = Path(__file__).resolve().parents[2] / "src" / "ascendify" / "emulator"


def test_table_holds_every_kind_of_decision(emulator):
    t = table.table()
    assert t["copy_"].kernel is not None and t["copy_"].direct
    assert t["index.Tensor"].cpu_args_ok and not t["index.Tensor"].fast_path
    assert t["scaled_dot_product_attention"].keys == ("AutogradPrivateUse1",)
    flagged = knowledge.overloads_without_npu_kernel()
    assert flagged and all(t[name].no_npu_kernel and not t[name].fast_path for name in flagged)
    assert {n: p.autocast for n, p in table.autocast_entries()} == autocast_lists.policy_table("npu")
    assert t["norm.Scalar"].autocast_target == "norm.ScalarOpt_dtype"
    assert table.policy("relu") is table.DEFAULT


def test_kernels_consult_the_table(emulator):
    for name, op in (("lgamma", torch.ops.aten.lgamma.default), ("index.Tensor", torch.ops.aten.index.Tensor),
                     ("add.Tensor", torch.ops.aten.add.Tensor)):
        inf = opinfo.info(op)
        assert inf.policy is table.policy(name)
        assert inf.flagged == table.policy(name).no_npu_kernel
        assert inf.allow_cpu == table.policy(name).cpu_args_ok
    # the direct kernels and the autocast kernels registered are the table's
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name, _ in table.direct_entries():
        assert has(f"aten::{name}", "PrivateUse1"), name
    assert set(autocast.registered_ops()) <= {n for n, _ in table.autocast_entries()}
    # a CPU index next to an npu tensor is allowed because the table says so
    x = torch.arange(6.0, device="npu")
    assert x[torch.tensor([1, 3])].cpu().tolist() == [1.0, 3.0]


def test_no_op_name_tables_outside_the_table():
    """Only ops/table.py (and the data module autocast_lists.py) hold sets of op names."""
    offenders = []
    for path in EMULATOR.rglob("*.py"):
        if path.name in ("table.py", "autocast_lists.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict | ast.Set | ast.Tuple | ast.List):
                elts = node.keys if isinstance(node, ast.Dict) else node.elts
                names = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if sum(n.startswith("_thnn") or n in ("copy_", "index.Tensor", "empty_strided") for n in names):
                    offenders.append(f"{path.relative_to(EMULATOR)}:{node.lineno}")
    assert offenders == [], offenders


@pytest.mark.parametrize("module", ["ascendify.emulator.ops.table", "ascendify.emulator.distributed.data_parallel",
                                    "ascendify.emulator.api.cuda_hint", "ascendify.emulator.settings",
                                    "ascendify.emulator.distributed.hccl_rules",
                                    "ascendify.emulator.reporting.ascend_pt", "ascendify.emulator.render"])
def test_doctests(emulator, module):
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted and not result.failed
