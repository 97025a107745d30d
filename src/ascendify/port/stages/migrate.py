"""The migrate stage: ``ascendify migrate PROJECT -o OUT`` in a child, its report read back (with two scans of the
migrated tree the checklist needs), and what it changed drawn: the files with CUDA code and the entry script's
diff."""

from __future__ import annotations

import difflib
import os
import re
import shlex
from pathlib import Path

from ascendify import report
from ascendify.port.jobs import Job, child_env
from ascendify.port.options import Context
from ascendify.port.stages.base import StageResult, add_job, collect, crashed, e, load_json
from ascendify.report.tables import plural

ID = "migrate"


def jobs(ctx: Context) -> list[Job]:
    argv = ["migrate", str(ctx.project), "-o", str(ctx.migrated), "--to", ctx.options.to, "--report",
            str(ctx.out / "migrate" / "report"), "-q"] + (["--force"] if ctx.force_migrate else [])
    out: list[Job] = []
    add_job(ctx, out, Job("migrate", ID, argv, env=child_env(ctx.lanes), timeout=600,
                          shown=shlex.join(["ascendify", *argv[:-1]])))
    return out


def read(ctx: Context, jobs: list[Job], done: dict[str, StageResult]) -> StageResult:
    res = StageResult(ID)
    (job,) = jobs
    collect(res, jobs)
    if job.skipped:
        res.headline = job.skipped
        return res
    if crashed(res, job):
        return res
    data = load_json(ctx.out / "migrate" / "report" / "report.json")
    if data is None:
        res.status, res.error = "error", "migrate/report/report.json: missing or not JSON"
        res.headline = res.error
        return res
    t = data.get("totals", {})
    res.facts = {"totals": t, "files": data.get("files", []), "rules": data.get("rules", {})}
    res.facts["cuda_visible_reads"] = _env_reads(ctx.migrated, "CUDA_VISIBLE_DEVICES")
    res.facts["nccl_literals"] = _literal_count(ctx.migrated, "nccl")
    res.files = ["migrate/report/report.md", "migrate/report/report.json", "migrate/report/changes.csv",
                 "migrate/report/unsupported.csv", "migrate/report/advice.csv",
                 os.path.relpath(ctx.migrated, ctx.out)]
    res.status = "warn" if t.get("skipped") else "ok"
    left = int(t.get("report_only") or 0)  # listed for a person (DataParallel: a fix only --unsafe applies)
    res.headline = (f"{t.get('converted', 0)} of {t.get('cuda_sites', 0)} CUDA sites converted in "
                    f"{plural(int(t.get('changed') or 0), 'file')}; "
                    + (f"{left} left to you (unsupported.csv), " if left else "")
                    + f"{t.get('unsupported', 0)} unsupported, {t.get('native_ops', 0)} custom ops to port")
    if t.get("kept"):  # an earlier port's output, fixed by hand since: the runs use the person's fixes
        res.headline += f"; {t['kept']} hand-edited files kept (--force overwrites them)"
    collect(res, jobs)
    return res


def _py_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts) if root.is_dir() else []

def _env_reads(root: Path, name: str) -> list[str]:
    """``file:line`` of every read of environment variable ``name`` in the Python files under ``root``."""
    pat = re.compile(r"environ(?:\.get)?\s*[\[(]\s*['\"]" + re.escape(name) + r"['\"]|getenv\(\s*['\"]" + re.escape(name))
    hits = []
    for p in _py_files(root):
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pat.search(line):
                hits.append(f"{p.relative_to(root).as_posix()}:{i}")
    return hits

def _literal_count(root: Path, word: str) -> list[str]:
    """``file:line`` of string literals exactly ``word`` (e.g. the backend name 'nccl')."""
    pat = re.compile(r"['\"]" + re.escape(word) + r"['\"]", re.IGNORECASE)
    hits = []
    for p in _py_files(root):
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pat.search(line.split("#", 1)[0]):
                hits.append(f"{p.relative_to(root).as_posix()}:{i}")
    return hits


def section(sec: report.Section, res: StageResult, result) -> None:
    t = res.facts.get("totals", {})
    sec.kv({k: t.get(k) for k in ("python_files", "changed", "cuda_sites", "converted", "report_only",
                                   "unsupported", "api_notes", "advice", "native_ops") if k in t})
    rows = []
    for f in res.facts.get("files", []):
        s = f.get("summary") or {}
        if not s.get("cuda_sites") and f.get("status") in ("unchanged", "copied"):
            continue
        rows.append({"file": f.get("path"), "status": f.get("status"), "CUDA sites": s.get("cuda_sites"),
                     "converted": s.get("converted"), "reported": s.get("report_only"),
                     "unsupported": s.get("unsupported"), "advice": s.get("advice")})
    cols = [report.Column("file", kind="path"), report.Column("status"),
            *(report.Column(n, kind="number") for n in ("CUDA sites", "converted", "reported", "unsupported",
                                                         "advice"))]
    sec.table(cols, rows, caption="files with CUDA code")
    orig, new = _pair(result)
    if orig and new:
        diff = list(difflib.unified_diff(orig.read_text(encoding="utf-8").splitlines(),
                                         new.read_text(encoding="utf-8").splitlines(),
                                         f"{result.project.name}/{result.entry}",
                                         f"{result.migrated.name}/{result.entry}", lineterm="", n=1))
        if diff:
            sec.html(diff_html(diff[2:], limit=60, title=f"{result.entry}: what migrate changed (unified diff)",
                               more="see migrate/report/changes.csv and the migrated copy"))


def diff_html(lines: list[str], *, limit: int, title: str, more: str) -> str:
    """A unified diff as coloured lines (added green, removed red, hunk headers grey), ``limit`` lines at most.

    >>> "del" in diff_html(["@@ -1 +1 @@", "-a", "+b"], limit=10, title="t", more="")
    True
    """
    style = {"+": "background:#e6ffec", "-": "background:#ffebe9", "@": "color:#6e7781;background:#f6f8fa"}
    out = []
    for line in lines[:limit]:
        css = style.get(line[:1], "")
        tag = {"+": "ins", "-": "del"}.get(line[:1], "span")
        out.append(f'<{tag} class="line" style="display:block;text-decoration:none;padding:0 10px;{css}">'
                   f"{e(line) or ' '}</{tag}>")
    if len(lines) > limit:
        out.append(f'<span class="line" style="display:block;padding:0 10px;color:#6e7781">… {len(lines) - limit} '
                   f"more lines: {e(more)}</span>")
    return f'<div><code>{e(title)}</code></div><pre class="code diff">{"".join(out)}</pre>'


def _pair(result) -> tuple[Path | None, Path | None]:
    if getattr(result, "project", None) is None or not result.entry or result.migrated is None:
        return None, None
    orig = result.project / result.entry
    new = result.migrated / result.entry
    return (orig, new) if orig.is_file() and new.is_file() else (None, None)
