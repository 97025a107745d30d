"""CUDA-only kernels (flash-attn, xformers, apex) migrated to their NPU / portable equals (ASC608-ASC612).

Two kinds of tests: before/after texts (including the calls that must stay as they were), and programs that
run. The original program runs on the CPU with plain-math stand-ins for the CUDA libraries
(``kernel_fakes.py``); its ``--to portable`` migration runs on the CPU with the libraries made unimportable,
its ``--to npu`` migration on the emulated NPU; the outputs must agree within float32 rounding.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import kernel_fakes as fakes
import pytest
import torch

from ascendify.migrate import Options, migrate_source, portable

HERE = Path(__file__).resolve().parent


def migrate(code: str, target: str = "npu", unsafe: bool = False):
    return migrate_source(textwrap.dedent(code).lstrip("\n"), Options(target=target, unsafe=unsafe))


def rows(result, *rules):
    return [f for f in result.findings if f.rule in rules]


# -- before / after ----------------------------------------------------------------------------------------
CHANGES = [
    pytest.param(
        """
        import torch
        from flash_attn import flash_attn_func
        def attn(q, k, v, training):
            return flash_attn_func(q, k, v, dropout_p=0.1 if training else 0.0, softmax_scale=s, causal=causal)
        """,
        """
        import torch
        import torch_npu
        def attn(q, k, v, training):
            return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", atten_mask=npu_causal_mask(q.device) if causal else None, scale=s or q.shape[-1] ** -0.5, keep_prob=1 - (0.1 if training else 0.0), sparse_mode=3 if causal else 0)[0]
        """,  # noqa: E501
        "npu", id="npu-expressions",
    ),
    pytest.param(
        """
        import torch
        from flash_attn import flash_attn_qkvpacked_func as fa
        out = fa(self.qkv(x).view(b, s, 3, h, d), causal=True)
        """,
        """
        import torch
        out = torch.nn.functional.scaled_dot_product_attention(*self.qkv(x).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4), is_causal=True).transpose(1, 2).contiguous()
        """,  # noqa: E501
        "portable", id="portable-qkvpacked-expression-once",
    ),
    pytest.param(
        """
        import torch
        try:
            from flash_attn import flash_attn_func
        except ImportError:
            pass
        y = flash_attn_func(q, k, v)
        """,
        """
        import torch
        import torch_npu
        try:
            pass
        except ImportError:
            pass
        y = torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", scale=q.shape[-1] ** -0.5)[0]
        """,
        "npu", id="import-alone-in-its-block-becomes-pass",
    ),
    pytest.param(
        """
        import torch
        import xformers.ops as xops
        out = xops.memory_efficient_attention(q, k, v, attn_bias=bias, p=0.1)
        """,
        """
        import torch
        import torch_npu
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias, dropout_p=0.1).transpose(1, 2).contiguous()
        """,  # noqa: E501
        "npu", id="xformers-tensor-bias-is-sdpa-on-npu",
    ),
    pytest.param(
        """
        import torch
        from flash_attn import flash_attn_kvpacked_func
        out = flash_attn_kvpacked_func(q, kv, causal=True)
        """,
        """
        import torch
        import torch.nn.attention.bias
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), *kv.permute(2, 0, 3, 1, 4), attn_mask=torch.nn.attention.bias.causal_lower_right(q.shape[1], kv.shape[1]), enable_gqa=kv.shape[3] != q.shape[2]).transpose(1, 2).contiguous()
        """,  # noqa: E501
        "portable", id="portable-causal-is-bottom-right",
    ),
]




@pytest.mark.parametrize(("before", "after", "target"), CHANGES)
def test_rewrite(before, after, target):
    out, _ = migrate(before, target)
    helper = "\n\n" + portable.helper_source(portable.NPU_CAUSAL_MASK) + "\n\n"
    if "npu_causal_mask(" in after:  # the helper goes after the imports, once
        assert out.count(helper) == 1
        out = out.replace(helper, "")
    assert _join(out) == _join(textwrap.dedent(after).lstrip("\n"))
    again, _ = migrate_source(out, Options(target=target))
    assert again == out


def _join(text: str) -> str:
    """Lines broken inside brackets by the layout pass, joined again (the examples are written unbroken)."""
    out: list[str] = []
    depth = 0
    for line in text.splitlines():
        piece = line.strip() if depth else line
        if depth and out:
            out[-1] += ("" if out[-1].endswith(("(", "[")) else " ") + piece
        else:
            out.append(piece)
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
    return "\n".join(out) + "\n"


UNCHANGED = [
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, window_size=(256, 0))\n",
                 "sliding-window", id="window"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, alibi_slopes=sl)\n",
                 "ALiBi", id="alibi"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, softcap=30.0)\n",
                 "soft-capping", id="softcap"),
    pytest.param("from flash_attn import flash_attn_func\nout, lse, p = flash_attn_func(q, k, v, return_attn_probs=True)\n",
                 "probabilities", id="attn-probs"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, 0.0, None, True, (-1, -1))\n",
                 "positional", id="positional-beyond-causal"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, new_flag=1)\n",
                 "unknown keyword `new_flag`", id="unknown-keyword"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(*qkv)\n", "*", id="star-args"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(proj(x), k, v)\n",
                 "`q` is an expression", id="q-is-a-call"),
    pytest.param("from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, causal=mode == 'c')\n",
                 "causal is an expression", id="causal-expression"),
    pytest.param("from flash_attn import flash_attn_with_kvcache\nout = flash_attn_with_kvcache(q, kc, vc, k, v)\n",
                 "npu_fused_infer_attention_score", id="kvcache"),
    pytest.param("import xformers.ops as xops\nb = xops.fmha.attn_bias.BlockDiagonalMask.from_seqlens([2, 3])\n"
                 "out = xops.memory_efficient_attention(q, k, v, attn_bias=b)\n", "bias object", id="xformers-block"),
    pytest.param("import xformers.ops as xops\nout = xops.memory_efficient_attention(q, k, v, "
                 "attn_bias=xops.fmha.attn_bias.BlockDiagonalMask.from_seqlens([2]))\n", "no mapping",
                 id="xformers-inline-block"),
]


@pytest.mark.parametrize("target", ["npu", "portable"])
@pytest.mark.parametrize(("src", "reason"), UNCHANGED)
def test_unmappable_calls_are_left_whole_and_listed(src, reason, target):
    out, result = migrate(src, target)
    assert out == src  # the call and its import stay
    [row] = rows(result, "ASC608", "ASC609")
    assert row.kind == "report" and reason in row.message and row.message.startswith("left as it was")


@pytest.mark.parametrize("src", [
    "def flash_attn_func(q, k, v):\n    return q\nout = flash_attn_func(q, k, v, causal=True)\n",
    "import torch\nout = my.flash_attn_func(q, k, v)\n",
    "import torch\nfrom mylib import memory_efficient_attention\nout = memory_efficient_attention(q, k, v)\n",
    "from apex.normalization import FusedLayerNorm\nclass Norm(FusedLayerNorm):\n    pass\n",
], ids=["own-function", "other-object", "other-package", "subclass"])
def test_names_that_are_not_the_libraries_do_not_change(src):
    for target in ("npu", "portable"):
        out, result = migrate(src, target)
        assert out == src
        assert not [f for f in result.findings if f.kind == "change"]


def test_a_use_left_behind_keeps_the_import_and_its_listing():
    src = ("from flash_attn import flash_attn_func\nimport torch\na = flash_attn_func(q, k, v)\n"
           "b = flash_attn_func(q, k, v, softcap=5.0)\n")
    out, result = migrate(src)
    assert out.startswith("from flash_attn import flash_attn_func\n")
    assert "npu_fusion_attention" in out and "softcap=5.0" in out
    assert [f.line for f in rows(result, "ASC603") if f.line == 1]  # the import is still listed


def test_portable_varlen_defines_its_helper_once_and_steps_aside_for_the_files_own_name():
    src = fakes.program("flash_varlen_causal") + "out2 = flash_attn_varlen_func(q, k, v, cu, cu, 5, 5, 0.0, 0.5)\n"
    out, result = migrate(src, "portable")
    assert out.count("def varlen_attention(") == 1
    assert "varlen_attention(q, k, v, cu, cu, causal=True)" in out and "varlen_attention(q, k, v, cu, cu, scale=0.5)" \
        in out
    again, _ = migrate_source(out, Options(target="portable"))
    assert again == out
    own = "import torch\nfrom flash_attn import flash_attn_varlen_func\ndef varlen_attention():\n    pass\n" \
          "o = flash_attn_varlen_func(q, k, v, cu, cu, 4, 4)\n"
    out, result = migrate(own, "portable")
    assert out == own
    [row] = rows(result, "ASC608")
    assert "varlen_attention itself" in row.message


def test_apex_amp_is_only_applied_with_unsafe_and_the_tip_names_the_opt_level_recipe():
    src = fakes.program("apex_amp_step")
    out, result = migrate(src)
    assert "amp.initialize" in out
    init = [f for f in rows(result, "ASC611") if "initialize" in f.api][0]
    assert init.severity == "unsafe-fix" and "autocast" in init.message and "GradScaler" in init.message


# -- programs that run ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def references():
    """Each program's output with the CPU stand-ins for the CUDA libraries."""
    with fakes.installed():
        return {name: fakes.run(fakes.program(name)) for name in fakes.RUN_CASES}


