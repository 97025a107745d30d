"""Error metrics between a target tensor and its golden counterpart: each metric is one small documented function.

Two families:

* **Tensor metrics** (lockstep mode, tensor-mode dumps): :func:`cosine`, :func:`rel_l2`, :func:`max_abs`,
  :func:`max_rel`, :func:`thousandth_ratio`, :func:`ulp_distance`, :func:`nan_inf_agreement`, gathered by
  :func:`tensor_metrics`. They take torch tensors, compute in float64 on the host (one transfer per tensor), and
  return plain floats.
* **Statistics metrics** (statistics-mode dumps): :func:`stat_rel_errors` compares max/min/mean/L2 norm and the
  fingerprint vector (``precision.model``) with relative errors.

Conventions: ``actual`` is the target's tensor, ``expected`` the golden one (msprobe's "NPU" vs "Bench"); every
metric returns a float where *larger is worse* except :func:`cosine` and :func:`thousandth_ratio` (larger is
better, 1.0 is perfect), matching msprobe's columns of the same names.

>>> import torch
>>> a = torch.tensor([1.0, 2.0, 3.0]); b = torch.tensor([1.0, 2.0, 3.06])
>>> round(rel_l2(a, b), 4), round(max_abs(a, b), 2)
(0.0158, 0.06)
>>> cosine(a * 1.02, a)   # cosine ignores scale: rel_l2 does not
1.0
"""

from __future__ import annotations

import math
from typing import Any

# Guard for divisions by a golden value that is zero (msprobe uses 1e-10 as well).
TINY = 1e-10

# Machine epsilon (spacing of 1.0) per dtype name: ULP distances are counted in the target's dtype.
EPS = {
    "torch.float64": 2.0**-52,
    "torch.float32": 2.0**-23,
    "tf32": 2.0**-10,
    "hf32": 2.0**-10,
    "torch.bfloat16": 2.0**-7,
    "torch.float16": 2.0**-10,
}
# Smallest normal number per dtype (below it ULPs are fixed-size).
MIN_NORMAL = {
    "torch.float64": 2.2250738585072014e-308,
    "torch.float32": 1.1754943508222875e-38,
    "torch.bfloat16": 1.1754943508222875e-38,
    "torch.float16": 6.103515625e-05,
}


def _pair(actual, expected):
    """Both tensors as flat float64 host tensors (complex as real view); shapes must hold the same count."""
    import torch

    a = actual.detach()
    b = expected.detach()
    if a.is_complex():
        a = torch.view_as_real(a)
    if b.is_complex():
        b = torch.view_as_real(b)
    a = a.to("cpu", torch.float64).reshape(-1)
    b = b.to("cpu", torch.float64).reshape(-1)
    return a, b


def _finite(a, b):
    m = a.isfinite() & b.isfinite()
    if bool(m.all()):
        return a, b
    return a[m], b[m]


def cosine(actual, expected) -> float:
    """Cosine similarity of the two tensors as vectors (finite elements only). 1.0 when both are all zero, 0.0
    when exactly one is. Blind to scale: ``cosine(1.02 * x, x) == 1``."""
    a, b = _finite(*_pair(actual, expected))
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return max(-1.0, min(1.0, float(a.dot(b)) / (na * nb)))


def rel_l2(actual, expected) -> float:
    """Relative L2 (Euclidean) error ``|a - b| / |b|`` over the finite elements: the norm-relative error, immune
    to the near-zero golden values that make element-wise relative errors explode (a LayerNorm's output)."""
    a, b = _finite(*_pair(actual, expected))
    nb = float(b.norm())
    d = float((a - b).norm())
    if nb == 0.0:
        return 0.0 if d == 0.0 else math.inf
    return d / nb


def trimmed_rel_l2(actual, expected, share: float = 0.01) -> float:
    """:func:`rel_l2` without the ``share`` of positions with the largest absolute error (none for tensors under
    ``1/share`` elements). A gradient through a clamp, a ReLU or a rounding flips between zero and its value where
    rounding moved the input across the edge: a few positions with a full-size error, legitimate; a defect moves
    most positions. NaN when no position is finite on both sides."""
    a, b = _finite(*_pair(actual, expected))
    if not a.numel():
        return math.nan
    d = (a - b).abs()
    k = int(d.numel() * share)
    if k:
        d = d.sort().values[: d.numel() - k]
    nb, dn = float(b.norm()), float(d.norm())
    if nb == 0.0:
        return 0.0 if dn == 0.0 else math.inf
    return dn / nb


