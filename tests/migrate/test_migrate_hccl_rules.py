"""ASC305: collectives that HCCL refuses, seen statically (facts from data/hccl_rules.json)."""

from ascendify.migrate import Options, migrate_source

SRC = """\
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp
dist.all_reduce(flags, op=ReduceOp.BAND)
dist.all_reduce(x, ReduceOp.PRODUCT)
dist.all_reduce(torch.zeros(3, dtype=torch.float64))
dist.reduce_scatter_tensor(out, x.to(torch.double))
dist.all_reduce(x, op=ReduceOp.MAX)
dist.all_reduce(x.float())
dist.recv(buf)
dist.recv(buf, src=1)
dist.gather(t, lst, dst=0)
"""


def test_hccl_rule_findings_by_line():
    out, result = migrate_source(SRC, Options(target="npu"))
    assert out.replace("import torch_npu\n", "") == SRC  # report only
    found = {(f.line, f.severity): f.message for f in result.findings if f.rule == "ASC305"}
    assert set(found) == {(4, "unsupported"), (5, "manual"), (6, "unsupported"), (7, "unsupported"),
                          (10, "unsupported"), (12, "manual")}
    assert found[(4, "unsupported")].startswith("Cannot use ReduceOp.BAND with HCCL")
    assert "int16 and bfloat16" in found[(5, "manual")]
    assert found[(7, "unsupported")].startswith("HCCL _reduce_scatter_base: Unsupported data type at::kDouble")
    assert "does not support recv" in found[(10, "unsupported")]
    assert "allgather" in found[(12, "manual")]
