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



# ------------------------------------------------------------------------------------------------------------
# The wheel step: exact facts from a torch_npu wheel (which ATen ops have NPU kernels; autocast lists)
#
# torch_npu cannot be imported without CANN, but its wheel is a zip. Three sources inside it are read:
#   1. torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml: the op-plugin list that torch_npu's codegen
#      turned into TORCH_LIBRARY_IMPL(aten, PrivateUse1) registrations (exact; cross-checked against the
#      registration strings in libtorch_npu.so);
#   2. libtorch_npu.so strings: torch_npu's own "CAUTION ... fall back to run on the CPU" messages (kernels that
#      are registered but hand the work to the CPU);
#   3. libtorch_npu.so code: the AutocastPrivateUse1 registrations (AutoCastOps.cpp). Each m.impl() call site
#      loads an "aten::<op>" string; the kernel it registers is classified by what it calls: cached_cast to
#      float32 (ScalarType 6) = fp32, cached_cast to the autocast dtype = lower_precision_fp, one autocast-dtype
#      lookup feeding several casts = promote, no cast but a dtype= redispatch = fp32_set_opt_dtype (same op) or
#      fp32_append_dtype (another overload), an error and no op call = banned.
# Which ops torch itself covers on every backend comes from torch 2.13's native_functions.yaml (packaged in
# torchgen): CompositeImplicitAutograd / CompositeExplicitAutograd(NonFunctional) kernels run on PrivateUse1,
# and a structured functional/in-place op works where its out= variant does.

_COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
_YAML_IN_WHEEL = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
_SO_IN_WHEEL = "torch_npu/lib/libtorch_npu.so"
_FLOAT = 6  # c10::ScalarType::Float


def _op_name(entry) -> str:
    s = entry if isinstance(entry, str) else entry["func"]
    return s.split("(", 1)[0].strip()


def _native_functions() -> tuple[dict[str, dict], Path]:
    """torch's native_functions.yaml (the installed torch, packaged in torchgen): name.overload -> facts."""
    import torchgen  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    out: dict[str, dict] = {}
    for e in yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader):
        if "func" not in e:
            continue
        name = _op_name(e)
        keys: set[str] = set()
        for k in (e.get("dispatch") or {}):
            keys.update(x.strip() for x in k.split(","))
        if not e.get("dispatch") and not e.get("structured_delegate"):
            keys.add("CompositeImplicitAutograd")  # no dispatch section: a decomposition in torch
        out[name] = {"keys": keys, "delegate": e.get("structured_delegate"),
                     "structured": bool(e.get("structured"))}
    return out, path


def _printable_strings(blob: bytes, min_len: int = 4) -> set[str]:
    import re  # noqa: PLC0415

    return {m.group().decode("ascii") for m in re.finditer(rb"[\x20-\x7e]{%d,}" % min_len, blob)}


def _sections(so: Path) -> dict[str, tuple[int, int, int]]:
    """ELF section name -> (address, file offset, size), from readelf."""
    import subprocess  # noqa: PLC0415

    out = subprocess.run(["readelf", "-S", "-W", str(so)], capture_output=True, text=True, check=True).stdout
    secs = {}
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) >= 6 and parts[0].startswith("[") and parts[1].startswith("."):
            secs[parts[1]] = (int(parts[3], 16), int(parts[4], 16), int(parts[5], 16))
    return secs


def _objdump(so: Path, start: int, stop: int) -> list[tuple[int, str, str]]:
    import re  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--start-address={start:#x}", f"--stop-address={stop:#x}", str(so)],
        capture_output=True, text=True, check=True,
    ).stdout
    ins = []
    for line in out.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return ins


