"""LocalRunner: engine workers as child processes that outlive the daemon, found again by files.

Each job lives in DATA_DIR/jobs/<job-id>/: `job.json`, the files it was given, `stdout` and
`stderr` (files, not pipes, so a daemon that dies leaves its workers nothing to break on),
`scratch/` (the worker's TMPDIR; fixed-name sockets and pid files stay in the daemon's runtime
directory, where later workers find them) and `state.json` (pid, start time and boot id, port,
the names of the given files that hold credentials). Credential files are removed as soon as
the runner sees the worker ended, however it ended, so a kept failed job holds none.
A worker runs in a session and process group of its own, so neither a terminal's signals nor
the daemon's death reach it. A runner made afresh (after a daemon restart) reads the same
files: it re-attaches to workers still running and reads the results of those that ended; a pid
reused by another process is told apart by its start time and the boot id. A job purged without
its scratch leaves the tail of its log in DATA_DIR/jobs/logs/<job-id>.log, until `forget`.

A worker starts behind a gate (`diskferry.worker.gate`) and does nothing until the runner,
having written its state.json, releases it; one whose starter died before that ends at once
and leaves `never-ran`, and the job counts as never started: a job runs at most once, and
never unrecorded, whenever the daemon is killed. `stop_all` ends every worker for good (what
`diskferry serve --stop` does once the daemon is gone), and a worker whose job directory is
removed ends by itself (`diskferry.worker.jobdir`).

A server a job runs (an upload server) listens on 127.0.0.1, on a port it picks when it starts,
and is reached there, or as `localhost`, on this host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from diskferry.base import procstat
from diskferry.base.errors import DiskferryError
from diskferry.control.runtime.runner.base import LOG_LINES, JobFile, JobState, ServerAddress
from diskferry.control.runtime.runner.progress import worker_progress
from diskferry.control.runtime.runner.tail import first_line, tail_lines
from diskferry.worker.gate import NEVER_RAN, RELEASE
from diskferry.worker.job import (
    JOB_ID_PATTERN,
    WorkerJob,
    job_file,
    validate_job,
    validation_message,
)

STOP_POLL_SECONDS = 0.1
# how long a worker sent SIGKILL may take to be gone
KILL_SECONDS = 10.0
FAILED = "failed"
LOGS = "logs"
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
GATE = "diskferry.worker.gate"
_RESERVED = {"job.json", "stdout", "stderr", "state.json", "scratch", NEVER_RAN}
SERVER_HOST = "127.0.0.1"
SERVER_NAMES = (SERVER_HOST, "localhost")

# Called by `LocalRunner.start` at "spawned" (the worker exists, unrecorded) and "recorded"
# (state.json written, the worker not released): a test sets it to kill the starter there.
on_start_step: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if on_start_step is not None:
        on_start_step(name)


class _Look(NamedTuple):
    """A job as `LocalRunner._look` found it."""

    directory: Path
    record: dict[str, Any]
    running: bool


class JobStartError(DiskferryError):
    """A job could not be started: a bad id or file name, or the worker would not run."""

    reason = "JobNotStarted"


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` at once: written beside it, fsynced, renamed over it."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _check_file_name(name: str) -> None:
    if not _FILE_NAME.match(name) or name in _RESERVED:
        raise JobStartError(f"{name!r} is not a usable name for a job's file")


def _job_file(job: WorkerJob, job_id: str) -> dict[str, Any]:
    """What `job.json` holds for `job` under `job_id`; JobStartError when its engine names no
    worker, or its worker would refuse it (a secret inline)."""
    if not job.WORKER:
        raise JobStartError(f"a {type(job).__name__} names no worker to run it")
    data = {**job_file(job), "jobId": job_id}
    try:
        validate_job(type(job), data)
    except ValidationError as e:
        message = f"a {type(job).__name__} cannot go into a job file: {validation_message(e)}"
        raise JobStartError(message) from None
    return data


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class LocalRunner:
    """Runs jobs as child processes under `data_dir`/jobs; safe to use from several threads."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "jobs"
        self.failed_root = self.root / FAILED
        self.failed_root.mkdir(parents=True, exist_ok=True)
        self.logs_root = self.root / LOGS
        self.logs_root.mkdir(exist_ok=True)
        self._lock = threading.Lock()
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _dir(self, job_id: str) -> Path | None:
        for root in (self.root, self.failed_root):
            if (root / job_id / "state.json").exists():
                return root / job_id
        return None

    def job_dir(self, job_id: str) -> Path | None:
        """The directory of the job (under jobs/failed/ once kept), None when there is none."""
        return self._dir(job_id)

    def job_ids(self) -> list[str]:
        """The ids of the jobs not purged, kept failed ones apart."""
        return sorted(p.parent.name for p in self.root.glob("*/state.json"))

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        """Start `python -m WORKER job.json` in the job's directory, unless it was started (a
        worker on this host goes with the daemon, whatever claim it is for)."""
        if not re.match(JOB_ID_PATTERN, job_id) or job_id in (FAILED, LOGS):
            raise JobStartError(f"{job_id!r} is not a usable job id")
        data = _job_file(job, job_id)
        for given in files:
            _check_file_name(given.name)
        if len({given.name for given in files}) != len(files):
            raise JobStartError("two files given to the job have the same name")
        with self._lock:
            found = self._dir(job_id)
            if found is not None and not (found / NEVER_RAN).exists():
                return
            directory = self.root / job_id
            # anything here is of a start that died before it released its worker: it never ran
            shutil.rmtree(directory, ignore_errors=True)
            (directory / "scratch").mkdir(parents=True, mode=0o700)
            for given in files:
                write_atomically(directory / given.name, given.data)
            write_atomically(directory / "job.json", json.dumps(data).encode())
            child = self._spawn(directory, job.WORKER)
            self._children[job_id] = child
            _step("spawned")
            started = procstat.start_time(child.pid)  # it waits at the gate: alive
            self._save(
                directory,
                {
                    "jobId": job_id,
                    "module": job.WORKER,
                    "pid": child.pid,
                    "startTime": started,
                    "bootId": procstat.boot_id(),
                    "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
                    "port": None,
                    "exitCode": child.returncode,
                    "credentials": sorted(f.name for f in files if f.credential),
                },
            )
            _step("recorded")
            _release(child)

    def _spawn(self, directory: Path, module: str) -> subprocess.Popen[bytes]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        out = os.open(directory / "stdout", flags, 0o600)
        err = os.open(directory / "stderr", flags, 0o600)
        try:
            return subprocess.Popen(
                [sys.executable, "-m", GATE, module, "job.json"],
                cwd=directory,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=self._env(directory),
                start_new_session=True,
            )
        except OSError as e:
            raise JobStartError(f"cannot start {module}: {e.strerror or e}") from e
        finally:
            os.close(out)
            os.close(err)

    def _env(self, directory: Path) -> dict[str, str]:
        """The worker's environment: TMPDIR its scratch; the runtime directory (fixed-name
        sockets and pid files that later workers must find, with paths short enough for a
        socket) stays the daemon's."""
        env = {**os.environ, "TMPDIR": str(directory / "scratch")}
        env.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        return env

    def _save(self, directory: Path, record: dict[str, Any]) -> None:
        write_atomically(directory / "state.json", json.dumps(record).encode())

    def _alive(self, job_id: str, record: dict[str, Any]) -> tuple[bool, int | None]:
        """Whether the job's worker still runs, and its exit code when this runner knows it."""
        child = self._children.get(job_id)
        if child is not None:
            code = child.poll()
            if code is None:
                return True, None
            del self._children[job_id]
            return False, code
        same_boot = record.get("bootId") == procstat.boot_id()
        pid, started = record.get("pid"), record.get("startTime")
        known = isinstance(pid, int) and isinstance(started, int)
        alive = same_boot and known and procstat.is_same(pid, started)
        return alive, record.get("exitCode")

    def _look(self, job_id: str) -> _Look | None:
        """The job as it is now, its record brought up to date (port, exit code) and an ended
        job's credential files removed; None when there is no such job, or it never ran. The
        caller holds the lock."""
        directory = self._dir(job_id)
        if directory is None:
            return None
        record = _read_json(directory / "state.json") or {}
        running, code = self._alive(job_id, record)
        if not running and (directory / NEVER_RAN).exists():
            shutil.rmtree(directory)  # its starter died before releasing it: never started
            return None
        port = record.get("port") or self._port(directory)
        if (port, code) != (record.get("port"), record.get("exitCode")):
            record = {**record, "port": port, "exitCode": code}
            self._save(directory, record)
        if not running:
            _remove_credentials(directory, record)
        return _Look(directory, record, running)

    def state(self, job_id: str) -> JobState | None:
        """The job's state: /progress while it runs, the last stdout line's result once ended."""
        with self._lock:
            look = self._look(job_id)
        if look is None:
            return None
        port = look.record["port"]
        if look.running:
            progress = worker_progress("127.0.0.1", port) if port else None
            return JobState(job_id, True, progress=progress, port=port)
        result = self._result(look.directory)
        kept = look.directory.parent == self.failed_root
        code = look.record["exitCode"]
        return JobState(job_id, False, result=result, exit_code=code, port=port, kept=kept)

    def _port(self, directory: Path) -> int | None:
        line = first_line(directory / "stdout")
        try:
            port = json.loads(line)["port"] if line else None
        except (ValueError, KeyError, TypeError):
            return None
        return port if isinstance(port, int) else None

    def _result(self, directory: Path) -> dict[str, Any] | None:
        last = tail_lines(directory / "stdout", 1)
        try:
            result = json.loads(last[0]) if last else None
        except ValueError:
            return None
        return result if isinstance(result, dict) and "ok" in result else None

    def log_tail(self, job_id: str, lines: int = LOG_LINES) -> list[str]:
        """The last `lines` lines of the worker's stderr, read within a bounded window (from
        the tail kept when the job was purged, once it was)."""
        directory = self._dir(job_id)
        path = self.logs_root / f"{job_id}.log" if directory is None else directory / "stderr"
        return tail_lines(path, lines)

    def cancel(self, job_id: str) -> None:
        """SIGTERM to the worker's process group while the worker is the one started."""
        self._signal(job_id, signal.SIGTERM)

    def _signal(self, job_id: str, sig: int) -> bool:
        """Send `sig` to the worker's process group while the worker is the one started;
        whether it was running."""
        with self._lock:
            look = self._look(job_id)
        if look is None or not look.running:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(look.record["pid"], sig)
        return True

    def stop_all(self, timeout: float) -> list[str]:
        """SIGTERM every worker still running and wait for each to end, SIGKILL those left
        after `timeout` seconds; the ids of the jobs that were running."""
        running = [job_id for job_id in self.job_ids() if self._signal(job_id, signal.SIGTERM)]
        if not self._wait_ended(running, timeout):
            for job_id in running:
                self._signal(job_id, signal.SIGKILL)
            self._wait_ended(running, KILL_SECONDS)
        return running

    def _wait_ended(self, job_ids: list[str], timeout: float) -> bool:
        """Wait up to `timeout` seconds for the workers of `job_ids` to end; whether they did."""
        deadline = time.monotonic() + timeout
        while any(self._running(job_id) for job_id in job_ids):
            if time.monotonic() > deadline:
                return False
            time.sleep(STOP_POLL_SECONDS)
        return True

    def _running(self, job_id: str) -> bool:
        with self._lock:
            look = self._look(job_id)
        return look is not None and look.running

    def read_file(self, job_id: str, name: str) -> bytes | None:
        """A file in the job's directory, None when the job or the file is not there."""
        _check_file_name(name)
        directory = self._dir(job_id)
        try:
            return None if directory is None else (directory / name).read_bytes()
        except FileNotFoundError:
            return None

    def write_file(self, job_id: str, name: str, data: bytes) -> None:
        """Replace a file in the job's directory atomically (mode 0600)."""
        _check_file_name(name)
        with self._lock:
            directory = self._dir(job_id)
            if directory is None:
                raise JobStartError(f"no job {job_id} to write {name} for")
            write_atomically(directory / name, data)

    def purge(self, job_id: str, keep_scratch: bool) -> bool:
        """Move an ended job's directory to jobs/failed/ (`keep_scratch`) or remove it; a job
        still running is cancelled and False returned."""
        state = self.state(job_id)
        if state is None:
            return True
        if state.running:
            self.cancel(job_id)
            return False
        with self._lock:
            directory = self._dir(job_id)
            if directory is None:
                return True
            if not keep_scratch:
                tail = "".join(f"{line}\n" for line in tail_lines(directory / "stderr", LOG_LINES))
                write_atomically(self.logs_root / f"{job_id}.log", tail.encode())
                shutil.rmtree(directory)
            elif directory.parent != self.failed_root:
                os.replace(directory, self.failed_root / job_id)
        return True

    def forget(self, job_id: str) -> bool:
        """Purge the job, its kept scratch and log tail too; False while it still runs."""
        if not self.purge(job_id, keep_scratch=False):
            return False
        (self.logs_root / f"{job_id}.log").unlink(missing_ok=True)
        return True

    def server_address(self, job_id: str, namespace: str) -> ServerAddress:
        """127.0.0.1, a port the server picks, and the names of this host's loopback."""
        return ServerAddress(SERVER_HOST, 0, SERVER_NAMES)

    def server_url(self, job_id: str, port: int) -> str | None:
        """`https://127.0.0.1:port`."""
        return f"https://{SERVER_HOST}:{port}"


def _release(child: subprocess.Popen[bytes]) -> None:
    """Let the worker waiting at its gate run; its stdin closed."""
    assert child.stdin is not None
    try:
        os.write(child.stdin.fileno(), RELEASE)
    except BrokenPipeError:
        pass  # it ended already, as state() will tell
    finally:
        child.stdin.close()


def _remove_credentials(directory: Path, record: dict[str, Any]) -> None:
    """Remove the credential files named in the ended job's `record`."""
    for name in record.get("credentials") or ():
        if isinstance(name, str) and _FILE_NAME.match(name) and name not in _RESERVED:
            (directory / name).unlink(missing_ok=True)
