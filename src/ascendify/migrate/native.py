"""Scan C++/CUDA sources (``.cu``, ``.cpp``...) for the ops they expose to Python: ``PYBIND11_MODULE`` functions,
``TORCH_LIBRARY`` schemas, ``TORCH_LIBRARY_IMPL(ns, CUDA, m)`` kernels and ``__global__`` CUDA kernels.

These are not Python, so this is a plain text scan (comments are stripped first); each op becomes a row of
``cuda_ops.csv``: it needs an NPU implementation.

>>> rows = scan_native('PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\\n  m.def("fused_gelu", &f, "doc");\\n}\\n')
>>> [(r["kind"], r["op"], r["line"]) for r in rows]
[('pybind11', 'fused_gelu', 2)]
"""

from __future__ import annotations

import re

NATIVE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c++", ".h", ".hpp", ".hh")

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_BLOCK = re.compile(
    r"\b(PYBIND11_MODULE|TORCH_LIBRARY|TORCH_LIBRARY_FRAGMENT|TORCH_LIBRARY_IMPL)\s*\(\s*([A-Za-z_][\w]*)"
    r"\s*,\s*(?:([A-Za-z_]\w*)\s*,\s*)?([A-Za-z_]\w*)\s*\)\s*\{"
)
_GLOBAL = re.compile(r"__global__\s+(?:void|[\w:<>]+)\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(")


def _blank_comments(text: str) -> str:
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _block_end(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def scan_native(text: str) -> list[dict]:
    code = _blank_comments(text)
    rows: list[dict] = []

    def line_of(pos: int) -> int:
        return code.count("\n", 0, pos) + 1

    for m in _BLOCK.finditer(code):
        macro, ns, key, var = m.group(1), m.group(2), m.group(3), m.group(4)
        body_start = m.end() - 1
        body_end = _block_end(code, body_start)
        body = code[body_start:body_end]
        method = "impl" if macro == "TORCH_LIBRARY_IMPL" else "def"
        pat = re.compile(rf"\b{re.escape(var)}\s*\.\s*{method}\s*\(\s*(?:TORCH_SELECTIVE_SCHEMA\s*\(\s*)?\"([^\"]+)\"")
        kind = {"PYBIND11_MODULE": "pybind11", "TORCH_LIBRARY_IMPL": "torch_library_impl"}.get(macro, "torch_library")
        for d in pat.finditer(body):
            op = re.split(r"[(.]", d.group(1), maxsplit=1)[0].strip()
            rows.append({"line": line_of(body_start + d.start()), "kind": kind, "namespace": ns, "op": op,
                         "dispatch_key": key or "", "schema": d.group(1)})
    for m in _GLOBAL.finditer(code):
        rows.append({"line": line_of(m.start()), "kind": "cuda_kernel", "namespace": "", "op": m.group(1),
                     "dispatch_key": "CUDA", "schema": ""})
    rows.sort(key=lambda r: r["line"])
    return rows
