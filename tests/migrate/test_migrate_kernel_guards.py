"""ASC614: branches that run only where a CUDA-only package is installed (never on Ascend)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ascendify.migrate import Options, migrate_source


def run(src: str, target: str = "npu"):
    src = textwrap.dedent(src).lstrip("\n")
    out, result = migrate_source(src, Options(target=target))
    ast.parse(out)
    again, _ = migrate_source(out, Options(target=target))
    assert again == out  # a second run changes nothing
    return src, out, [f for f in result.findings if f.rule == "ASC614"]


LIGHTNING = '''
import torch
import torch.nn.functional as F
from lightning_utilities.core.imports import RequirementCache

USE_FA = RequirementCache("flash-attn>=2.1")


def attention(q, k, v, mask=None):
    if USE_FA and mask is None and q.device.type == "cuda":
        from flash_attn import flash_attn_func

        return flash_attn_func(q, k, v, softmax_scale=0.125, causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
'''


def test_requirement_cache_flag_npu_drops_the_check():
    src, out, rows = run(LIGHTNING)
    [row] = rows
    assert row.kind == "change" and row.line == src.splitlines().index(
        '    if USE_FA and mask is None and q.device.type == "cuda":') + 1
    assert "flash-attn is not installed on Ascend" in row.message and "npu_fusion_attention" in row.message
    assert '    if mask is None and q.device.type == "npu":\n' in out
    assert 'USE_FA = RequirementCache("flash-attn>=2.1")' in out  # the flag itself stays (others may import it)
    assert "flash_attn" not in out.replace("flash-attn", "")


def test_requirement_cache_flag_portable_is_listed_for_a_person():
    src, out, rows = run(LIGHTNING, "portable")
    [row] = rows
    assert row.kind == "report" and row.severity == "manual"
    assert "never runs" in row.message and "scaled_dot_product_attention" in row.message
    assert "drop `USE_FA` from the test" in row.tip
    assert "if USE_FA and mask is None" in out


@pytest.mark.parametrize("check", [
    'importlib.util.find_spec("flash_attn") is not None',
    'bool(importlib.util.find_spec("flash_attn"))',
    "is_flash_attn_2_available()",
    "HAS_FA",
])
def test_whole_test_checks_become_true_on_npu(check):
    src = f'''
    import importlib.util
    import torch
    from flash_attn import flash_attn_varlen_func
    from transformers.utils import is_flash_attn_2_available

    HAS_FA = importlib.util.find_spec("flash_attn") is not None

    if {check}:
        out = flash_attn_varlen_func(q, k, v, cu, cu, m, m)
    else:
        out = packed_attention(q, k, v, cu)
    '''
    _, out, rows = run(src)
    assert [r.kind for r in rows] == ["change"]
    assert "if True:\n    out = torch_npu.npu_fusion_attention(" in out
    assert "else:\n    out = packed_attention(q, k, v, cu)" in out


def test_try_import_flag_and_none_fallback():
    src = '''
    import torch
    try:
        from flash_attn import flash_attn_func
        HAVE_FLASH = True
    except ImportError:
        flash_attn_func = None
        HAVE_FLASH = False


    def a(q, k, v):
        if flash_attn_func is not None and q.is_cuda:
            return flash_attn_func(q, k, v)
        return ref(q, k, v)


    def b(q, k, v):
        return flash_attn_func(q, k, v, causal=True) if HAVE_FLASH else ref(q, k, v)
    '''
    src, out, rows = run(src)
    assert [r.kind for r in rows] == ["change", "change"]
    assert "    if q.is_npu:\n" in out  # the check dropped, the device test converted (ASC102)
    assert "[0] if True else ref(q," in out  # a conditional expression's test alone: True


def test_try_import_removed_by_asc612_is_no_guard_any_more():
    """Every use converted: ASC612 removes the import from the try, the flag is then always True."""
    src = '''
    import torch
    try:
        import flash_attn
        HAS_FLASH = True
    except ImportError:
        HAS_FLASH = False

    if HAS_FLASH:
        out = flash_attn.flash_attn_func(q, k, v)
    '''
    _, out, rows = run(src)
    assert "import flash_attn" not in out and rows == []


def test_branch_with_something_left_is_listed_not_rewritten():
    src = '''
    import torch
    from flash_attn import flash_attn_func
    from lightning_utilities.core.imports import RequirementCache

    FA = RequirementCache("flash-attn")
    if FA and x is None:
        a = flash_attn_func(q, k, v)
        b = flash_attn_func(q, k, v, window_size=(128, 0))
    '''
    _, out, rows = run(src)
    [row] = rows
    assert row.kind == "report" and row.severity == "manual"
    assert row.tip.startswith("convert what is left of flash-attn in the branch")
    assert "if FA and x is None:" in out


def test_negated_check_and_else_branch():
    src = '''
    import importlib.util
    import torch
    import xformers.ops as xops

    if importlib.util.find_spec("xformers") is None:
        y = attention(q, k, v)
    else:
        y = xops.memory_efficient_attention(q, k, v)
    '''
    _, out, rows = run(src)
    [row] = rows
    assert row.kind == "report" and "in its else branch" in row.message
    assert "npu_fusion_attention" in out


def test_branch_that_only_calls_the_package_gets_advice():
    src = '''
    import torch
    from transformers.utils import is_flash_attn_2_available

    if is_flash_attn_2_available():
        from flash_attn.layers.rotary import apply_rotary_emb
    else:
        apply_rotary_emb = None
    '''
    _, out, rows = run(src)
    [row] = rows
    assert row.kind == "advice" and "the fallback runs" in row.message


@pytest.mark.parametrize("test", [
    "USE_FA or mask is None",  # true without flash-attn too
    "(USE_FA) and mask is None",  # the text around the check is not plain: listed
    "OTHER and mask is None",  # not a CUDA-only package
])
def test_not_rewritten(test):
    src = f'''
    import torch
    from flash_attn import flash_attn_func
    from lightning_utilities.core.imports import RequirementCache

    USE_FA = RequirementCache("flash-attn")
    OTHER = RequirementCache("torch>=2.1")
    if {test}:
        y = flash_attn_func(q, k, v)
    '''
    _, out, rows = run(src)
    assert f"if {test}:" in out and "npu_fusion_attention" in out
    assert all(r.kind != "change" for r in rows)
    assert len(rows) == (1 if test.startswith("(") else 0)


def test_packages_of_the_extension_table_count_too():
    src = '''
    import importlib.util
    import torch

    if importlib.util.find_spec("transformer-engine") is not None:
        import transformer_engine.pytorch as te
    '''
    _, _, rows = run(src)
    [row] = rows
    assert row.kind == "advice" and "transformer-engine" in row.message
