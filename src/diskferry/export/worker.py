"""`python -m diskferry.export.worker JOB.json`: one export server (kind `export`, the default),
a backup point served to be pulled (kind `backupPoint`) or the export proxy (kind `proxy`), as
a child process or a Pod; SIGTERM stops it."""

from __future__ import annotations

from typing import Any

from diskferry.export.backuppoint import BackupPointJob, serve_backup_point
from diskferry.export.job import ExportJob, ProxyJob
from diskferry.export.service import serve_export, serve_proxy
from diskferry.worker.runtime import JobContext, JobKind, run_worker


def export(job: ExportJob, ctx: JobContext) -> dict[str, Any]:
    """Serve the export until its TTL or SIGTERM."""
    return serve_export(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def backup_point(job: BackupPointJob, ctx: JobContext) -> dict[str, Any]:
    """Checkpoint the VM's disks and serve the point until its TTL or SIGTERM."""
    return serve_backup_point(job, ctx.progress, ctx.cancel, ctx.reporter)


def proxy(job: ProxyJob, ctx: JobContext) -> dict[str, Any]:
    """Serve the proxy until SIGTERM."""
    return serve_proxy(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


if __name__ == "__main__":
    run_worker(
        {
            "export": JobKind(ExportJob, export),
            "backupPoint": JobKind(BackupPointJob, backup_point),
            "proxy": JobKind(ProxyJob, proxy),
        },
        default="export",
    )