def max_abs(actual, expected) -> float:
    """Largest absolute element difference (msprobe's MaxAbsErr)."""
    a, b = _finite(*_pair(actual, expected))
    return float((a - b).abs().max()) if a.numel() else 0.0


def max_rel(actual, expected) -> float:
    """Largest element-wise relative difference ``|a - b| / max(|b|, 1e-10)`` (msprobe's MaxRelativeErr). Explodes
    where the golden value is near zero: use it to read, not to decide."""
    a, b = _finite(*_pair(actual, expected))
    if not a.numel():
        return 0.0
    return float(((a - b).abs() / b.abs().clamp_min(TINY)).max())


def thousandth_ratio(actual, expected, tol: float = 1e-3) -> float:
    """Share of elements whose relative error ``|a - b| / |b|`` is within ``tol`` (msprobe's "One Thousandth Err
    Ratio"; ``tol=5e-3`` gives "Five Thousandths Err Ratio"). 1.0 is perfect; msprobe passes at >= 0.999.
    Elements whose golden value is below ``tol`` in magnitude use the absolute error instead."""
    a, b = _finite(*_pair(actual, expected))
    if not a.numel():
        return 1.0
    err = (a - b).abs() / b.abs().clamp_min(1.0)
    return float((err <= tol).double().mean())


def ulp_distance(actual, expected, dtype: str = "torch.float32") -> tuple[float, float]:
    """``(max, mean)`` distance in units in the last place of ``dtype`` (the dtype the target computed in): the
    element-wise difference divided by the spacing of ``dtype`` at the golden value. 0.5 ULP is correct rounding;
    a few ULPs is a different summation order; hundreds is a different computation."""
    import torch

    a, b = _finite(*_pair(actual, expected))
    if not a.numel():
        return 0.0, 0.0
    eps = EPS.get(str(dtype), EPS["torch.float32"])
    tiny = MIN_NORMAL.get(str(dtype), MIN_NORMAL["torch.float32"])
    mag = b.abs().clamp_min(tiny)
    # spacing at |b|: 2^floor(log2|b|) * eps
    spacing = torch.exp2(torch.floor(torch.log2(mag))) * eps
    u = (a - b).abs() / spacing
    return float(u.max()), float(u.mean())


def nan_inf_agreement(actual, expected) -> dict[str, Any]:
    """Where NaN and Inf sit in each tensor: counts, and ``agree`` (True when both have them in the same places
    with the same signs; a target NaN where golden is finite is a defect even if every other metric passes)."""
    import torch

    a = actual.detach().to("cpu")
    b = expected.detach().to("cpu")
    if a.is_complex() or b.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    a = a.reshape(-1)
    b = b.reshape(-1)
    if not (a.is_floating_point() and b.is_floating_point()):
        return {"nan": [0, 0], "inf": [0, 0], "agree": True}
    an, bn = a.isnan(), b.isnan()
    ai, bi = a.isinf(), b.isinf()
    agree = a.shape == b.shape and bool((an == bn).all()) and bool((ai == bi).all())
    if agree and bool(ai.any()):
        agree = bool((a[ai] == b[ai].to(a.dtype)).all())
    return {"nan": [int(an.sum()), int(bn.sum())], "inf": [int(ai.sum()), int(bi.sum())], "agree": agree}