@pytest.mark.parametrize("name", [n for n in fakes.RUN_CASES if n not in fakes.NOT_PORTABLE])
def test_portable_migration_computes_what_the_cuda_kernel_did(references, name):
    new, result = migrate(fakes.program(name), "portable", unsafe=True)
    assert not [f for f in result.findings if f.kind == "report" and f.rule.startswith("ASC6")], result.findings
    for lib in ("flash_attn", "xformers", "apex"):
        assert lib not in new
    with fakes.blocked():
        got = fakes.run(new)
    want = references[name]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, **fakes.TOLERANCE.get(name, {"atol": 2e-6, "rtol": 2e-5}))


def test_dropout_keeps_its_probability():
    """dropout_p=1 drops everything: zeros from the kernel and from both rewrites (keep_prob=1 - 1)."""
    code = fakes.program("flash_causal_gqa").replace("causal=True)", "dropout_p=1.0, causal=True)")
    new, _ = migrate(code, "portable")
    assert "dropout_p=1.0" in new
    with fakes.blocked():
        assert not fakes.run(new).any()
    npu, _ = migrate(code, "npu")
    assert "keep_prob=1 - 1.0" in npu


NPU_RUNNER = """
import json, sys
import torch
import ascendify.emulator as emu
emu.enable()
import torch_npu
fused = True
try:
    x = torch.ones(1, 2, 1, 8, device="npu")
    torch_npu.npu_fusion_attention(x, x, x, 1, "BSND")
except Exception as e:
    fused = False
    print("NOT-EMULATED", type(e).__name__, str(e)[:200])
cases = json.loads(sys.argv[1])
outs = {}
for name, code in cases.items():
    if not fused and "npu_fusion_attention" in code:
        continue
    ns = {"device": "npu", "__name__": "kernel_case"}
    exec(compile(code, name, "exec"), ns)
    outs[name] = ns["out"].detach().cpu()
torch.save(outs, sys.argv[2])
"""


