"""`python -m diskferry.importer.worker JOB.json`: one import as a child process or Pod."""

from __future__ import annotations

import logging
import threading
from typing import Any

from diskferry.disk.jobrunner import run_worker
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob

log = logging.getLogger("diskferry.importer")


def run(job: ImportJob, progress: Progress, cancel: threading.Event) -> dict[str, Any]:
    """Run the job's import and return its result as JSON values."""
    return run_import(job, progress, cancel, say=log.info).to_json()


if __name__ == "__main__":
    run_worker("import", ImportJob, run)