def _autocast_from_binary(so: Path, nf: dict[str, dict]) -> dict:
    """The AutocastPrivateUse1 registrations compiled into libtorch_npu.so, with each kernel's cast policy."""
    import bisect  # noqa: PLC0415
    import re  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    secs = _sections(so)
    data = so.read_bytes()
    names: dict[int, str] = {}
    for sec in (".rodata.str1.1", ".rodata.str1.8"):
        addr, off, size = secs[sec]
        for m in re.finditer(rb"aten::[A-Za-z0-9_.]+\x00", data[off : off + size]):
            names[addr + m.start()] = m.group()[6:-1].decode()
    t_addr, t_off, t_size = secs[".text"]
    text = np.frombuffer(data, dtype=np.uint8, count=t_size, offset=t_off)
    # every "lea disp32(%rip), %r64" (REX.W 8d /r with mod=00 rm=101): its target address
    idx = np.nonzero(text[1:-6] == 0x8D)[0] + 1
    ok = ((text[idx - 1] == 0x48) | (text[idx - 1] == 0x4C)) & ((text[idx + 1] & 0xC7) == 0x05)
    idx = idx[ok]
    disp = (text[idx + 2].astype(np.int64) | (text[idx + 3].astype(np.int64) << 8)
            | (text[idx + 4].astype(np.int64) << 16) | (text[idx + 5].astype(np.int64) << 24))
    disp = np.where(disp >= 2**31, disp - 2**32, disp)
    target = t_addr + idx + 6 + disp
    hit = np.isin(target, np.array(sorted(names), dtype=np.int64))
    sites = sorted((int(t_addr + i - 1), names[int(t)]) for i, t in zip(idx[hit], target[hit], strict=True))
    if not sites:
        raise ValueError("no aten::<op> registration strings referenced from code in libtorch_npu.so")
    # the registration function: the largest run of sites close together (AutoCastOps.cpp's TORCH_LIBRARY_IMPL)
    runs, cur = [], [sites[0]]
    for s in sites[1:]:
        if s[0] - cur[-1][0] < 0x400:
            cur.append(s)
        else:
            runs.append(cur)
            cur = [s]
    runs.append(cur)
    block = max(runs, key=len)
    at_site = dict(block)
    prioritize = set()  # at::autocast::prioritize's error messages: only promote kernels reach them
    for sec in (".rodata.str1.1", ".rodata.str1.8"):
        addr, off, size = secs[sec]
        for m in re.finditer(rb"[^\x00]*at::autocast::prioritize\x00", data[off : off + size]):
            prioritize.add(addr + m.start())
    lo, hi = block[0][0] - 0x200, block[-1][0] + 0x80
    # PLT stubs -> imported symbol names (demangled)
    p_addr, _, p_size = secs[".plt"]
    plt_raw = {}
    for a, op, args in _objdump(so, p_addr, p_addr + p_size):
        m = re.search(r"# [0-9a-f]+ <([^@>]+)", args)
        if op.endswith("jmp") and "*" in args and m:
            plt_raw[a - (a - p_addr) % 16] = m.group(1)
    mangled = sorted(set(plt_raw.values()))
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    dm = dict(zip(mangled, demangled, strict=True))
    plt = {a: dm[s] for a, s in plt_raw.items()}

    def plt_name(a: int) -> str | None:
        if p_addr <= a < p_addr + p_size:
            return plt.get(a - (a - p_addr) % 16, "?")
        return None

    # pair each site with the code addresses loaded since the previous registration call (the kernel's
    # unboxed/boxed entry points), then disassemble all of them at once
    reg = _objdump(so, lo, hi)
    pairs, cands, pending = [], [], None
    for a, op, args in reg:
        m = re.search(r"# ([0-9a-f]+)", args)
        if op == "lea" and m:
            tgt = int(m.group(1), 16)
            if t_addr <= tgt < t_addr + t_size and not lo <= tgt < hi:
                cands.append(tgt)
        if a in at_site:
            pending = at_site[a]
        if op == "call" and pending:
            pairs.append((pending, cands))
            pending, cands = None, []
    allc = sorted({c for _, cs in pairs for c in cs})
    code = _objdump(so, allc[0], allc[-1] + 0x1000)
    addrs = [a for a, _, _ in code]

    bodies: dict[int, list] = {}

    def body(start: int) -> list[tuple[int, str, str]]:
        if start in bodies:
            return bodies[start]
        if allc[0] <= start <= allc[-1]:
            i = bisect.bisect_left(addrs, start)
            src = code[i : i + 600]
        else:
            src = _objdump(so, start, start + 0x1000)
        out = bodies[start] = []
        for ins in src:
            out.append(ins)
            if ins[1] == "ret":
                break
        return out

    helper_cache: dict[int, bool] = {}

    def is_dtype_helper(a: int) -> bool:
        """A local function that asks at::autocast::get_autocast_dtype (get_lower_precision_fp_...)."""
        if a not in helper_cache:
            first = []
            for _, op, args in _objdump(so, a, a + 0x100):
                if op in ("call", "jmp") and re.match(r"[0-9a-f]+ ", args):
                    first.append(int(args.split()[0], 16))
            helper_cache[a] = any("get_autocast_dtype" in (plt_name(t) or "") for t in first)
        return helper_cache[a]

    prio_cache: dict[int, bool] = {}

    def refs_prioritize(a: int) -> bool:
        """A local function whose code (its error paths lie past its first ret) names prioritize's errors."""
        if a not in prio_cache:
            prio_cache[a] = any(
                op == "lea" and (m := re.search(r"# ([0-9a-f]+)", args)) and int(m.group(1), 16) in prioritize
                for _, op, args in _objdump(so, a, a + 0x200))
        return prio_cache[a]

    ops_by_cpp = {n.replace(".", "_"): n for n in nf}

    def features(start: int, depth: int = 0) -> dict:
        f = {"casts": [], "ops": [], "err": False, "dtype_lookups": 0, "promote": False}
        esi = None
        for _, op, args in body(start):
            m = re.search(r"# ([0-9a-f]+)", args)
            if op == "lea" and m and int(m.group(1), 16) in prioritize:
                f["promote"] = True
            m = re.match(r"\$0x([0-9a-f]+),%esi$", args)
            if op == "mov" and m:
                esi = int(m.group(1), 16)
            elif args.endswith(("%esi", "%rsi")):
                esi = None
            if op in ("call", "jmp") and re.match(r"[0-9a-f]+ ", args):
                tgt = int(args.split()[0], 16)
                n = plt_name(tgt)
                if n is not None:
                    if "at::autocast::cached_cast" in n:
                        f["casts"].append(esi)
                    elif n.startswith("at::_ops::"):
                        f["ops"].append(ops_by_cpp.get(n[len("at::_ops::"):].split("::")[0], "?"))
                    elif "CheckFail" in n or "c10::Error" in n:
                        f["err"] = True
                elif op == "call" and refs_prioritize(tgt):
                    f["promote"] = True
                elif op == "call" and is_dtype_helper(tgt):
                    f["dtype_lookups"] += 1
                elif op == "call" and depth < 2 and t_addr <= tgt < t_addr + t_size:
                    g = features(tgt, depth + 1)
                    f["casts"] += g["casts"]
                    f["ops"] += g["ops"]
                    f["err"] |= g["err"]
                    f["dtype_lookups"] += g["dtype_lookups"]
                    f["promote"] |= g["promote"]
                if op == "call":
                    esi = None
        return f

    entries = []
    for name, cs in pairs:
        fs = [features(c) for c in cs]
        own = [f for f in fs if name in f["ops"]]
        other = [f for f in fs if f["ops"] and name not in f["ops"]]
        if own:
            f = own[0]
        elif other:
            f = other[0]
        else:
            f = {"casts": [], "ops": [], "err": any(x["err"] for x in fs), "dtype_lookups": 0, "promote": False}
        casts = f["casts"]
        if not f["ops"]:
            policy = "banned" if f["err"] else "unknown"
        elif casts and all(c == _FLOAT for c in casts):
            policy = "fp32"
        elif casts:
            policy = "promote" if f["promote"] else "lower_precision_fp"
        elif f["dtype_lookups"]:
            policy = "lower_precision_fp"  # TensorList arguments: cast in a helper loop
        elif name in f["ops"]:
            policy = "fp32_set_opt_dtype"
        else:
            policy = "fp32_append_dtype"
        e = {"op": name, "policy": policy,
             "evidence": {"casts": len(casts), "casts_to_float32": sum(c == _FLOAT for c in casts),
                          "autocast_dtype_lookups": f["dtype_lookups"], "promotes": f["promote"],
                          "calls": sorted(set(f["ops"])),
                          "raises": f["err"]}}
        if policy == "fp32_append_dtype":
            e["redispatch_to"] = f["ops"][0]
        entries.append(e)
    return {"registrations": entries, "code_range": [hex(lo), hex(hi)]}


