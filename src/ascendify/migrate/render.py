"""The migration report: report.json (schema in docs/migrate.md), CSV tables, report.md, terminal summary."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any

from ascendify import __version__
from ascendify.core import fileio
from ascendify.report import plural

from .model import ADVICE, API, CHANGE, REPORT, FileResult
from .rules import RULES
from .scripts import runs_as_program

SCHEMA = "ascendify.migrate.report/1"


def totals(results: list[FileResult]) -> dict[str, Any]:
    t: dict[str, Any] = {
        "files": len(results),
        "python_files": sum(1 for r in results if r.path.endswith((".py", ".pyi"))),
        "parsed": sum(1 for r in results if r.parsed),
        "changed": sum(1 for r in results if r.status == "changed"),
        "skipped": sum(1 for r in results if r.status == "skipped"),
        "kept": sum(1 for r in results if r.status == "kept"),
        "lines": sum(r.lines for r in results if r.path.endswith((".py", ".pyi"))),
        "native_ops": sum(len(r.native_ops) for r in results),
    }
    keys = ("cuda_sites", "converted", "report_only", "unsupported", "unclaimed", "api_notes", "advice")
    for k in keys:
        t[k] = sum(r.summary()[k] for r in results)
    t["accounted_share"] = accounted(t)
    return t


def accounted(s: dict[str, int]) -> float:
    """Share of CUDA sites converted or listed by a rule (``unclaimed`` rows are listed, but by the safety net)."""
    return 1.0 if not s["cuda_sites"] else round((s["cuda_sites"] - s["unclaimed"]) / s["cuda_sites"], 4)


def build(results: list[FileResult], *, target: str, options: dict[str, Any], inputs: list[str],
          output: str | None, seconds: float) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool": f"ascendify {__version__}",
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "mode": options.get("mode", ""),  # analyse | check | diff | write | inplace: what this run did
        "target": target,
        "options": options,
        "inputs": inputs,
        "output": output,
        "seconds": round(seconds, 3),
        "totals": totals(results),
        "files": [r.to_dict() for r in results],
        "rules": {r.id: {"name": r.name, "summary": r.summary, "safety": r.safety} for r in RULES.values()},
    }


REPORT_FILES = ("report.md", "report.json", "changes.csv", "unsupported.csv", "advice.csv", "cuda_ops.csv")


def report_json(report: dict[str, Any]) -> str:
    """``report.json``'s text: indented, with one line per file entry (the bulk of a large tree's report: json's
    C encoder writes a line, while indenting it would take the pure-Python one, seconds on a large tree)."""
    import json

    def dump(v: Any, indent: int | None = None) -> str:
        return json.dumps(v, indent=indent, ensure_ascii=False, allow_nan=False, default=str)

    parts = []
    for key, value in report.items():
        if key == "files" and value:
            text = "[\n" + ",\n".join("    " + dump(entry) for entry in value) + "\n  ]"
        else:
            text = dump(value, 2).replace("\n", "\n  ")
        parts.append(f"  {dump(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write(report: dict[str, Any], results: list[FileResult], out_dir: Path) -> list[Path]:
    """Write the report files (atomic, 0644 under the usual umask) into ``out_dir``; report.md first."""
    from ascendify import report as shared

    out_dir.mkdir(parents=True, exist_ok=True)

    def rows(kinds: tuple[str, ...]):
        for r in results:
            for f in r.findings:
                if f.kind in kinds:
                    yield f.where(r.path), f

    files = {
        "report.md": None,
        "report.json": None,
        "changes.csv": (["file", "line", "end_line", "rule", "before", "after"],
                        [{"file": path, "line": f.line, "end_line": f.end_line, "rule": f.rule, "before": f.before,
                          "after": f.after} for path, f in rows((CHANGE,))]),
        "unsupported.csv": (["file", "line", "api", "rule", "severity", "reason", "reason_en", "tip"],
                            [{"file": path, "line": f.line, "api": f.api, "rule": f.rule, "severity": f.severity,
                              "reason": f.message, "reason_en": f.gloss, "tip": f.tip}
                             for path, f in rows((REPORT, API))]),
        "advice.csv": (["file", "line", "api", "rule", "advice", "tip"],
                       [{"file": path, "line": f.line, "api": f.api, "rule": f.rule, "advice": f.message,
                         "tip": f.tip} for path, f in rows((ADVICE,))]),
        "cuda_ops.csv": (["file", "line", "kind", "namespace", "op", "dispatch_key", "schema"],
                         [{"file": r.path, **o} for r in results for o in r.native_ops]),
    }
    written = [out_dir / name for name in REPORT_FILES]
    report["report_files"] = [str(p) for p in written]
    for name, spec in files.items():
        path = out_dir / name
        # no fsync: each file still appears whole (a rename), and a report a power loss takes is written again
        # by the same command (an fsync per file was a wait of its own on a busy disk)
        if name == "report.md":
            fileio.write_atomic(path, markdown(report, results), durable=False)
        elif name == "report.json":
            fileio.write_atomic(path, report_json(report), durable=False)
        else:
            columns, table_rows = spec
            shared.write_csv(path, table_rows, columns)
    return written


def api_groups(results: list[FileResult]) -> list[dict[str, Any]]:
    """API notes collapsed to one entry per API and limit, with the number of calls and where they are."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        for f in r.findings:
            if f.kind != API:
                continue
            m = re.search(r"\((\d+) (?:calls|uses) in this file\)", f.tip)
            g = groups.setdefault((f.api, f.message), {"api": f.api, "calls": 0, "where": [], "severity": f.severity,
                                                       "limit": f.gloss or f.message})
            g["calls"] += int(m.group(1)) if m else 1
            g["where"].append(f"{f.where(r.path)}:{f.line}")
    return sorted(groups.values(), key=lambda g: (-g["calls"], g["api"]))


