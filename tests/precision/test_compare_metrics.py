"""Metrics, thresholds and structural matching: each a small unit with a behaviour that can fail."""

from __future__ import annotations

import math

import pytest
import torch

from ascendify.precision import metrics, thresholds
from ascendify.precision.matching import CallKey, alias_wrappers, explain_unmatched, match_calls
from ascendify.precision.model import TensorStats


def test_cosine_is_blind_to_scale_rel_l2_is_not():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert metrics.cosine(1.02 * x, x) == pytest.approx(1.0, abs=1e-12)
    assert metrics.rel_l2(1.02 * x, x) == pytest.approx(0.02, rel=1e-5)


def test_permutation_leaves_statistics_but_not_rel_l2():
    x = torch.randn(64, generator=torch.Generator().manual_seed(1))
    p = x.flip(0)
    assert float(p.norm()) == pytest.approx(float(x.norm()))
    assert metrics.rel_l2(p, x) > 0.5
    assert metrics.cosine(p, x) < 0.5


def test_zero_tensors_and_nonfinite():
    z = torch.zeros(4)
    assert metrics.cosine(z, z) == 1.0 and metrics.rel_l2(z, z) == 0.0
    assert metrics.rel_l2(torch.ones(4), z) == math.inf
    a = torch.tensor([1.0, float("nan"), float("inf")])
    b = torch.tensor([1.0, float("nan"), float("inf")])
    assert metrics.nan_inf_agreement(a, b)["agree"]
    assert not metrics.nan_inf_agreement(a, torch.tensor([1.0, 2.0, float("inf")]))["agree"]
    assert not metrics.nan_inf_agreement(a, torch.tensor([1.0, float("nan"), -float("inf")]))["agree"]


def test_an_all_nan_target_is_not_a_perfect_match():
    golden = torch.randn(4, 8)
    m = metrics.tensor_metrics(torch.full((4, 8), float("nan")), golden)
    assert m["nan_inf"] == {"nan": [32, 0], "inf": [0, 0], "agree": False}
    for key in ("cosine", "rel_l2", "max_abs", "max_rel", "thousandth", "ulp_max"):
        assert math.isnan(m[key]), (key, m[key])
    partial = golden.clone()
    partial[0, 0] = float("nan")  # some finite positions left: the numbers are over those
    m = metrics.tensor_metrics(partial, golden)
    assert m["cosine"] == pytest.approx(1.0) and m["rel_l2"] == 0.0 and not m["nan_inf"]["agree"]


def test_max_abs_max_rel_thousandth():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b = torch.tensor([1.0, 2.0, 3.0, 4.1])
    assert metrics.max_abs(a, b) == pytest.approx(0.1)
    assert metrics.max_rel(a, b) == pytest.approx(0.1 / 4.1)
    assert metrics.thousandth_ratio(a, b) == 0.75  # 3 of 4 elements within 1e-3 (msprobe's meaning)


def test_ulp_distance_counts_in_the_target_dtype():
    one = torch.tensor([1.0])
    nxt = torch.nextafter(one, torch.tensor([2.0]))
    assert metrics.ulp_distance(nxt, one, "torch.float32")[0] == pytest.approx(1.0)
    bf_next = torch.tensor([1.0 + 2**-7])
    assert metrics.ulp_distance(bf_next, one, "torch.bfloat16")[0] == pytest.approx(1.0)


def test_tensor_metrics_shape_mismatch_has_no_numbers():
    m = metrics.tensor_metrics(torch.zeros(2, 3), torch.zeros(3, 2))
    assert m["shape_mismatch"] and "cosine" not in m


def test_stat_rel_errors_see_scale_and_permutation_through_the_fingerprint():
    a = TensorStats("torch.float32", (8,), 1.0, -1.0, 0.0, 2.0, fingerprint=(1.0, 2.0, 3.0))
    scaled = TensorStats("torch.float32", (8,), 1.02, -1.02, 0.0, 2.04, fingerprint=(1.02, 2.04, 3.06))
    perm = TensorStats("torch.float32", (8,), 1.0, -1.0, 0.0, 2.0, fingerprint=(3.0, 1.0, 2.0))
    assert metrics.stat_rel_errors(scaled, a)["worst"] == pytest.approx(0.02)
    e = metrics.stat_rel_errors(perm, a)
    assert e["norm"] == 0.0 and e["max"] == 0.0 and e["fingerprint"] > 0.5
    # a near-zero mean is scaled by the tensor's RMS, not by itself
    m0 = TensorStats("torch.float32", (4,), 1.0, -1.0, 1e-9, 2.0)
    m1 = TensorStats("torch.float32", (4,), 1.0, -1.0, 2e-9, 2.0)
    assert metrics.stat_rel_errors(m1, m0)["mean"] < 1e-8