def _fallback_messages(strings: set[str]) -> list[dict]:
    """torch_npu kernels that hand the work to the CPU (their own CAUTION / fallback messages)."""
    import re  # noqa: PLC0415

    out = []
    for s in sorted(strings):
        if not (s.startswith("CAUTION: The operator") or "the operator will fall back to CPU" in s):
            continue
        ops = sorted(set(re.findall(r"aten::([A-Za-z0-9_.]+[A-Za-z0-9_])", s)))
        if not ops:
            continue
        when = "conditional" if ("conditions" in s or "Please check your params" in s) else "always"
        if "Since the NPU interface does not support" in s:
            when = "sparse_csr"
        out.append({"ops": ops, "when": when, "message": s.strip()})
    return out


def _python_api(name: str) -> list[str]:
    import torch  # noqa: PLC0415

    apis = []
    for mod, prefix, attr in ((torch, "torch.", name), (torch.Tensor, "torch.Tensor.", name),
                              (torch.Tensor, "torch.Tensor.", name + "_")):
        if hasattr(mod, attr):
            apis.append(prefix + attr)
    for ns in ("special", "linalg", "fft"):
        if name.startswith(ns + "_") and hasattr(getattr(torch, ns), name[len(ns) + 1 :]):
            apis.append(f"torch.{ns}.{name[len(ns) + 1:]}")
    if not apis and hasattr(torch._C._nn, name):
        apis.append(f"torch._C._nn.{name}")
    return sorted(set(apis))