# report.md's section listing the CUDA sites not converted (exactly the rows the next step points to; in
# unsupported.csv they sit among the API notes, so the pointer names this table)
NEEDS_A_PERSON = "Not converted: needs a person"


def _md_cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown(report: dict[str, Any], results: list[FileResult]) -> str:
    t = report["totals"]
    lines = [
        f"# Migration report ({report['target']})",
        "",
        f"{report['tool']}, {report['created']}; inputs: {', '.join(report['inputs'])}; "
        f"output: {report['output'] or '(none)'}",
        "",
        "| files | Python lines | changed | skipped | CUDA sites | converted | report-only | unsupported | "
        "unclaimed | accounted | API notes | advice |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {t['files']} | {t['lines']} | {t['changed']} | {t['skipped']} | {t['cuda_sites']} | {t['converted']} | "
        f"{t['report_only']} | {t['unsupported']} | {t['unclaimed']} | {t['accounted_share']:.0%} | "
        f"{t['api_notes']} | {t['advice']} |",
        "",
        "*CUDA sites* are converted or listed for a person (report-only, unsupported, unclaimed); *accounted* is "
        "the share of them that a specific rule converted or listed (the unclaimed ones are only flagged for "
        "review by the safety net, ASC099).",
        "",
        "## Files",
        "",
        "| file | status | sites | converted | report-only | unsupported | API notes | advice |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if not r.findings and r.status not in ("skipped", "changed") and not r.native_ops:
            continue
        s = r.summary()
        status = r.status + (f": {r.reason}" if r.reason else "")
        lines.append(f"| {_md_cell(r.path)} | {_md_cell(status)} | {s['cuda_sites']} | {s['converted']} | "
                     f"{s['report_only']} | {s['unsupported']} | {s['api_notes']} | {s['advice']} |")
    skipped = [r for r in results if r.status == "skipped"]
    if skipped:
        lines += ["", "## Skipped files", ""]
        lines += [f"- `{r.path}`: {r.reason}" + (" (copied unchanged)" if r.copied else "") for r in skipped]
    need = [(f.where(r.path), f) for r in results for f in r.findings if f.kind == REPORT]
    if need:
        lines += ["", f"## {NEEDS_A_PERSON}", "", "| file:line | rule | severity | API | reason | tip |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {_md_cell(p)}:{f.line} | {f.rule} | {f.severity} | `{_md_cell(f.api)}` | {_md_cell(f.message)} | "
                  f"{_md_cell(f.tip)} |" for p, f in need]
    api = api_groups(results)
    if api:
        lines += ["", "## Torch APIs with limits on Ascend", "",
                  "One row per API (the Chinese original of each limit is in `unsupported.csv`, column `reason`).",
                  "", "| API | calls | where | kind | limit |", "|---|---|---|---|---|"]
        for g in api:
            where = ", ".join(g["where"][:3]) + (f", +{len(g['where']) - 3} more" if len(g["where"]) > 3 else "")
            lines.append(f"| `{_md_cell(g['api'])}` | {g['calls']} | {_md_cell(where)} | {g['severity']} | "
                         f"{_md_cell(g['limit'])} |")
    ops = [(r.path, o) for r in results for o in r.native_ops]
    if ops:
        lines += ["", "## Custom CUDA ops (need an NPU implementation)", "", "| file:line | kind | op |", "|---|---|---|"]
        lines += [f"| {_md_cell(p)}:{o['line']} | {o['kind']} | `{o['namespace'] + '::' if o['namespace'] else ''}"
                  f"{o['op']}` |" for p, o in ops]
    adv = [(f.where(r.path), f) for r in results for f in r.findings if f.kind == ADVICE]
    if adv:
        lines += ["", "## Advice", ""]
        lines += [f"- {p}:{f.line} `{f.api}`: {f.message}; {f.tip}" for p, f in adv]
    return "\n".join(lines) + "\n"


# The terminal table: short headers (the legend under the table says what they mean), so that it fits
# 80 columns with the file names whole.
SUMMARY_LIMIT = 30  # rows shown without -v; the rest are added up in one "(N more files)" row

LEGEND = ("converted: CUDA sites rewritten; manual: CUDA sites listed for a person;\n"
          "notes: torch APIs with limits on Ascend; advice: performance and naming advice")


def _row(path: str, status: str, s: dict[str, int]) -> dict[str, Any]:
    return {"file": path, "status": status, "converted": s["converted"], "manual": s["cuda_sites"] - s["converted"],
            "notes": s["api_notes"], "advice": s["advice"]}


def summary_rows(results: list[FileResult], *, verbose: bool = False,
                 limit: int = SUMMARY_LIMIT) -> tuple[list[dict[str, Any]], int]:
    """Rows of the terminal table, and how many files had nothing to show.

    A file is shown when it has a CUDA site, an API note, advice or CUDA ops, or was skipped (every file with
    ``-v``). Beyond ``limit`` rows (not with ``-v``) the rest are added up in one row, so the total row is
    always the sum of the rows above it.
    """
    shown = []
    quiet = 0
    for r in results:
        s = r.summary()
        if verbose or r.status == "skipped" or r.native_ops or any(s.values()):
            status = r.status
            if r.status == "skipped":
                status = "skipped"
            elif r.native_ops:
                status = plural(len(r.native_ops), "CUDA op")
            shown.append(_row(r.path, status, s))
        else:
            quiet += 1
    if not verbose and len(shown) > limit:
        rest = shown[limit - 1:]
        shown = shown[: limit - 1]
        keys = ("converted", "manual", "notes", "advice")
        more = {"file": f"({plural(len(rest), 'more file')}; -v lists them)", "status": ""}
        more.update({k: sum(x[k] for x in rest) for k in keys})
        shown.append(more)
    return shown, quiet


SUMMARY_COLUMNS = (
    ("file", "path"), ("status", "text"), ("converted", "number"), ("manual", "number"), ("notes", "number"),
    ("advice", "number"),
)


def print_summary(report: dict[str, Any], results: list[FileResult], console, *, verbose: bool = False) -> None:
    """The per-file table with a total row, then the figures in words (``console``: a rich Console)."""
    from ascendify import report as shared

    t = report["totals"]
    rows, quiet = summary_rows(results, verbose=verbose)
    cols = [shared.Column(name, kind=kind) for name, kind in SUMMARY_COLUMNS]
    if rows:
        total = _row("total", f"{t['changed']} changed", t)
        total["manual"] = t["cuda_sites"] - t["converted"]
        console.print(shared.table(cols, rows + [total], f"ascendify migrate --to {report['target']}",
                                   width=console.width, total_row=True))
        console.print(LEGEND, style="dim")
    out = [f"{plural(t['files'], 'file')}, {plural(t['lines'], 'Python line')}, {report['seconds']:.2f} s: "
           f"{t['changed']} changed" + (f", {t['skipped']} skipped" if t["skipped"] else "")
           + (f", {t['kept']} kept (edited by hand)" if t.get("kept") else "")
           + (f", {quiet} with nothing to report" if quiet and rows else "") + "."]
    if t["cuda_sites"]:
        manual = t["cuda_sites"] - t["converted"]
        if not manual:
            out.append(f"{plural(t['cuda_sites'], 'CUDA site')}, all converted.")
        else:
            out.append(f"{plural(t['cuda_sites'], 'CUDA site')}: {t['converted']} converted, {manual} listed for a "
                       "person" + (f" ({t['unsupported']} unsupported on Ascend)." if t["unsupported"] else "."))
        out.append(f"{t['accounted_share']:.0%} accounted for (converted or listed by a specific rule, not by "
                   "ASC099).")
    elif t["skipped"]:
        out.append("No CUDA-specific code found in the files read (the skipped ones were not read).")
    else:
        out.append("No CUDA-specific code found.")
    bits = [plural(t["api_notes"], "API note")] if t["api_notes"] else []
    bits += [plural(t["advice"], "advice item")] if t["advice"] else []
    bits += [f"{plural(t['native_ops'], 'custom CUDA op')} to port"] if t["native_ops"] else []
    if bits:
        out.append(", ".join(bits) + ".")
    for line in out:
        console.print(line, highlight=False)


def next_steps(report: dict[str, Any], results: list[FileResult], *, mode: str, output: Path | None,
               inputs: list[Path], report_dir: Path | None) -> list[str]:
    """What to do after this run: where the report is, what needs a person, how to run the result."""
    t = report["totals"]
    lines = []
    if report_dir is not None:
        lines.append(f"Report: {report_dir / 'report.md'}")
    steps = []
    manual = t["cuda_sites"] - t["converted"]
    where = " (report folder)" if report_dir is not None else " (written with --report DIR)"
    if manual:
        steps.append(f"check the {plural(manual, 'site')} listed for a person{where}:\n"
                     f"     report.md, table \"{NEEDS_A_PERSON}\"")
    if t["native_ops"]:
        steps.append(f"port the {plural(t['native_ops'], 'custom CUDA op')}: cuda_ops.csv{where}")
    if mode in ("write", "inplace"):
        root = output if mode == "write" else None
        found = _entry_script(results, root, inputs)
        if found is not None:
            entry, flag = found
            args = f"{flag} ..." if flag else "..."
            if report["target"] == "npu":
                steps.append("run it on the emulated NPU (no Ascend hardware needed):\n"
                             f"     ascendify emulate -- python {entry} {args}")
            else:
                steps.append(f"run it anywhere (NPU, CUDA, CPU...): python {entry} {args}")
    elif mode in ("analyse", "check", "diff") and t["changed"]:
        src = " ".join(str(p) for p in inputs)
        steps.append(f"write the converted code: ascendify migrate {src} -o OUTDIR --to {report['target']}")
    if steps:
        lines.append("Next:")
        lines += [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
    return lines


# The script's own switches that turn the device on (ASC805 rows): the next step passes them, else the
# converted program would run on the CPU.
_DEVICE_ON_FLAGS = ("--cuda", "--use-cuda", "--use_cuda")


_NOT_PROGRAMS = ("setup.py", "conftest.py", "__init__.py")


def _entry_script(results: list[FileResult], root: Path | None, inputs: list[Path]) -> tuple[Path, str] | None:
    """The file to run, and the script's own flag that turns the device on ("" if none): a file of the tree
    that runs as a program (see :func:`runs_as_program`; not ``setup.py``, ``conftest.py`` or tests),
    ``train*`` first, then ``main*``, then converted files before unchanged ones.

    The files are taken in that order and the first program wins: whether a file is one was mostly found by
    the conversion (``FileResult.program``); the others are read and parsed here, only as far as needed."""
    ranked = []
    for r in results:
        if r.status not in ("changed", "unchanged") or not r.path.endswith(".py"):
            continue
        if root is not None:
            path = root / r.path
        else:
            base = inputs[0] if len(inputs) == 1 else None
            path = (base / r.path if base.is_dir() else base) if base is not None else Path(r.path)
        name = path.name
        if name in _NOT_PROGRAMS or name.startswith("test_") or name.endswith("_test.py"):
            continue
        ranked.append(((not name.startswith("train"), not name.startswith("main"), r.status != "changed",
                        r.path.count("/"), str(path)), path, r))
    for _, path, r in sorted(ranked, key=lambda x: x[0]):
        program = r.program
        if program is None:
            try:
                program = runs_as_program(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
        if program:
            flag = next((f.api for f in r.findings if f.rule == "ASC805" and f.api in _DEVICE_ON_FLAGS), "")
            return path, flag
    return None
