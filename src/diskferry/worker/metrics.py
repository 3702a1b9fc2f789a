"""A job's progress in the Prometheus text format, labelled with its kind and id."""

from __future__ import annotations

from diskferry.worker.status import JobStatus

_GAUGES = (
    ("diskferry_job_bytes_done", "Bytes done so far.", "bytesDone"),
    ("diskferry_job_bytes_total", "Bytes the job expects to do.", "bytesTotal"),
    ("diskferry_job_percent", "Percent done.", "percent"),
    ("diskferry_job_average_speed_bytes", "Bytes per second since start.", "averageSpeed"),
    ("diskferry_job_current_speed_bytes", "Bytes per second lately.", "currentSpeed"),
)


def metrics_text(status: JobStatus) -> str:
    """The gauges of `status`; label values need no escaping (kinds and ids are plain words)."""
    progress = status.progress.to_dict()
    labels = f'job="{status.kind}",job_id="{status.job_id or ""}"'
    out = []
    for name, text, key in _GAUGES:
        out += [
            f"# HELP {name} {text}",
            f"# TYPE {name} gauge",
            f"{name}{{{labels}}} {progress[key]}",
        ]
    return "\n".join(out) + "\n"