def _family(name: str) -> str:
    base = name.split(".", 1)[0]
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def build_from_wheel(whl: Path, ref: Path) -> tuple[dict, dict]:
    """(npu_kernels.json, npu_aten_op_coverage.json) payloads derived from the torch_npu wheel ``whl``."""
    import tempfile  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    import torch  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    with zipfile.ZipFile(whl) as z:
        members = set(z.namelist())
        for need in (_YAML_IN_WHEEL, _SO_IN_WHEEL):
            if need not in members:
                raise ValueError(f"not a torch_npu wheel with op registrations: {need} is missing")
        version = next((n.split("/")[0][len("torch_npu-"):-len(".dist-info")] for n in members
                        if n.startswith("torch_npu-") and n.split("/")[0].endswith(".dist-info")), "?")
        reg_yaml = yaml.safe_load(z.read(_YAML_IN_WHEEL))
        with tempfile.TemporaryDirectory() as tmp:
            so = Path(z.extract(_SO_IN_WHEEL, tmp))
            strings = _printable_strings(so.read_bytes())
            nf, nf_path = _native_functions()
            autocast = _autocast_from_binary(so, nf)
    print(f"read {whl.name}: torch_npu {version}, sha256 {sha[:16]}...")

    registered: set[str] = set()
    for section in ("supported", "autograd", "symint", "quant"):
        registered.update(_op_name(e) for e in reg_yaml.get(section) or [])
    aten_registered = sorted(n for n in registered if n in nf)
    npu_only = sorted(n for n in registered if n not in nf)  # torch_npu's own aten-namespace helpers
    custom = sorted({_op_name(e).split(".")[0] for e in reg_yaml.get("custom") or []})
    dotted = [n for n in aten_registered if "." in n]
    missing_strings = [n for n in dotted if n not in strings]

    reg_set = set(aten_registered)

    def covered(name: str, seen: frozenset = frozenset()) -> str | None:
        """How ``name`` runs on an NPU without falling back to the CPU, or None."""
        if name in reg_set:
            return "npu_kernel"
        info = nf.get(name)
        if info is None or name in seen:
            return None
        keys = info["keys"]
        if keys & {"CompositeImplicitAutograd", "CompositeExplicitAutograd"}:
            # torch's _foreach_* slow path loops over the per-tensor op: it runs where that op does
            per_tensor = name[len("_foreach_"):] if name.startswith("_foreach_") else None
            if per_tensor in nf and not covered(per_tensor, seen | {name}):
                return None
            return "composite"
        if info["delegate"]:
            return "structured" if covered(info["delegate"], seen | {name}) else None
        if "CompositeExplicitAutogradNonFunctional" in keys:
            return "composite"
        return None

    how: dict[str, str] = {}
    without: list[str] = []
    for name, info in sorted(nf.items()):
        cuda = "CUDA" in info["keys"] or "CUDA" in nf.get(info["delegate"] or "", {}).get("keys", ())
        if not (cuda or info["keys"] & set(_COMPOSITE)):
            continue  # ops no CUDA program reaches: CPU-internal (..._for_cpu, mkldnn), sparse/quantized-only
        h = covered(name)
        if h is None and name in strings:
            h = "string_in_binary"  # registered outside the codegen list (hand-written), or merely named: no alarm
        if h is None:
            without.append(name)
        else:
            how[name] = h
    fallback = _fallback_messages(strings)
    conditional = {o for f in fallback if f["when"] != "always" for o in f["ops"]}
    always_cpu = sorted(({o for f in fallback if f["when"] == "always" for o in f["ops"]} - conditional) & set(nf))

    policies: dict[str, list] = {p: [] for p in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote",
                                                 "banned", "unknown")}
    append: dict[str, str] = {}
    for e in autocast["registrations"]:
        if e["policy"] == "fp32_append_dtype":
            append[e["op"]] = e["redispatch_to"]
        else:
            policies[e["policy"]].append(e["op"])
    if policies["unknown"]:
        raise ValueError(f"could not classify the autocast kernels of {policies['unknown']}")
    del policies["unknown"]

    counts = {
        "aten_overloads_examined": len(how) + len(without),
        "npu_registered": len(aten_registered),
        "covered_by_composite_in_torch": sum(1 for h in how.values() if h == "composite"),
        "covered_through_structured_out": sum(1 for h in how.values() if h == "structured"),
        "named_in_binary_not_in_yaml": sum(1 for h in how.values() if h == "string_in_binary"),
        "without_npu_kernel": len(without),
        "kernels_that_fall_back_to_cpu": len(always_cpu),
        "custom_npu_ops": len(custom),
        "autocast": {p: len(v) for p, v in policies.items()} | {"fp32_append_dtype": len(append)},
    }
    provenance = {
        "wheel": whl.name,
        "wheel_sha256": sha,
        "torch_npu_version": version,
        "torch_version": torch.__version__.split("+")[0],
        "native_functions_sha256_16": hashlib.sha256(nf_path.read_bytes()).hexdigest()[:16],
        "how": [
            f"PrivateUse1 kernels: {_YAML_IN_WHEEL} (sections supported/autograd/symint/quant), "
            f"every dotted overload of it confirmed by its registration string in {_SO_IN_WHEEL} "
            f"({len(dotted) - len(missing_strings)}/{len(dotted)})",
            "composite coverage: torch's native_functions.yaml (CompositeImplicitAutograd/CompositeExplicitAutograd"
            "/...NonFunctional kernels run on PrivateUse1; structured ops work where their out= overload does)",
            "CPU fallbacks inside registered kernels: torch_npu's own CAUTION messages in libtorch_npu.so",
            "not flagged either (a false alarm costs more than a miss): overloads not in the yaml whose exact name is a "
            "string in libtorch_npu.so (hand-written registrations such as threshold_backward.grad_input)",
            "autocast: the AutocastPrivateUse1 m.impl() call sites in libtorch_npu.so code (each loads an "
            "'aten::<op>' string) and the cast each registered kernel performs (objdump)",
        ],
    }
    kernels = {
        "provenance": provenance,
        "counts": counts,
        "npu_registered": aten_registered,
        "npu_registered_not_in_torch": npu_only,
        "without_npu_kernel": without,
        "covered_by_composite": sorted(n for n, h in how.items() if h in ("composite", "structured")),
        "named_in_binary_not_in_yaml": sorted(n for n, h in how.items() if h == "string_in_binary"),
        "kernels_that_fall_back_to_cpu": always_cpu,
        "cpu_fallback_messages": fallback,
        "custom_npu_ops": custom,
        "autocast": {
            "dispatch_key": "AutocastPrivateUse1",
            **policies,
            "fp32_append_dtype": append,
            "registration_order": [e["op"] for e in autocast["registrations"]],
            # what each registered kernel was seen doing (cached_cast calls, casts to float32, autocast-dtype
            # lookups, prioritize, the aten ops it calls, an error path), the ground for its policy
            "evidence": {e["op"]: e["evidence"] for e in autocast["registrations"]},
        },
    }

    # the coverage file in its established shape (families of overloads), now exact
    old = json.loads((ref / "npu_aten_op_coverage.json").read_text(encoding="utf-8"))
    old_api = {o["name"]: o.get("python_api") or [] for o in old["ops_without_any_npu_kernel"]}
    # a family whose only covered overloads are composites (polygamma_, special_*.x_scalar wrap the missing
    # functional op) has no NPU kernel at all: its composites land on the CPU fallback too
    fams: dict[str, dict[str, list]] = {}
    for n in sorted(set(how) | set(without)):
        d = fams.setdefault(_family(n), {"missing": [], "covered": [], "native": []})
        d["missing" if n in without else "covered"].append(n)
        if how.get(n) in ("npu_kernel", "structured", "string_in_binary"):
            d["native"].append(n)
    no_kernel, partial = [], []
    for fam, d in sorted(fams.items()):
        if d["missing"] and not d["native"]:
            no_kernel.append({"name": fam, "overloads": d["missing"],
                              "python_api": old_api.get(fam) or _python_api(fam), "uncertain_suffix_hits": []})
        elif d["missing"]:
            partial.append({"name": fam, "missing_overloads": d["missing"], "covered_overloads": d["covered"]})
    coverage = {
        "provenance": {
            **_provenance(ref, "npu_aten_op_coverage.json", ""),
            "source": f"exact: torch_npu {version} wheel registrations + torch's composite kernels "
            "(tools/build_kb.py --wheel; see npu_kernels.json); the reference file gives python_api names only",
            "wheel": whl.name,
            "wheel_sha256": sha,
        },
        "method": "Exact NPU coverage of ATen operators, derived from the torch_npu wheel.",
        "ops_without_any_npu_kernel": no_kernel,
        "ops_partially_covered": partial,
    }
    print(f"  {len(aten_registered)} aten overloads registered for PrivateUse1, {counts['covered_by_composite_in_torch']}"
          f" + {counts['covered_through_structured_out']} covered by torch, {len(without)} without an NPU kernel "
          f"({len(no_kernel)} families); autocast {counts['autocast']}")
    return kernels, coverage


