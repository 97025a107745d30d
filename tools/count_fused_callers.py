"""Count the torch_npu operator call sites of public repositories into ``src/ascendify/data/npu_fused_op_callers.json``.

A call site is a reference, in the code of a ``*.py`` file (not a comment or a string), to ``torch_npu.<op>``,
``torch.ops.npu.<op>`` (``.default`` and other overloads count as the op) or a name imported with
``from torch_npu import <op>``, where ``<op>`` is a torch_npu operator: ``npu_*``, ``_npu_*`` or one of the
few fused ops without the prefix (``fast_gelu``). Tests and examples count like any other file: they are code
that runs on an NPU. A file that does not parse as Python 3 is counted with the regular expression below, which
is also how the counts of issue 27 were made (it also counts mentions in comments, strings and
``mock.patch("torch_npu.npu_x")``); the totals of both are kept per repository.

Run it on work trees of the repositories (never commit them)::

    python tools/count_fused_callers.py /work/ext/MindSpeed=Ascend/MindSpeed \\
        /work/ext/MindSpeed-LLM=Ascend/MindSpeed-LLM /work/ext/vllm-ascend=vllm-project/vllm-ascend

Each argument is ``PATH=owner/name``; the commit and its date come from the work tree's ``git``. Repositories
not named keep their rows. ``benchmarks/fused_coverage.py`` prints the share that runs on the emulated npu.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "ascendify" / "data" / "npu_fused_op_callers.json"
UNPREFIXED = {"fast_gelu"}  # torch_npu fused operators without the npu_ prefix
GREP = re.compile(r"(?:torch_npu|torch\.ops\.npu)\.(_?npu_[A-Za-z0-9_]+)")
SKIP_DIRS = {".git", "node_modules", "__pycache__", "build", "dist", ".venv"}


def is_op(name: str) -> bool:
    return name.startswith(("npu_", "_npu_")) or name in UNPREFIXED


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def count_source(text: str) -> Counter:
    """{op: call sites} of one file's source (``SyntaxError`` when it does not parse)."""
    tree = ast.parse(text)
    modules = {"torch_npu"}  # names bound to the torch_npu module (import torch_npu as tnpu)
    imported: dict[str, str] = {}  # local name -> op (from torch_npu import npu_x as y)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch_npu" and a.asname:
                    modules.add(a.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch_npu":
            for a in node.names:
                if is_op(a.name):
                    imported[a.asname or a.name] = a.name
    found: Counter = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Attribute) and _dotted(node.value) == "torch.ops.npu":
                if is_op(node.attr):
                    found[node.attr] += 1
            elif isinstance(node.value, ast.Name) and node.value.id in modules and is_op(node.attr):
                found[node.attr] += 1
        elif isinstance(node, ast.Name) and node.id in imported and isinstance(node.ctx, ast.Load):
            found[imported[node.id]] += 1
    return found


def scan(path: Path) -> dict:
    """The counts of one work tree: ``{"ops": {op: n}, "files": {op: {file: n}}, ...}``."""
    ops: Counter = Counter()
    files: dict[str, Counter] = {}
    grep: Counter = Counter()
    unparsed = scanned = 0
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            p = Path(dirpath) / fn
            text = p.read_text(encoding="utf-8", errors="replace")
            scanned += 1
            grep.update(GREP.findall(text))
            try:
                found = count_source(text)
            except SyntaxError:
                unparsed += 1
                found = Counter(GREP.findall(text))
            rel = p.relative_to(path).as_posix()
            for op, n in found.items():
                ops[op] += n
                files.setdefault(op, Counter())[rel] += n
    return {
        "files_scanned": scanned,
        "files_unparsed": unparsed,
        "call_sites": sum(ops.values()),
        "grep_occurrences": sum(grep.values()),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "grep_ops": dict(sorted(grep.items(), key=lambda kv: (-kv[1], kv[0]))),
        "files": {op: dict(sorted(files[op].items())) for op in sorted(files)},
    }


def _git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("repos", nargs="+", metavar="PATH=owner/name")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    data = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    repos = data.get("repositories", {})
    for spec in args.repos:
        path, eq, name = spec.partition("=")
        if not eq or "/" not in name or not Path(path).is_dir():
            print(f"error: expected PATH=owner/name with PATH a work tree, got {spec!r}", file=sys.stderr)
            return 2
        row = {"repo": name, "commit": _git(Path(path), "rev-parse", "HEAD"),
               "date": _git(Path(path), "log", "-1", "--format=%cI"), **scan(Path(path))}
        repos[name] = row
        print(f"{name}@{row['commit'][:9]}: {row['call_sites']} call sites of {len(row['ops'])} ops "
              f"({row['grep_occurrences']} by the regular expression)")
    payload = {
        "provenance": {"source": "tools/count_fused_callers.py over work trees of the public repositories named "
                                 "below, each at the commit recorded with it",
                       "method": "ast: references in code; grep_*: issue 27's regular expression"},
        "_about": "Call sites of torch_npu's operators in public repositories, counted at one commit each by "
                  "tools/count_fused_callers.py: references in code (not comments or strings) to "
                  "torch_npu.<op>, torch.ops.npu.<op> or a name imported from torch_npu, <op> being npu_*, "
                  "_npu_* or fast_gelu; tests and examples included. 'grep_occurrences' is the count of the "
                  "regular expression (torch_npu|torch.ops.npu).(_?npu_\\w+) over the same files (comments, "
                  "strings and mock.patch targets included), the method of issue 27, per op in 'grep_ops'. "
                  "'files': where each op is referenced (path inside the repository: count). benchmarks/fused_coverage.py prints the "
                  "share of call sites the emulated npu runs.",
        "repositories": dict(sorted(repos.items())),
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
