"""The doctor stage: ``ascendify doctor`` (short) in a child, its ``doctor.json`` read back, its checks drawn."""

from __future__ import annotations

from ascendify import report
from ascendify.port.jobs import Job, child_env
from ascendify.port.options import Context
from ascendify.port.stages.base import StageResult, add_job, collect, crashed, load_json

ID = "doctor"


def jobs(ctx: Context) -> list[Job]:
    out: list[Job] = []
    add_job(ctx, out, Job("doctor", ID, ["doctor", "--out", str(ctx.out / "doctor"), "-q"], env=child_env(ctx.lanes),
                          timeout=300, shown="ascendify doctor --out doctor"))
    return out


def read(ctx: Context, jobs: list[Job], done: dict[str, StageResult]) -> StageResult:
    res = StageResult(ID)
    collect(res, jobs)
    (job,) = jobs
    if job.skipped:
        res.headline = job.skipped
        return res
    if crashed(res, job):
        return res
    data = load_json(ctx.out / "doctor" / "doctor.json")
    if data is None:
        res.status, res.error = "error", f"{ctx.out / 'doctor' / 'doctor.json'}: missing or not JSON"
        res.headline = res.error
        return res
    summ = data.get("summary", {})
    checks = {c.get("id"): c for c in data.get("checks", [])}
    res.facts = {"summary": summ, "checks": checks}
    res.files = ["doctor/doctor.json", "doctor/doctor.md"]
    res.status = "fail" if summ.get("fail") else ("warn" if summ.get("warn") else "ok")
    res.headline = (f"{summ.get('ok', 0)} checks ok, {summ.get('warn', 0)} warn, {summ.get('fail', 0)} fail, "
                    f"{summ.get('skip', 0)} skipped; NPU: {summ.get('npu', '?')}")
    collect(res, jobs)
    return res


def section(sec: report.Section, res: StageResult, result) -> None:
    checks = list((res.facts.get("checks") or {}).values())
    rows = [{"status": c.get("status"), "check": c.get("id"), "found": c.get("found")} for c in checks]
    sec.table([report.Column("status", kind="status"), report.Column("check"), report.Column("found")], rows)