def _all_from(a, b, udt: str) -> dict[str, Any]:
    """:func:`cosine`, :func:`rel_l2`, :func:`max_abs`, :func:`max_rel`, :func:`thousandth_ratio` (1e-3, 5e-3)
    and :func:`ulp_distance` of flat float64 host tensors already restricted to their finite positions, sharing
    the difference and the magnitudes (each function alone converts and filters its inputs again)."""
    import torch

    if not a.numel():
        return {"cosine": 1.0, "rel_l2": 0.0, "max_abs": 0.0, "max_rel": 0.0, "thousandth": 1.0,
                "five_thousandth": 1.0, "ulp_max": 0.0, "ulp_mean": 0.0}
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 and nb == 0.0:
        cos = 1.0
    elif na == 0.0 or nb == 0.0:
        cos = 0.0
    else:
        cos = max(-1.0, min(1.0, float(a.dot(b)) / (na * nb)))
    ad = (a - b).abs_()
    dn = float(ad.norm())
    bab = b.abs()
    rel = (0.0 if dn == 0.0 else math.inf) if nb == 0.0 else dn / nb
    err = ad / bab.clamp_min(1.0)
    eps = EPS.get(str(udt), EPS["torch.float32"])
    tiny = MIN_NORMAL.get(str(udt), MIN_NORMAL["torch.float32"])
    u = ad / (torch.exp2(torch.floor(torch.log2(bab.clamp_min(tiny)))) * eps)
    return {
        "cosine": cos,
        "rel_l2": rel,
        "max_abs": float(ad.max()),
        "max_rel": float((ad / bab.clamp_min(TINY)).max()),
        "thousandth": float((err <= 1e-3).double().mean()),
        "five_thousandth": float((err <= 5e-3).double().mean()),
        "ulp_max": float(u.max()),
        "ulp_mean": float(u.mean()),
    }


def tensor_metrics(actual, expected, dtype: str | None = None) -> dict[str, Any]:
    """Every tensor metric of ``actual`` against ``expected`` in one dict (keys: ``cosine``, ``rel_l2``,
    ``max_abs``, ``max_rel``, ``thousandth``, ``five_thousandth``, ``ulp_max``, ``ulp_mean``, ``nan_inf``,
    ``shape``/``dtype`` mismatches). ``dtype`` is the dtype the target computed in, for ULPs (default: the
    target's dtype). Tensors of different shapes get only the mismatch entries (numbers would be meaningless).
    The numbers are over the positions finite on both sides; where there is none (an all-NaN output) they are NaN,
    never the "perfect" values of an empty comparison."""
    out: dict[str, Any] = {
        "dtype": [str(actual.dtype), str(expected.dtype)],
        "shape": [list(actual.shape), list(expected.shape)],
        "shape_mismatch": tuple(actual.shape) != tuple(expected.shape),
    }
    if out["shape_mismatch"]:
        return out
    if not (actual.is_floating_point() or actual.is_complex()) or not (
        expected.is_floating_point() or expected.is_complex()
    ):
        same = bool((actual.detach().to("cpu") == expected.detach().to("cpu")).all()) if actual.numel() else True
        out.update(exact=same, rel_l2=0.0 if same else math.inf, cosine=1.0 if same else 0.0)
        return out
    udt = dtype or str(actual.dtype)
    a, b = _finite(*_pair(actual, expected))  # once: the functions above, computed from the same arrays
    out.update(_all_from(a, b, udt))
    out["nan_inf"] = nan_inf_agreement(actual, expected)
    if actual.numel() and not a.numel():
        # no position is finite on both sides (an all-NaN output): the metrics above saw nothing to compare, and
        # their "perfect" values (cosine 1, error 0) would read as a match
        for key in ("cosine", "rel_l2", "max_abs", "max_rel", "thousandth", "five_thousandth", "ulp_max",
                    "ulp_mean"):
            out[key] = math.nan
    return out


# ----------------------------------------------------------------------------------------------------------
# statistics-mode metrics
# ----------------------------------------------------------------------------------------------------------


def rel_diff(actual: float | None, expected: float | None, scale: float | None = None) -> float | None:
    """``|a - b| / max(|b|, scale, 1e-10)``; None when either is missing. ``scale`` (e.g. the tensor's RMS) keeps
    a near-zero golden mean from turning rounding noise into a huge relative error."""
    if actual is None or expected is None:
        return None
    if math.isnan(actual) and math.isnan(expected):
        return 0.0
    if math.isinf(actual) or math.isinf(expected) or math.isnan(actual) or math.isnan(expected):
        return 0.0 if actual == expected else math.inf
    den = max(abs(expected), scale or 0.0, TINY)
    return abs(actual - expected) / den


