"""Weights before anything runs: the golden's and the target's parameters and buffers compared by name and shape.

A target whose weights differ from the golden's (a wrongly converted checkpoint, a rolled or transposed projection,
a ``load_state_dict(strict=False)`` that loaded nothing) is a *finding*: :func:`compare_weights` lists every
differing tensor with its maximum absolute and relative L2 difference and the module that owns it. Lockstep
copies the golden weights into the target only when asked (``copy_weights=True``) or when *every* floating tensor
differs (two random initialisations: nothing to learn from the weights, everything from the code), and says so.

Names are paired as ``state_dict`` gives them; when the names differ (a renamed attribute, a wrapper level) the
tensors are paired by order where the counts and shapes agree, and the pairs whose names differ are listed (the
mapping used); otherwise by name, and the names found on one side only are listed.

>>> import torch
>>> a = torch.nn.Linear(2, 2); b = torch.nn.Linear(2, 2); b.load_state_dict(a.state_dict())
<All keys matched successfully>
>>> compare_weights(a, b).differ
[]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WEIGHT_REL_LIMIT = 1e-6  # relative L2 above which a float32 tensor counts as different (both sides float32)


def _owner(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _limit(dtype_a, dtype_b) -> float:
    """Relative L2 below which two tensors count as the same weights: 1e-6 when both are float32 or wider, else
    the limit for the narrower dtype (a target handed over in bf16 holds the golden's weights rounded)."""
    import torch

    from ascendify.precision import thresholds

    narrow = [d for d in (dtype_a, dtype_b) if d in (torch.float16, torch.bfloat16)]
    if not narrow:
        return WEIGHT_REL_LIMIT
    return max(thresholds.limit(str(d)).rel_l2 for d in narrow)


@dataclass
class WeightCheck:
    """What :func:`compare_weights` found. ``differ``: ``{name, golden_name, owner, shape, max_abs, rel_l2, why}``
    per differing tensor (``owner`` the target module path, ``""`` the root); ``missing``: ``{name, side}`` for
    names on one side only; ``mapping``: ``{golden, target}`` for the pairs whose names differ; ``how``: how the
    tensors were paired; ``golden_nonfinite``: golden tensors holding NaN/Inf; ``copied``: whether lockstep then
    copied the golden weights into the target (and ``copy_reason`` why)."""

    compared: int = 0
    floating: int = 0
    how: str = "by name"
    differ: list[dict[str, Any]] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)
    mapping: list[dict[str, str]] = field(default_factory=list)
    golden_nonfinite: list[dict[str, Any]] = field(default_factory=list)
    copied: bool = False
    copy_reason: str | None = None

    parameters: int = 0  # paired parameters (not buffers) whose golden values are not all equal: random ones

    @property
    def all_differ(self) -> bool:
        """Every randomly initialised parameter differs (two random initialisations), none in shape. Parameters
        and buffers that start as constants (a LayerNorm's ones and zeros, a BatchNorm's running variance) are
        equal in two fresh models anyway and do not count."""
        if any(d["rel_l2"] is None for d in self.differ):
            return False
        return self.parameters > 0 and sum(1 for d in self.differ if d.get("random")) == self.parameters

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The differing tensors that stay findings (none once the golden weights were copied)."""
        return [] if self.copied else self.differ

    def to_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "floating": self.floating,
            "how": self.how,
            "differ": self.differ,
            "missing": self.missing,
            "mapping": self.mapping,
            "golden_nonfinite": self.golden_nonfinite,
            "parameters": self.parameters,
            "all_differ": self.all_differ,
            "copied": self.copied,
            "copy_reason": self.copy_reason,
        }


def _pairs(gs: dict, ts: dict) -> tuple[list[tuple[str, str]], list[dict[str, Any]], str]:
    """``(golden name, target name)`` pairs, names on one side only, and how they were paired."""
    if gs.keys() == ts.keys():
        return [(k, k) for k in gs], [], "by name"
    gi, ti = list(gs.items()), list(ts.items())
    if len(gi) == len(ti) and all(a.shape == b.shape for (_, a), (_, b) in zip(gi, ti, strict=True)):
        return [(g, t) for (g, _), (t, _) in zip(gi, ti, strict=True)], [], "by order (names differ)"
    pairs = [(k, k) for k in gs if k in ts]
    missing = [{"name": k, "side": "golden only"} for k in gs if k not in ts]
    missing += [{"name": k, "side": "target only"} for k in ts if k not in gs]
    return pairs, missing, "by name (some names on one side only)"


def compare_weights(golden, target) -> WeightCheck:
    """Every parameter and buffer of ``target`` against ``golden`` (see the module docstring). Values are compared
    in float64 on the CPU; integer tensors (``num_batches_tracked``) must be equal."""
    import torch

    gs, ts = golden.state_dict(), target.state_dict()
    pairs, missing, how = _pairs(gs, ts)
    res = WeightCheck(compared=len(pairs), how=how, missing=missing)
    res.mapping = [{"golden": g, "target": t} for g, t in pairs if g != t]
    pnames = {n for n, _ in target.named_parameters(remove_duplicate=False)}
    for gname, tname in pairs:
        g, t = gs[gname], ts[tname]
        entry = {"name": tname, "golden_name": gname if gname != tname else None, "owner": _owner(tname),
                 "shape": list(t.shape)}
        rand = tname in pnames and g.is_floating_point() and g.numel() > 1 and bool((g != g.reshape(-1)[0]).any())
        res.parameters += rand
        if g.is_floating_point() or g.is_complex():
            bad = int((~torch.isfinite(g)).sum()) if g.numel() else 0
            if bad:
                res.golden_nonfinite.append({"name": gname, "nonfinite": bad, "numel": g.numel()})
        if not (g.is_floating_point() or g.is_complex()):
            if g.shape != t.shape or not torch.equal(g.cpu(), t.cpu().to(g.dtype)):
                res.differ.append({**entry, "max_abs": None, "rel_l2": None, "why": "values differ"})
            continue
        res.floating += 1
        if g.shape != t.shape:
            res.differ.append({**entry, "max_abs": None, "rel_l2": None,
                               "why": f"shape {list(g.shape)} in the golden, {list(t.shape)} in the target"})
            continue
        a, b = g.detach().cpu().double(), t.detach().cpu().double()
        d = a - b
        norm = float(a.norm())
        dn = float(d.norm())
        rel = dn / norm if norm > 0 else dn
        if not (rel <= _limit(g.dtype, t.dtype)):  # NaN counts as different
            res.differ.append({**entry, "max_abs": float(d.abs().max()) if d.numel() else 0.0, "rel_l2": rel,
                               "why": _why(a, b), "random": rand})
    return res


def _why(a, b) -> str:
    """A hint at what kind of difference: a roll or a transpose of the golden, a scale, or plain values."""
    import torch

    if a.dim() >= 1 and a.numel() > 1:
        for dim in range(a.dim()):
            n = a.shape[dim]
            for k in (1, -1, n // 2) if n > 2 else (1,):
                if k and torch.equal(torch.roll(a, k, dim), b):
                    return f"the golden rolled by {k} along dim {dim}"
        if a.dim() == 2 and a.shape[0] == a.shape[1] and torch.equal(a.t(), b):
            return "the golden transposed"
        na = float(a.norm())
        if na > 0:
            s = float((a * b).sum()) / na**2
            if s and float((b - s * a).norm()) <= 1e-6 * abs(s) * na:
                return f"the golden scaled by {s:.6g}"
    return "values differ"


def copy_weights(src, dst) -> str:
    """Copy ``src``'s parameters and buffers into ``dst``: by ``state_dict`` name when the names and shapes agree,
    else by order and shape (renamed attributes, wrapper levels). Returns how (``"by name"``/``"by order"``);
    raises ``ValueError`` naming the first entry that fits nowhere."""
    import torch

    ss, ds = src.state_dict(), dst.state_dict()
    if ss.keys() == ds.keys() and all(ss[k].shape == ds[k].shape for k in ss):
        with torch.no_grad():
            for k in ds:
                ds[k].copy_(ss[k])
        return "by name"
    sv, dv = list(ss.items()), list(ds.items())
    if len(sv) != len(dv):
        # buffers such as num_batches_tracked may differ in count: fall back to parameters only
        sv = [(n, p.data) for n, p in src.named_parameters(remove_duplicate=False)]
        dv = [(n, p.data) for n, p in dst.named_parameters(remove_duplicate=False)]
    if len(sv) != len(dv):
        raise ValueError(f"cannot copy weights: golden has {len(sv)} tensors, target {len(dv)} (different models?)")
    with torch.no_grad():
        for (sn, s), (dn, d) in zip(sv, dv, strict=False):
            if s.shape != d.shape:
                raise ValueError(
                    f"cannot copy weights: golden {sn} {tuple(s.shape)} vs target {dn} {tuple(d.shape)} "
                    "(different models, or parameters created in a different order)"
                )
            d.copy_(s)
    return "by order"