# the reference files build() and build_from_wheel() read
REFERENCE_FILES = ("torch_npu_api.json", "npu_api_support_2.13.json", "npu_aten_op_coverage.json",
                   "transfer_to_npu_patches.json", "compat_matrix.csv")
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference"


class _Given(argparse.Action):
    """Stores the value and remembers the order the options were given in (checks follow that order)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = [*getattr(namespace, "given", []), self.dest]


def _check_reference(ref: Path, given: bool) -> str | None:
    """Why ``ref`` cannot serve as the reference folder (naming what is missing), or None."""
    where = f"--reference {ref}" if given else f"no --reference given, and the default {ref}"
    if not ref.exists():
        return f"{where}: no such folder (give --reference FOLDER: the folder holding {', '.join(REFERENCE_FILES)})"
    if not ref.is_dir():
        return f"{where}: not a folder (give the folder holding {', '.join(REFERENCE_FILES)})"
    missing = [n for n in REFERENCE_FILES if not (ref / n).is_file()]
    if missing:
        return f"{where}: not the reference data: {', '.join(missing)} missing"
    return None


def _check_wheel(whl: Path) -> str | None:
    """Why ``whl`` is not a wheel file to read, or None (its contents are checked by build_from_wheel)."""
    import zipfile  # noqa: PLC0415

    if not whl.exists():
        return f"--wheel {whl}: no such wheel file"
    if not whl.is_file():
        return f"--wheel {whl}: not a file (give the torch_npu wheel, a .whl file)"
    if not zipfile.is_zipfile(whl):
        return f"--wheel {whl}: not a wheel (not a zip archive)"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, default=None, action=_Given,
                   help="the reference data folder (default: ../shared/reference beside the clone; it holds "
                   + ", ".join(REFERENCE_FILES) + ")")
    p.add_argument(
        "--wheel",
        type=Path,
        default=None,
        action=_Given,
        help="a torch_npu wheel (torch_npu-2.13.0-cp311-...-x86_64.whl, from `pip download --no-deps "
        "torch-npu==2.13.0`): derive data/npu_kernels.json and data/npu_aten_op_coverage.json from it "
        "(needs torch, PyYAML and binutils' objdump/readelf)",
    )
    a = p.parse_args(argv)
    given = list(dict.fromkeys(getattr(a, "given", [])))  # the order the user gave them in
    ref = a.reference if a.reference is not None else DEFAULT_REFERENCE
    checks = {"reference": lambda: _check_reference(ref, a.reference is not None),
              "wheel": lambda: _check_wheel(a.wheel) if a.wheel is not None else None}
    for dest in [*given, *(d for d in checks if d not in given)]:  # then what was left to its default
        problem = checks[dest]()
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    kernels = coverage = None
    if a.wheel is not None:  # read the wheel first: a wheel that cannot be read leaves the data as it was
        try:
            kernels, coverage = build_from_wheel(a.wheel, ref)
        except (ValueError, OSError, KeyError) as e:
            print(f"error: --wheel {a.wheel}: {e}", file=sys.stderr)
            return 3
    build(ref)
    if kernels is not None:
        _write("npu_kernels.json", kernels)
        _write("npu_aten_op_coverage.json", coverage)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