def test_fingerprint_with_overflowed_components():
    inf = float("inf")
    assert metrics.fingerprint_rel((inf, 1.0), (inf, 1.0)) == 0.0
    assert metrics.fingerprint_rel((inf, 1.0), (-inf, 1.0)) == math.inf


def test_thresholds_follow_the_dtype_and_the_reduction():
    assert thresholds.compute_dtype(["torch.float32", "torch.bfloat16"]) == "torch.bfloat16"
    assert thresholds.compute_dtype(["torch.float32"], autocast="torch.float16") == "torch.float16"
    assert thresholds.compute_dtype([]) == "torch.float32"
    f32 = thresholds.limit("fp32")
    assert f32.dtype == "torch.float32" and "eps" in f32.rationale or f32.rationale
    assert thresholds.limit("bf16").rel_l2 > thresholds.limit("fp16").rel_l2 > f32.rel_l2
    # a long fp32 reduction earns a wider limit (sqrt(K) ulps), a short one does not
    assert thresholds.limit("fp32", reduction=16).rel_l2 == f32.rel_l2
    assert thresholds.limit("fp32", reduction=1 << 20).rel_l2 > f32.rel_l2
    assert thresholds.limit("fp32", scale=10).rel_l2 == pytest.approx(10 * f32.rel_l2)
    for name, entry in thresholds.table()["dtypes"].items():
        assert entry["rationale"] and entry["eps"] > 0, name


def K(path, cls="Linear", own=((3, 4),), shape_in=((2, 4),), shape_out=((2, 3),), depth=1, kind="module", idx=0):
    return CallKey(path, kind, cls, shape_in, shape_out, own, idx, None, depth)


def test_matching_identical_lists_is_the_identity():
    g = [K("a"), K("b"), K("c")]
    assert match_calls(g, list(g)).pairs == [(0, 0), (1, 1), (2, 2)]


def test_matching_renamed_attribute_and_class():
    g = [K("", "Net", (), depth=0), K("fc1"), K("act", "GELU", ()), K("fc2")]
    t = [K("", "Net", (), depth=0), K("up", "MyLinear"), K("gelu", "GELU", ()), K("down", "MyLinear")]
    assert match_calls(g, t).pairs == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_matching_wrapper_level_and_alias():
    fc = {"shape_out": ((2, 5),)}
    g = [K("mlp", "MLP", (), depth=0), K("mlp.fc", **fc)]
    t = [K("mlp", "Wrapper", (), depth=0), K("mlp.inner", "MLP", (), depth=1), K("mlp.inner.fc", depth=2, **fc)]
    m = match_calls(g, t)
    assert (1, 2) in m.pairs and m.unmatched_target == [1]
    assert explain_unmatched(t, 0, "target").startswith("wrapper around mlp.inner")
    t2g = m.target_to_golden()
    assert alias_wrappers(t, [None, 0, 1], t2g) == {1} and t2g[1] == 0


def test_matching_extra_and_missing_calls():
    g = [K("a"), K("b", shape_out=((2, 5),)), K("c")]
    t = [K("a"), K("c"), K("d", "Dropout", (), shape_in=((2, 3),), shape_out=((2, 3),))]
    m = match_calls(g, t)
    assert m.pairs == [(0, 0), (2, 1)]
    assert m.unmatched_golden == [1] and m.unmatched_target == [2]
    assert "missing" in explain_unmatched(g, 1, "golden") and "extra" in explain_unmatched(t, 2, "target")


def test_matching_never_pairs_different_output_shapes():
    g = [K("x", shape_out=((2, 3),))]
    t = [K("x", shape_out=((3, 2),))]
    assert match_calls(g, t).pairs == []


def test_scale_signature_separates_scale_from_noise():
    g = TensorStats("torch.bfloat16", (1024,), norm=10.0, fingerprint=(1.0, -2.0, 0.5, 3.0))
    scaled = TensorStats("torch.bfloat16", (1024,), norm=10.1, fingerprint=(1.01, -2.02, 0.505, 3.03))
    delta, resid = metrics.scale_signature(scaled, g)
    assert delta == pytest.approx(0.01) and resid == pytest.approx(0.0, abs=1e-12)
    noisy = TensorStats("torch.bfloat16", (1024,), norm=10.1, fingerprint=(1.3, -1.5, 0.9, 2.5))
    assert metrics.scale_signature(noisy, g)[1] > 0.1
    assert metrics.scale_signature(TensorStats("torch.float32", (2,), norm=1.0), g) is None
