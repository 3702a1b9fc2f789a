"""The runtime every engine's `python -m diskferry.<engine>.worker JOB.json` entry point shares.

It reads and validates the job, answers GET /progress and GET /metrics while the job runs,
turns SIGTERM and SIGINT, and the removal of the job file's directory (see `jobdir`), into the
job's cancel event, logs to stderr, and ends with a one-line JSON result as the last stdout
line (and, in a Pod, in its termination message: see `pod`), whatever happened, and never a
traceback:

- `{"ok": true, "jobId": ..., ...}` and exit 0 when the job is done;
- `{"ok": false, "reason": ..., "message": ..., "jobId": ...}` and exit 1 when it failed or
  was cancelled (reason Cancelled), or an unexpected exception stopped it (InternalError);
- the same with reason BadJob and exit 2 for a job file that is missing, unreadable, not
  JSON, of an unknown kind or not valid for its kind.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from diskferry.base.errors import DiskferryError
from diskferry.base.heap import limit_arenas
from diskferry.base.quick_exit import freeze_at_exit
from diskferry.disk.progress import Progress
from diskferry.disk.urls import without_credentials
from diskferry.worker.job import JOB_ID_PATTERN, WorkerJob, validate_job, validation_message
from diskferry.worker.jobdir import JobDirectoryWatch
from diskferry.worker.pod import listen_address, write_result
from diskferry.worker.reporter import Reporter
from diskferry.worker.server import StatusServer
from diskferry.worker.status import JobStatus

log = logging.getLogger("diskferry.worker")
Result = dict[str, Any]


@dataclass(frozen=True)
class JobContext:
    """What the runtime hands a job's engine function."""

    progress: Progress
    reporter: Reporter
    cancel: threading.Event


@dataclass(frozen=True)
class JobKind:
    """One kind of job a worker runs: the model its file is read into, and what runs it."""

    model: type[WorkerJob]
    run: Callable[[Any, JobContext], Result]


class BadJobError(DiskferryError):
    """The job file cannot be run: missing, unreadable, not JSON, or not a valid job."""

    reason = "BadJob"

    def __init__(self, message: str, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


def failure(reason: str, message: str, job_id: str | None) -> Result:
    """The result line of a job that did not succeed."""
    return {"ok": False, "reason": reason, "message": message, "jobId": job_id}


def _job_id(data: dict[str, Any]) -> str | None:
    found = data.get("jobId")
    return found if isinstance(found, str) and re.match(JOB_ID_PATTERN, found) else None


def load_job(kinds: Mapping[str, JobKind], default: str, args: list[str]) -> tuple[str, WorkerJob]:
    """The kind and the validated job of the one job file in `args`; BadJobError otherwise."""
    if len(args) != 1:
        raise BadJobError("give one argument, the job file: worker JOB.json")
    path = args[0]
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise BadJobError(f"cannot read the job file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise BadJobError(f"the job file {path} is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise BadJobError(
            f"the job file {path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    if not isinstance(data, dict):
        raise BadJobError(f"the job file {path} does not hold a JSON object")
    job_id = _job_id(data)
    kind = data.get("kind", default)
    if not isinstance(kind, str) or kind not in kinds:
        raise BadJobError(
            f"the job file {path} names an unknown kind of job: use one of {', '.join(kinds)}",
            job_id,
        )
    try:
        return kind, validate_job(kinds[kind].model, data)
    except ValidationError as e:
        raise BadJobError(
            f"the job file {path} is not a valid {kind} job: {validation_message(e)}", job_id
        ) from None


def _internal(e: BaseException) -> str:
    """One line naming an unexpected exception, without credentials."""
    first = (str(e).splitlines() or [""])[0].strip()
    return without_credentials(f"{type(e).__name__}: {first}" if first else type(e).__name__)


def _where(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _failed(kind: str, e: Exception, cancel: threading.Event, job_id: str | None) -> Result:
    """The result of a job stopped by `e`, logged as one line."""
    if cancel.is_set():
        log.error("%s cancelled (%s)", kind, _internal(e))
        return failure("Cancelled", "cancelled", job_id)
    if isinstance(e, DiskferryError):
        log.error("%s failed: %s", kind, e.message)
        return failure(e.reason, e.message, job_id)
    message = _internal(e)
    log.error("%s failed unexpectedly: %s (at %s)", kind, message, _where(e))
    return failure("InternalError", message, job_id)


def _one_line_hooks() -> None:
    """Exceptions that escape a thread, or the runtime, are logged as one line."""

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            name = args.thread.name if args.thread else "?"
            log.error("thread %s failed: %s", name, _internal(args.exc_value))

    threading.excepthook = thread_hook
    sys.excepthook = lambda kind, value, tb: log.error("worker failed: %s", _internal(value))


def _run(kinds: Mapping[str, JobKind], default: str, args: list[str]) -> tuple[int, Result]:
    try:
        kind, job = load_job(kinds, default, args)
    except BadJobError as e:
        log.error("bad job: %s", e.message)
        return 2, failure(e.reason, e.message, e.job_id)
    status = JobStatus(kind, job.job_id, Progress())
    cancel = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: cancel.set())
    server = StatusServer(status)
    try:
        port = server.start(listen_address(job.address), job.port)
    except DiskferryError as e:
        log.error("%s failed: %s", kind, e.message)
        return 1, failure(e.reason, e.message, job.job_id)
    try:
        print(json.dumps({"port": port}), flush=True)
        log.info("%s job %s started; /progress on port %d", kind, job.job_id or "-", port)
        with JobDirectoryWatch(Path(args[0]).absolute().parent, cancel):
            result = kinds[kind].run(job, JobContext(status.progress, status, cancel))
    except Exception as e:
        return 1, _failed(kind, e, cancel, job.job_id)
    finally:
        server.stop()
    status.progress.finish()
    log.info("%s done: %d bytes", kind, status.progress.done)
    return 0, {"ok": True, "jobId": job.job_id, **result}


def run_worker(
    kinds: Mapping[str, JobKind], *, default: str, argv: list[str] | None = None
) -> NoReturn:
    """Run the job named in `argv` (else sys.argv), of one of `kinds` (`default` when the file
    names none), print its result as the last stdout line and exit with its code."""
    freeze_at_exit()
    limit_arenas()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    _one_line_hooks()
    code, result = _run(kinds, default, sys.argv[1:] if argv is None else argv)
    print(json.dumps(result, sort_keys=True), flush=True)
    write_result(result)
    sys.exit(code)
