"""Issue 19 (graph mode) in ``migrate --to npu``: CUDA graph APIs and torch.compile backends/options."""

from __future__ import annotations

from ascendify.migrate import Options, migrate_source
from ascendify.migrate.rules.cuda_api_graphs import MODES

SRC = '''import torch
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = m(x)
f = torch.cuda.make_graphed_callables(m, (x,))
a = torch.compile(m, backend='cudagraphs')
b = torch.compile(m, mode="max-autotune")
c = torch.compile(m, options={"triton.cudagraphs": True, "epilogue_fusion": True})
d = torch.compile(m, mode="reduce-overhead")
e = torch.compile(m)
'''


def test_graph_apis_and_backend_are_rewritten_and_cuda_options_listed():
    out, result = migrate_source(SRC, Options(target="npu"))
    assert "torch.npu.NPUGraph()" in out and "torch.npu.graph(g)" in out
    assert "torch.npu.make_graphed_callables(m, (x,))" in out
    assert "backend='npugraphs'" in out and "cudagraphs'" not in out
    assert 'mode="max-autotune"' in out  # listed, never rewritten
    listed = [(f.rule, f.line, f.message) for f in result.findings if f.rule == "ASC208"]
    assert {line for _, line, _ in listed} == {7, 8, 9}
    assert any("triton.cudagraphs" in m for _, _, m in listed)
    assert not any("epilogue_fusion" in m for _, _, m in listed)
    assert any(MODES["reduce-overhead"] in m for _, _, m in listed)


def test_portable_target_keeps_the_cudagraphs_backend():
    out, result = migrate_source("import torch\nm = torch.compile(m, backend='cudagraphs')\n",
                                 Options(target="portable"))
    assert "cudagraphs" in out and not any(f.rule in ("ASC207", "ASC208") for f in result.findings)


def test_npu_graph_names_exist_in_torch_npu():
    from ascendify.core import knowledge

    for n in ("torch.npu.NPUGraph", "torch.npu.graph", "torch.npu.make_graphed_callables"):
        assert knowledge.npu_name_exists(n), n


def test_inductor_config_settings_and_foreign_backends_are_listed_with_the_reason():
    src = ("import torch\nimport torch._inductor.config as ic\n"
           "torch._inductor.config.triton.cudagraphs = True\n"
           "ic.max_autotune = True\n"
           "torch._inductor.config.freezing = True\n"
           "m = torch.compile(m, backend='tensorrt')\n"
           "n = torch.compile(m, backend='npu')\n")
    out, result = migrate_source(src, Options(target="npu"))
    assert out.count("\n") == src.count("\n")  # report only: nothing rewritten
    listed = {f.line: f.message for f in result.findings if f.rule == "ASC208"}
    assert set(listed) == {3, 4, 6}
    assert "'triton.cudagraphs'" in listed[3] and "'max_autotune'" in listed[4]
    assert "TensorRT" in listed[6]