def test_npu_migration_runs_on_the_emulated_npu_and_matches(references, tmp_path):
    cases = {}
    for name in fakes.RUN_CASES:
        new, result = migrate(fakes.program(name), "npu", unsafe=True)
        assert not [f for f in result.findings if f.kind == "report" and f.rule.startswith("ASC6")], name
        for lib in ("flash_attn", "xformers", "apex"):
            assert lib not in new, name
        cases[name] = new
    out = tmp_path / "outs.pt"
    env = {"PYTHONPATH": str(HERE.parents[1] / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", NPU_RUNNER, json.dumps(cases), str(out)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(out)
    for name, want in references.items():
        if name not in got:
            continue
        assert got[name].shape == want.shape, name
        torch.testing.assert_close(got[name], want, **fakes.TOLERANCE.get(name, {"atol": 1e-5, "rtol": 1e-4}),
                                   msg=lambda m, name=name: f"{name}: {m}")
    assert {n for n, code in cases.items() if "npu_fusion_attention" not in code} <= set(got)
    if "NOT-EMULATED" in proc.stdout:
        missing = sorted(set(cases) - set(got))
        pytest.skip(f"{missing} need torch_npu.npu_fusion_attention on the emulated NPU (branch h18ops): "
                    f"{proc.stdout.strip()}")


# -- custom kernels: listed with what they do and the nearest NPU path --------------------------------------
TRITON = '''
import torch
import triton
import triton.language as tl

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, K: tl.constexpr):
    a = tl.load(a_ptr + tl.arange(0, K))
    b = tl.load(b_ptr + tl.arange(0, K))
    tl.store(c_ptr, tl.dot(a, b))

@triton.jit
def softmax_kernel(x_ptr, y_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + tl.arange(0, N), e / tl.sum(e, axis=0))

@triton.jit
def scale_kernel(x_ptr, y_ptr):
    i = tl.program_id(0)
    tl.store(y_ptr + i, tl.load(x_ptr + i) * 2.0)

def run(a, b, c, x, y):
    matmul_kernel[(1,)](a, b, c, K=16)
    softmax_kernel[(x.shape[0],)](x, y, N=16)
    scale_kernel[(8,)](x, y)
'''


@pytest.mark.parametrize("target", ["npu", "portable"])
def test_triton_kernels_and_launches_are_listed_with_what_they_do(target):
    out, result = migrate(TRITON, target)
    assert out == textwrap.dedent(TRITON).lstrip("\n")
    kernels = {f.line: f for f in rows(result, "ASC602") if "kernel `" in f.message}
    launches = {f.line: f for f in rows(result, "ASC613")}
    assert len(kernels) == 3 and len(launches) == 3
    want = [("matmul_kernel", "matrix multiply", "torch.matmul"),
            ("softmax_kernel", "softmax", "npu_scaled_masked_softmax"),
            ("scale_kernel", "elementwise", "PyTorch composite")]
    for (name, what, nearest), kernel, launch in zip(want, kernels.values(), launches.values(), strict=True):
        for row in (kernel, launch):
            assert name in row.message and what in row.message, row.message
            assert nearest in row.tip and "Ascend C" in row.tip


def test_cpp_extensions_are_listed_with_their_sources_and_functions():
    src = ("from torch.utils.cpp_extension import load, load_inline\n"
           "a = load('gelu_ext', ['gelu.cpp', 'gelu_kernel.cu'])\n"
           "b = load_inline(name='inl', cpp_sources=cpp, cuda_sources=cu, functions=['fwd', 'bwd'])\n")
    out, result = migrate(src)
    assert out == src
    a, b = rows(result, "ASC601")
    assert "`gelu_ext` from gelu.cpp, gelu_kernel.cu" in a.message
    assert "`inl` with inline CUDA sources exposing fwd, bwd" in b.message
    assert "Ascend C custom operator" in a.tip and "PyTorch composite" in a.tip
