"""The job runtime every engine's worker uses: job file, /progress, /metrics, result, SIGTERM.

Engines describe their jobs with `WorkerJob` and report through `Reporter`; their worker
entry points call `diskferry.worker.runtime.run_worker` (which brings in the HTTP server).
"""

from diskferry.worker.job import JobModel, WorkerJob, refuse_inline_secret
from diskferry.worker.reporter import QUIET, EventType, Reporter

__all__ = ["QUIET", "EventType", "JobModel", "Reporter", "WorkerJob", "refuse_inline_secret"]
