"""The job runtime every engine's worker uses: job file, /progress, /metrics, result, SIGTERM.

Engines describe their jobs with `WorkerJob` and report through `Reporter`; their worker
entry points call `run_worker` (which brings in the HTTP server). Each name is loaded when
first used (diskferry.base.faces), so that reporting does not bring in pydantic.
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "gate": ("NEVER_RAN", "RELEASE"),
        "job": ("JOB_ID_PATTERN", "JobModel", "WorkerJob", "refuse_inline_secret"),
        "reporter": ("QUIET", "EventType", "Reporter"),
        "runtime": ("BadJobError", "JobContext", "JobKind", "run_worker"),
        "status": ("JobStatus",),
    },
)
