"""The runner interface reconcilers start jobs through: child processes here, Pods in a cluster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from diskferry.worker.job import WorkerJob

LOG_LINES = 200


@dataclass(frozen=True)
class JobFile:
    """A file given to a job, written beside its job file, where the job's fields name it by
    `name`; a `credential` is removed once the job has ended, however it ended."""

    name: str
    data: bytes = field(repr=False)
    credential: bool = False


@dataclass(frozen=True)
class JobState:
    """What is known of one job: whether it runs, its /progress, and once ended its result."""

    job_id: str
    running: bool
    progress: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    port: int | None = None
    kept: bool = False
    """Whether the ended job was purged with its scratch kept: its outcome was settled."""

    @property
    def succeeded(self) -> bool:
        """Whether the job ended with an `ok` result."""
        return not self.running and bool(self.result and self.result.get("ok"))

    @property
    def failed(self) -> bool:
        """Whether the job ended without an `ok` result (a lost worker included)."""
        return not self.running and not self.succeeded


@dataclass(frozen=True)
class ServerAddress:
    """Where a job's server is to listen (port 0: one it picks when it starts), and the names
    its clients reach it by, which its certificate is for."""

    address: str
    port: int
    sans: tuple[str, ...]


class Runner(Protocol):
    """Starts worker jobs by id, tells their state and where the servers they run are reached;
    every method is idempotent."""

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        """Run `job` (its `jobId` set to `job_id`) in its engine's worker, with `files`
        written beside the job file, where relative paths in the job find them; a job id
        already started is not started again. A job its worker would refuse to read (a
        secret inline) is refused here, and nothing runs. `for_claim` (namespace, name) is the
        claim whose object the job works for where the job does not name it (a clone's source
        server works for its target), so that what runs the job goes with that object."""

    def state(self, job_id: str) -> JobState | None:
        """The job's state, None when no job of that id was started (or it was purged)."""

    def log_tail(self, job_id: str, lines: int = LOG_LINES) -> list[str]:
        """The last `lines` lines the worker logged, however much it logged."""

    def cancel(self, job_id: str) -> None:
        """Ask the job to stop (SIGTERM to its process group); nothing when it has ended."""

    def read_file(self, job_id: str, name: str) -> bytes | None:
        """A file the job was given or wrote beside its job file, None when there is none."""

    def write_file(self, job_id: str, name: str, data: bytes) -> None:
        """Replace a file beside the job file at once (a running worker reads it anew)."""

    def purge(self, job_id: str, keep_scratch: bool) -> bool:
        """Forget an ended job: its files are kept for debugging when `keep_scratch`, removed
        otherwise (the tail of its log stays for `log_tail`). A job still running is cancelled
        instead and False returned."""

    def forget(self, job_id: str) -> bool:
        """Purge the job and remove everything kept of it, its log tail included; False while
        it still runs."""

    def server_address(self, job_id: str, namespace: str) -> ServerAddress:
        """Where the server a job `job_id` runs for an object of `namespace` is to listen, and
        the names it is reached by."""

    def server_url(self, job_id: str, port: int) -> str | None:
        """The base URL (`https://host:port`) by which a client reaches the server of the
        running job `job_id`, which listens on `port`; None when the job is not known."""
