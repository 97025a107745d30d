"""TorchScript under redirection: torch's factories are wrapped, and scripted code calling them still compiles."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch
from torch.jit import _builtins


def test_scripted_function_calling_wrapped_factories_compiles(auto_cpu):
    assert torch.zeros is not torch._C._VariableFunctions.zeros  # the factory is wrapped

    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.zeros(2) + torch.tensor(1.0)

    assert f(torch.ones(2)).tolist() == [2.0, 2.0]


def test_aliases_are_removed_on_disable():
    import ascendify.auto

    s = ascendify.auto.enable("cpu")
    wrapper = torch.tensor
    try:
        table = _builtins._get_builtin_table()
        assert table.get(id(wrapper)) == "aten::tensor"
    finally:
        ascendify.auto.disable()
    assert id(wrapper) not in table and s.patches.originals() == []


def test_zero_redundancy_optimizer_imports_under_run(tmp_path):
    """The first import of torch.distributed.optim scripts its functional optimizers (torch.tensor inside)."""
    script = tmp_path / "zro.py"
    script.write_text(textwrap.dedent("""
        from torch.distributed.optim import ZeroRedundancyOptimizer
        print("imported", ZeroRedundancyOptimizer.__name__)
    """))
    r = subprocess.run([sys.executable, "-m", "ascendify", "run", "-q", "--to", "cpu", str(script)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "imported ZeroRedundancyOptimizer" in r.stdout