def fingerprint_rel(actual: tuple[float, ...], expected: tuple[float, ...]) -> float | None:
    """Relative L2 error of the fingerprint vector ``|fa - fb| / |fb|`` (an estimate of the tensor's relative L2
    error, see ``precision.model``); None when either is missing or their lengths differ."""
    if not actual or not expected or len(actual) != len(expected):
        return None
    if any(not math.isfinite(x) for x in (*actual, *expected)):
        # overflowed components (a tensor holding finfo.min): they must agree in place and sign; the finite
        # components are compared as usual
        pairs = []
        for x, y in zip(actual, expected, strict=True):
            if math.isfinite(x) and math.isfinite(y):
                pairs.append((x, y))
            elif not (x == y or (math.isnan(x) and math.isnan(y))):
                return math.inf
        if not pairs:
            return 0.0
        actual, expected = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    d = math.sqrt(sum((x - y) ** 2 for x, y in zip(actual, expected, strict=False)))
    nb = math.sqrt(sum(y * y for y in expected))
    if nb == 0.0:
        return 0.0 if d == 0.0 else math.inf
    return d / nb


def stat_rel_errors(actual, expected) -> dict[str, Any]:
    """Compare two ``TensorStats``: relative errors of max/min/mean/norm (max/min/mean scaled by the tensor's RMS,
    ``norm / sqrt(numel)``, so a mean near zero does not explode), of the fingerprint, plus dtype/shape/NaN/Inf
    mismatches. ``worst`` is the largest relative error among norm and fingerprint (the two that estimate the
    relative L2 error of the tensor); max/min/mean are reported, and count in ``worst_all``."""
    out: dict[str, Any] = {
        "dtype": [actual.dtype, expected.dtype],
        "shape": [list(actual.shape), list(expected.shape)],
        "shape_mismatch": tuple(actual.shape) != tuple(expected.shape),
        "nan_inf_mismatch": (actual.nan_count, actual.inf_count) != (expected.nan_count, expected.inf_count),
    }
    if out["shape_mismatch"]:
        return out
    rms = None
    if expected.norm is not None and expected.numel:
        rms = expected.norm / math.sqrt(expected.numel)
    for k in ("max", "min", "mean"):
        out[k] = rel_diff(getattr(actual, k), getattr(expected, k), rms)
    out["norm"] = rel_diff(actual.norm, expected.norm)
    out["fingerprint"] = fingerprint_rel(actual.fingerprint, expected.fingerprint)
    if actual.md5 is not None and expected.md5 is not None:
        out["md5_equal"] = actual.md5 == expected.md5
    main = [v for v in (out["norm"], out["fingerprint"]) if v is not None]
    out["worst"] = max(main) if main else None
    every = [out[k] for k in ("max", "min", "mean", "norm", "fingerprint") if out.get(k) is not None]
    out["worst_all"] = max(every) if every else None
    return out


def scale_signature(actual, expected) -> tuple[float, float] | None:
    """``(delta, residual)`` when ``actual`` looks like ``(1 + delta) * expected``: ``delta`` from the L2 norms,
    ``residual = |fa - (1 + delta) fb| / |fb|`` over the fingerprints (small when the fingerprint scaled as a
    whole: a scale error; about the per-element error when the difference is rounding noise). None when either
    tensor lacks a norm or a fingerprint. Rounding noise averages out of a norm (relative error ~ eps/sqrt(n)),
    so a 1% scale stands out of bf16 noise even though every element's error is inside bf16 rounding."""
    if not actual.fingerprint or not expected.fingerprint or len(actual.fingerprint) != len(expected.fingerprint):
        return None
    if actual.norm is None or expected.norm is None or not expected.norm or not math.isfinite(actual.norm):
        return None
    if not all(math.isfinite(x) for x in (*actual.fingerprint, *expected.fingerprint)):
        return None
    delta = actual.norm / expected.norm - 1.0
    nb = math.sqrt(sum(y * y for y in expected.fingerprint))
    if nb == 0.0:
        return None
    res = math.sqrt(sum((x - (1.0 + delta) * y) ** 2 for x, y in zip(actual.fingerprint, expected.fingerprint,
                                                                       strict=True)))
    return delta, res / nb
