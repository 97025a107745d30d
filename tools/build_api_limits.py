"""Keep ``src/ascendify/data/api_limits_en.json`` in step with the official support list's limit texts.

The support list (``npu_api_support.json``) gives each API's limits in Chinese. ``api_limits_en.json`` holds
one English translation per distinct text, with the original beside it. The translations are the project's
own (made by hand; lines that only list dtypes, "`input`仅支持fp16，fp32", follow one pattern and are
translated by it). This script:

- keeps every existing translation, translates new dtype-only texts by the pattern, and lists the texts that
  still need a person (exit 1);
- records, by introspecting the installed torch's signatures, which arguments named by a dtype limit are not
  tensor arguments of the API (``non_tensor_arguments``): a module's constructor has no ``input`` (its tensors
  come later, in ``forward``), a sampler's ``dataset`` is not a tensor. migrate drops those limits at a call.
  A function's limit that names a parameter it lacks is kept (the list then names its tensor input
  generically: torch.split's first argument is ``tensor``, the limit says ``input``).

    python tools/build_api_limits.py
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "src" / "ascendify" / "data"
CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")
# one line of a limit text that only lists dtypes: "- `input`仅支持bf16，fp16，fp32", "`query`、`key`仅支持fp16和fp32。"
DTYPE_LINE = re.compile(r"^(- )?((?:`\w+`[、，, ]*)+)仅支持([a-z0-9，, 、和]+)(。)?$")


def translate_dtype_line(line: str) -> str | None:
    m = DTYPE_LINE.match(line.strip())
    if not m:
        return None
    names = re.findall(r"`\w+`", m.group(2))
    dtypes = [x.strip() for x in re.split(r"[，、,]|和", m.group(3)) if x.strip()]
    verb = "supports" if len(names) == 1 else "support"
    lead = line[: len(line) - len(line.lstrip())]
    return f"{lead}{m.group(1) or ''}{', '.join(names)} {verb} {', '.join(dtypes)} only{'.' if m.group(4) else ''}"


def dtype_arguments(text: str) -> list[str]:
    """Arguments named by the dtype-only lines of ``text``."""
    out: list[str] = []
    for line in text.split("\n"):
        m = DTYPE_LINE.match(line.strip())
        if m:
            out += [n for n in re.findall(r"`(\w+)`", m.group(2)) if n not in out]
    return out


def _resolve(name: str):
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - optional submodules fail in many ways
            continue
        for p in parts[i:]:
            obj = getattr(obj, p, None)
            if obj is None:
                return None
        return obj
    return None


def _is_tensor_parameter(p: inspect.Parameter) -> bool:
    if p.annotation is inspect.Parameter.empty:
        return True  # unknown: keep the limit
    text = p.annotation if isinstance(p.annotation, str) else repr(p.annotation)
    return bool(re.search(r"Tensor|Params|Parameter|Module", text))


def non_tensor_arguments(api: str, names: list[str]) -> list[str] | None:
    """Of ``names``, those that ``api`` does not take as a tensor argument; None when its signature is unknown."""
    obj = _resolve(api)
    if obj is None:
        return None
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return None  # builtins (torch.add...): their limits are kept
    if inspect.isclass(obj):  # a constructor: tensors come later (forward); a sampler's dataset is no tensor
        return [n for n in names if n not in params or not _is_tensor_parameter(params[n])]
    # a function: a limit naming a parameter it lacks is about its tensor input under another name
    # (torch.split's `tensor`, torch.einsum's `*operands`), so only a named non-tensor parameter drops it
    return [n for n in names if n in params and not _is_tensor_parameter(params[n])]


def main() -> int:
    support = json.loads((DATA / "npu_api_support.json").read_text(encoding="utf-8"))
    path = DATA / "api_limits_en.json"
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"texts": []}
    known = {e["zh"]: e["en"] for e in old["texts"]}
    texts = sorted({a["constraints"] for a in support["apis"] if a.get("constraints")})
    entries, missing = [], []
    for zh in texts:
        en = known.get(zh)
        if en is None:
            lines = [translate_dtype_line(line) if CJK.search(line) else line for line in zh.split("\n")]
            if None in lines:
                missing.append(zh)
                continue
            en = "\n".join(lines)
        entries.append({"zh": zh, "en": en})
    non_tensor: dict[str, list[str]] = {}
    for a in support["apis"]:
        names = dtype_arguments(a.get("constraints") or "")
        if names:
            bad = non_tensor_arguments(a["api"], names)
            if bad:
                non_tensor[a["api"]] = bad
    import torch

    doc = {
        "provenance": {
            "derived_from": "npu_api_support.json (the limit texts of the official support list, in Chinese)",
            "source": support["provenance"]["source"],
            "sha256_16": support["provenance"]["sha256_16"],
            "translation": "English by the ascendify project (ours, not Huawei's); the Chinese original, kept "
                           "beside each translation, stays the reference",
            "non_tensor_arguments": f"introspection of torch {torch.__version__.split('+')[0]} signatures "
                                    "(tools/build_api_limits.py)",
            "texts": len(entries),
        },
        "texts": entries,
        "non_tensor_arguments": dict(sorted(non_tensor.items())),
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{path.relative_to(ROOT)}: {len(entries)} texts, {len(non_tensor)} APIs with non-tensor dtype arguments")
    if missing:
        print(f"{len(missing)} texts need a translation (add them to 'texts' by hand):", file=sys.stderr)
        for zh in missing:
            print("  " + zh.replace("\n", "\n  "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
