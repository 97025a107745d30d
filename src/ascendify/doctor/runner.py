"""``ascendify doctor``'s run: gather the facts once, run every check on them (and the device checks), and return
the whole report as one dict (the front-end is ``ascendify/commands/doctor.py``; :mod:`.render` shows it)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ascendify.doctor import checks as _checks  # registers the checks
from ascendify.doctor.model import REGISTRY, result_row
from ascendify.doctor.probe import Host, gather

SCHEMA = "ascendify.doctor/1"


def run_checks(
    host: Host | None = None,
    *,
    only: list[str] | None = None,
    device: bool = True,
    targets: list[str] | None = None,
    facts: dict[str, Any] | None = None,
    progress=None,
) -> dict[str, Any]:
    """Gather facts, run the checks (``only``: these ids), and the device checks; the whole report as a dict."""
    from ascendify import __version__

    if only:
        unknown = [c for c in only if c not in REGISTRY and not c.startswith("device")]
        if unknown:
            raise KeyError(f"unknown check id(s): {', '.join(unknown)} (see --list-checks)")
    if progress:
        progress("gathering facts")
    facts = facts if facts is not None else gather(host)
    rows = []
    for cid, chk in REGISTRY.items():
        if only and cid not in only:
            continue
        rows.append(result_row(chk, chk.run(facts)))
    devices: list[dict[str, Any]] = []
    if device and (not only or any(c.startswith("device") for c in only)):
        from ascendify.doctor import device as dev

        devices = dev.run_all(facts, targets=targets, progress=progress)
        rows.extend(dev.result_rows(devices))
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "warn", "fail", "skip")}
    return {
        "schema": SCHEMA,
        "ascendify_version": __version__,
        "generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "summary": {**counts, "verdict": "fail" if counts["fail"] else "ok", "npu": _npu_summary(facts)},
        "checks": rows,
        "devices": devices,
        "facts": facts,
    }


def _npu_summary(facts: dict[str, Any]) -> str:
    probe = facts.get("torch_npu_probe") or {}
    if probe.get("is_available"):
        return "real npu"
    if _checks.npu_hardware(facts):
        return "npu present, not usable"
    return "none"
