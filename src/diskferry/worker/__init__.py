"""The job runtime every engine's worker uses: job file, /progress, /metrics, result, SIGTERM.

Engines describe their jobs with `WorkerJob` and report through `Reporter`; their worker
entry points call `diskferry.worker.runtime.run_worker` (which brings in the HTTP server).
The names below are loaded when first used, so that reporting does not bring in pydantic.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "JobModel": "job",
    "WorkerJob": "job",
    "refuse_inline_secret": "job",
    "QUIET": "reporter",
    "EventType": "reporter",
    "Reporter": "reporter",
}
__all__ = ["QUIET", "EventType", "JobModel", "Reporter", "WorkerJob", "refuse_inline_secret"]


def __getattr__(name: str) -> Any:
    """One of `__all__`, from the module that defines it."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
