"""Share of the torch_npu operator call sites of Ascend's LLM frameworks that run on the emulated npu.

Reads the call sites counted in ``src/ascendify/data/npu_fused_op_callers.json`` (``tools/count_fused_callers.py``:
references to ``torch_npu.<op>``, ``torch.ops.npu.<op>`` and names imported from torch_npu, per repository at
one commit) and the operators ``ascendify.emulator.fused`` emulates, and prints per repository the share of call
sites whose operator is emulated, then the operators still missing with their counts. An operator counts as
emulated when ``torch_npu.<op>`` resolves to an emulation (some take only part of their documented arguments:
see docs/emulator.md). Also printed: the share by the regular expression of issue 27 (which counts mentions in
comments, strings and ``mock.patch`` targets too).

    python benchmarks/fused_coverage.py [--json] [--top N]

No torch needed; it reads data and the emulator's operator table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ascendify.core import knowledge  # noqa: E402
from ascendify.emulator import fused  # noqa: E402


def coverage() -> list[dict]:
    data = knowledge.load("npu_fused_op_callers")["repositories"]
    known = set(knowledge.load("torch_npu_api")["torch_npu_ops"].get("all", []))
    atb = knowledge.load("torch_npu_api")["torch_npu_ops"].get("atb_ops", {})
    known |= {n for names in atb.values() if isinstance(names, list) for n in names}
    known |= set(knowledge.load("npu_fused_ops")["ops"])
    emulated = fused.names()
    rows = []
    for repo, row in data.items():
        ops = row["ops"]
        total = sum(ops.values())
        done = sum(n for op, n in ops.items() if op in emulated)
        grep_ops = row.get("grep_ops", {})
        grep_total = sum(grep_ops.values())
        grep_done = sum(n for op, n in grep_ops.items() if op in emulated)
        missing = {op: n for op, n in ops.items() if op not in emulated}
        rows.append({
            "repository": repo, "commit": row["commit"][:12], "date": row["date"][:10],
            "call_sites": total, "emulated": done, "share": done / total if total else 1.0,
            "grep_occurrences": grep_total, "grep_share": grep_done / grep_total if grep_total else 1.0,
            "ops": len(ops), "ops_emulated": sum(1 for op in ops if op in emulated),
            "missing": missing,
            "not_torch_npu_ops": sorted(op for op in ops if op not in known),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--top", type=int, default=12, help="missing operators listed per repository (default 12)")
    args = p.parse_args(argv)
    rows = coverage()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'repository':<26} {'commit':<12} {'sites':>6} {'run':>6} {'share':>6} {'regex':>6}")
    for r in rows:
        print(f"{r['repository']:<26} {r['commit']:<12} {r['call_sites']:>6} {r['emulated']:>6} "
              f"{r['share']:>6.1%} {r['grep_share']:>6.1%}")
    for r in rows:
        miss = sorted(r["missing"].items(), key=lambda kv: (-kv[1], kv[0]))
        print(f"\n{r['repository']}: {len(miss)} operators missing, {sum(r['missing'].values())} call sites")
        for op, n in miss[:args.top]:
            note = "  (not a torch_npu operator)" if op in r["not_torch_npu_ops"] else ""
            print(f"  {n:>4}  {op}{note}")
        if len(miss) > args.top:
            rest = miss[args.top:]
            print(f"  {sum(n for _, n in rest):>4}  ... {len(rest)} more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
