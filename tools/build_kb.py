"""Regenerate ascendify's package data from ``../shared/reference``.

The reference files are facts about torch_npu gathered from public sources (see their README). The product
needs only parts of them; this script trims them, stamps each output with its provenance, and writes them to
``src/ascendify/data/``. Run it again when a newer torch_npu appears::

    python tools/build_kb.py [--reference ../shared/reference]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "ascendify" / "data"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _provenance(ref: Path, name: str, source: str) -> dict:
    return {"derived_from": f"shared/reference/{name}", "sha256_16": _digest(ref / name), "source": source}


def _write(name: str, payload: dict) -> None:
    tmp = OUT / (name + ".tmp")
    tmp.write_text(json.dumps(payload, ensure_ascii=False, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, OUT / name)
    print(f"wrote {OUT.relative_to(ROOT) / name} ({(OUT / name).stat().st_size // 1024} KiB)")


# Names that exist at run time but are invisible to a static read of the wheel (attributes of config objects),
# each with the reference statement it rests on.
RUNTIME_NAMES = {
    "torch.npu.matmul.allow_hf32": "shared/reference/README.md: TF32's analogue is HF32: torch.npu.matmul.allow_hf32",
    "torch.npu.conv.allow_hf32": "shared/reference/README.md: TF32's analogue is HF32: torch.npu.conv.allow_hf32",
}


def build(ref: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)

    api = json.loads((ref / "torch_npu_api.json").read_text(encoding="utf-8"))
    _write(
        "torch_npu_api.json",
        {
            "provenance": _provenance(ref, "torch_npu_api.json", api["meta"]["source_wheel"]),
            "caveats": api["meta"].get("caveats", []),
            "device_type": api["device_type"],
            "distributed_backends": api["distributed_backends"],
            "env_vars": api["env_vars"],
            "dotted_names": sorted(api["dotted_names"]),
            "runtime_names": RUNTIME_NAMES,
            "torch_npu_ops": api["torch_npu_ops"],
            "torch_cuda_to_npu": api["torch_cuda_to_npu"],
            "modules": {k: {"__all__": v.get("__all__"), "public": v.get("public")} for k, v in api["modules"].items()},
        },
    )

    sup = json.loads((ref / "npu_api_support_2.13.json").read_text(encoding="utf-8"))
    apis = []
    for a in sup["apis"]:
        apis.append(
            {
                "api": a["api"],
                "kind": a.get("kind"),
                "npu_name": a.get("npu_name"),
                "support": a.get("support"),
                "supported_any": a.get("supported_any"),
                "constraints": a.get("constraints"),
            }
        )
    _write(
        "npu_api_support.json",
        {
            "provenance": _provenance(ref, "npu_api_support_2.13.json", sup["source"]),
            "torch_version": "2.13",
            "apis": apis,
        },
    )

    cov = json.loads((ref / "npu_aten_op_coverage.json").read_text(encoding="utf-8"))
    _write(
        "npu_aten_op_coverage.json",
        {
            "provenance": _provenance(
                ref, "npu_aten_op_coverage.json", "heuristic: kernel registration strings in libtorch_npu.so 2.13"
            ),
            "method": cov["method"].split("\n\n")[0],
            "ops_without_any_npu_kernel": cov["ops_without_any_npu_kernel"],
            "ops_partially_covered": cov["ops_partially_covered"],
        },
    )

    t2n = json.loads((ref / "transfer_to_npu_patches.json").read_text(encoding="utf-8"))
    _write(
        "transfer_to_npu_patches.json",
        {"provenance": _provenance(ref, "transfer_to_npu_patches.json", t2n["source"]), **t2n},
    )

    with open(ref / "compat_matrix.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    _write(
        "compat_matrix.json",
        {
            "provenance": _provenance(ref, "compat_matrix.csv", "Ascend/pytorch compatibility table plus PyPI wheel tags"),
            "rows": rows,
        },
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference")
    a = p.parse_args(argv)
    if not (a.reference / "torch_npu_api.json").is_file():
        print(f"error: no reference data at {a.reference}", file=sys.stderr)
        return 2
    build(a.reference)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
