"""`python -m diskferry.backup.worker JOB.json`: one backup or restore as a child process or Pod."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from diskferry.backup.job import BackupJob, RestoreJob
from diskferry.disk.jobrunner import run_worker
from diskferry.disk.progress import Progress

log = logging.getLogger("diskferry.backup")


def run_backup_job(job: BackupJob, progress: Progress, cancel: threading.Event) -> dict[str, Any]:
    """Run the job's backup and return its result as JSON values."""
    from diskferry.backup.engine import run_backup

    return run_backup(job, progress, cancel, say=log.info).to_json()


def run_restore_job(job: RestoreJob, progress: Progress, cancel: threading.Event) -> dict[str, Any]:
    """Run the job's restore and return its result as JSON values."""
    from diskferry.backup.restore import run_restore

    return run_restore(job, progress, cancel, say=log.info).to_json()


def _kind(argv: list[str]) -> str:
    """The job's `kind`, or "backup" when the file cannot say (the runtime then reports why)."""
    try:
        kind = json.loads(Path(argv[0]).read_text()).get("kind")
    except (IndexError, OSError, ValueError, AttributeError):
        return "backup"
    return "restore" if kind == "restore" else "backup"


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the backup or restore job named on the command line."""
    args = sys.argv[1:] if argv is None else argv
    if _kind(args) == "restore":
        run_worker("restore", RestoreJob, run_restore_job, args)
    run_worker("backup", BackupJob, run_backup_job, args)


if __name__ == "__main__":
    main()
