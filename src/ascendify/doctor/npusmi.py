"""Parse the table ``npu-smi info`` prints (910B, A3 with Chip/Phy-ID, 310P with Chip/Device, and the process table).

The formats, from real outputs quoted in public issue reports::

    | npu-smi 23.0.6                   Version: 23.0.6                                               |
    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    | 4     910B4               | OK            | 89.2        39                0    / 0             |
    | 0                         | 0000:81:00.0  | 0           0    / 0          29096/ 32768         |
    | NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
    | 4       0                 | 498807        | python                   | 26323                   |

A3 hosts print ``Chip  Phy-ID`` and two chips per NPU; 310P cards print ``Chip  Device`` and a single
``Memory-Usage`` pair. The parser keys on the shape of each row (an id and a chip name followed by a health word;
then a chip row with a bus id) rather than on column positions, so it reads all of these.
"""

from __future__ import annotations

import re
from typing import Any

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", re.I)
_HEALTH = r"(OK|Warning|Alarm|Critical|Abnormal|Unknown|NA)"
_NAME_ROW = re.compile(r"^\|\s*(\d+)\s+([A-Za-z]*\d[\w.-]*)\s*\|?\s*" + _HEALTH + r"\b(.*)$", re.I)
_BUS = re.compile(r"\b([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b")
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_NUM = re.compile(r"^-?\d+(\.\d+)?$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _num(tok: str) -> float | None:
    return float(tok) if _NUM.match(tok) else None


def parse(text: str) -> dict[str, Any]:
    """``{"version", "devices": [...], "processes": [...]}`` from ``npu-smi info`` output.

    Each device: ``npu`` (id), ``chip``, ``name`` (``910B3``, ``Ascend910``, ``310P3``), ``health``, ``bus_id``,
    ``power_w``, ``temp_c``, ``aicore_pct``, ``memory_used_mb`` / ``memory_total_mb`` (HBM where the card has it).
    Each process: ``npu``, ``chip``, ``pid``, ``name``, ``memory_mb``.
    """
    out: dict[str, Any] = {"version": None, "devices": [], "processes": []}
    m = _VERSION.search(text)
    if m:
        out["version"] = m.group(2)
    lines = [ln for ln in text.splitlines() if ln.strip().startswith("|")]
    in_procs = False
    pending: dict[str, Any] | None = None
    for ln in lines:
        low = ln.lower()
        if "process id" in low and "process name" in low:
            in_procs, pending = True, None
            continue
        if set(ln.strip()) <= set("|+=-"):
            continue
        if in_procs:
            proc = _process_row(ln)
            if proc:
                out["processes"].append(proc)
            continue
        nm = _NAME_ROW.match(ln)
        if nm and not _BUS.search(ln):
            npu = int(nm.group(1))
            rest = [t for t in re.split(r"[\s|]+", nm.group(4)) if t]
            nums = [_num(t) for t in rest if t not in ("/",)]
            pending = {
                "npu": npu,
                "chip": None,
                "name": nm.group(2),
                "health": nm.group(3).upper() if nm.group(3).lower() in ("ok", "na") else nm.group(3).capitalize(),
                "bus_id": None,
                "power_w": nums[0] if nums else None,
                "temp_c": nums[1] if len(nums) > 1 else None,
                "aicore_pct": None,
                "memory_used_mb": None,
                "memory_total_mb": None,
            }
            pairs = [(int(a), int(b)) for a, b in _PAIR.findall(nm.group(4))]
            if pairs and len([p for p in pairs if p[1] > 0]) and "hugepages" not in low:
                # 310P's 24.1 layout puts memory on the name row
                pending["_name_pairs"] = pairs
            continue
        if pending is not None:
            cells = _cells(ln)
            bus = _BUS.search(ln)
            head = cells[0].split() if cells else []
            if head and all(t.isdigit() for t in head) and (bus or "NA" in ln):
                dev = dict(pending)
                name_pairs = dev.pop("_name_pairs", None)
                dev["chip"] = int(head[0])
                dev["bus_id"] = bus.group(1) if bus else None
                tail = ln[bus.end() :] if bus else " ".join(cells[1:])
                toks = [t for t in re.split(r"[\s|]+", tail) if t]
                dev["aicore_pct"] = _num(toks[0]) if toks else None
                pairs = [(int(a), int(b)) for a, b in _PAIR.findall(tail)] or (name_pairs or [])
                real = [p for p in pairs if p[1] > 0]
                if real:
                    dev["memory_used_mb"], dev["memory_total_mb"] = real[-1]
                out["devices"].append(dev)
                # A3 and 310P Duo: the next chip of the same NPU repeats only the name row; keep pending for it
                continue
    return out


def _process_row(ln: str) -> dict[str, Any] | None:
    cells = _cells(ln)
    if len(cells) < 3 or "no running processes" in ln.lower():
        return None
    head = cells[0].split()
    if not head or not head[0].isdigit():
        return None
    rest = cells[1:]
    if not rest or not rest[0].isdigit():
        return None
    mem = _num(rest[-1]) if len(rest) >= 3 else None
    return {
        "npu": int(head[0]),
        "chip": int(head[1]) if len(head) > 1 and head[1].isdigit() else None,
        "pid": int(rest[0]),
        "name": rest[1] if len(rest) >= 3 else "",
        "memory_mb": mem,
    }
