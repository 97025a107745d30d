"""The migration report: report.json (schema in docs/migrate.md), CSV tables, report.md, terminal summary."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from ascendify import __version__, fileio

from .model import ADVICE, API, CHANGE, REPORT, FileResult
from .rules import RULES

SCHEMA = "ascendify.migrate.report/1"


def totals(results: list[FileResult]) -> dict[str, Any]:
    t: dict[str, Any] = {
        "files": len(results),
        "python_files": sum(1 for r in results if r.path.endswith((".py", ".pyi"))),
        "parsed": sum(1 for r in results if r.parsed),
        "changed": sum(1 for r in results if r.status == "changed"),
        "skipped": sum(1 for r in results if r.status == "skipped"),
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
        "target": target,
        "options": options,
        "inputs": inputs,
        "output": output,
        "seconds": round(seconds, 3),
        "totals": totals(results),
        "files": [r.to_dict() for r in results],
        "rules": {r.id: {"name": r.name, "summary": r.summary, "safety": r.safety} for r in RULES.values()},
    }


def write(report: dict[str, Any], results: list[FileResult], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def rows(kinds: tuple[str, ...]):
        for r in results:
            for f in r.findings:
                if f.kind in kinds:
                    yield r.path, f

    p = out_dir / "report.json"
    fileio.write_json(p, report)
    written.append(p)
    p = out_dir / "changes.csv"
    fileio.write_csv(p, ["file", "line", "end_line", "rule", "before", "after"],
                     ([path, f.line, f.end_line, f.rule, f.before, f.after] for path, f in rows((CHANGE,))))
    written.append(p)
    p = out_dir / "unsupported.csv"
    fileio.write_csv(p, ["file", "line", "api", "rule", "severity", "reason", "reason_en", "tip"],
                     ([path, f.line, f.api, f.rule, f.severity, f.message, f.gloss, f.tip]
                      for path, f in rows((REPORT, API))))
    written.append(p)
    p = out_dir / "advice.csv"
    fileio.write_csv(p, ["file", "line", "api", "rule", "advice", "tip"],
                     ([path, f.line, f.api, f.rule, f.message, f.tip] for path, f in rows((ADVICE,))))
    written.append(p)
    p = out_dir / "cuda_ops.csv"
    fileio.write_csv(p, ["file", "line", "kind", "namespace", "op", "dispatch_key", "schema"],
                     ([r.path, o["line"], o["kind"], o["namespace"], o["op"], o["dispatch_key"], o["schema"]]
                      for r in results for o in r.native_ops))
    written.append(p)
    p = out_dir / "report.md"
    fileio.write_atomic(p, markdown(report, results))
    written.append(p)
    return written


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
        lines += ["", "## Skipped files (copied unchanged)", ""]
        lines += [f"- `{r.path}`: {r.reason}" for r in skipped]
    need = [(r.path, f) for r in results for f in r.findings if f.kind == REPORT]
    if need:
        lines += ["", "## Not converted: needs a person", "", "| file:line | rule | severity | API | reason | tip |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {_md_cell(p)}:{f.line} | {f.rule} | {f.severity} | `{_md_cell(f.api)}` | {_md_cell(f.message)} | "
                  f"{_md_cell(f.tip)} |" for p, f in need]
    api = [(r.path, f) for r in results for f in r.findings if f.kind == API]
    if api:
        lines += ["", "## Torch APIs with limits on Ascend", "", "| file:line | API | kind | limit | gloss |",
                  "|---|---|---|---|---|"]
        lines += [f"| {_md_cell(p)}:{f.line} | `{_md_cell(f.api)}` | {f.severity} | {_md_cell(f.message)} | "
                  f"{_md_cell(f.gloss)} |" for p, f in api]
    ops = [(r.path, o) for r in results for o in r.native_ops]
    if ops:
        lines += ["", "## Custom CUDA ops (need an NPU implementation)", "", "| file:line | kind | op |", "|---|---|---|"]
        lines += [f"| {_md_cell(p)}:{o['line']} | {o['kind']} | `{o['namespace'] + '::' if o['namespace'] else ''}"
                  f"{o['op']}` |" for p, o in ops]
    adv = [(r.path, f) for r in results for f in r.findings if f.kind == ADVICE]
    if adv:
        lines += ["", "## Advice", ""]
        lines += [f"- {p}:{f.line} `{f.api}`: {f.message}; {f.tip}" for p, f in adv]
    return "\n".join(lines) + "\n"


def print_summary(report: dict[str, Any], results: list[FileResult], console, *, verbose: bool = False) -> None:
    from rich.table import Table

    table = Table(title=f"ascendify migrate --to {report['target']}", show_footer=True)
    cols = ("file", "status", "CUDA sites", "converted", "report-only", "unsupported", "accounted", "API notes",
            "advice")
    t = report["totals"]
    footers = ("total", f"{t['changed']} changed, {t['skipped']} skipped", str(t["cuda_sites"]),
               str(t["converted"]), str(t["report_only"]), str(t["unsupported"]), f"{t['accounted_share']:.0%}",
               str(t["api_notes"]), str(t["advice"]))
    for c, f in zip(cols, footers, strict=True):
        table.add_column(c, footer=f, justify="left" if c in ("file", "status") else "right")
    for r in results:
        s = r.summary()
        if not verbose and not s["cuda_sites"] and r.status != "skipped" and not r.native_ops:
            continue
        status = r.status if r.status != "skipped" else f"[yellow]skipped[/]: {r.reason}"
        if r.native_ops:
            status += f" ({len(r.native_ops)} CUDA ops)"
        table.add_row(r.path, status, str(s["cuda_sites"]), str(s["converted"]), str(s["report_only"]),
                      str(s["unsupported"]), f"{accounted(s):.0%}", str(s["api_notes"]), str(s["advice"]))
    console.print(table)
    console.print(f"{t['files']} files, {t['lines']} Python lines in {report['seconds']:.2f} s")
