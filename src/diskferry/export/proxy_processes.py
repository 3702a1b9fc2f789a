"""The export proxy's processes beyond the first: each listens on the first one's port with a
socket of its own (SO_REUSEPORT, so that the kernel spreads the connections evenly) and
relays with an event loop of its own, so that the TLS of the proxy's streams runs on every
core and not on one.

The first process binds the port, then starts them (`python -m diskferry.export.proxy_process`,
the job with that port on stdin), tethered: they get SIGTERM when it ends, however it ends. It
waits until each says that it listens (a line on its stdout), so that the connections are spread
from the first; one that ends first fails the start. It stops them when it stops (each drains
its streams up to the grace, as it does), and warns when one ends before.
"""

from __future__ import annotations

import contextlib
import logging
import select
import signal
import subprocess
import sys
import threading
import time
from types import TracebackType

from diskferry.base import tether
from diskferry.export.errors import ExportError
from diskferry.export.job import ProxyJob
from diskferry.worker.reporter import Reporter

log = logging.getLogger(__name__)
ENTRY = "diskferry.export.proxy_process"
START_TIMEOUT = 60.0
# how long a process may take to end beyond the grace its streams have to finish
_END_MARGIN = 10.0


def _wait_listening(process: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait for the line by which `process` says that it listens; ExportError when it ends or
    the deadline passes first."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        raise ExportError(f"an export proxy process did not listen within {START_TIMEOUT:g} s")
    if not process.stdout.readline():
        raise ExportError(
            f"an export proxy process ended with code {process.wait()} before it listened"
        )


class ProxyProcesses:
    """`job.processes - 1` more processes of the proxy on `port`, while the block runs."""

    def __init__(self, job: ProxyJob, port: int, reporter: Reporter) -> None:
        self.job = job.model_copy(update={"listen_port": port})
        self.reporter = reporter
        self.processes: list[subprocess.Popen[bytes]] = []
        self._watchers: list[threading.Thread] = []
        self._stopping = threading.Event()

    def __enter__(self) -> ProxyProcesses:
        try:
            self._start()
        except BaseException:
            self._end()
            raise
        for process in self.processes:
            watcher = threading.Thread(
                target=self._watch, args=(process,), name="diskferry-proxy-watch", daemon=True
            )
            watcher.start()
            self._watchers.append(watcher)
        return self

    def _start(self) -> None:
        payload = self.job.model_dump_json(by_alias=True).encode()
        try:
            for _ in range(self.job.processes - 1):
                process = tether.start(
                    [sys.executable, "-m", ENTRY], stdin=subprocess.PIPE, stdout=subprocess.PIPE
                )
                self.processes.append(process)
                assert process.stdin is not None
                with process.stdin:
                    process.stdin.write(payload)
        except OSError as e:
            raise ExportError(f"cannot start the proxy's other processes: {e}") from e
        deadline = time.monotonic() + START_TIMEOUT
        for process in self.processes:
            _wait_listening(process, deadline)

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        if not self._stopping.is_set():
            message = f"an export proxy process ({process.pid}) ended with code {code}"
            log.warning("%s; the others go on", message)
            self.reporter.warn("ProxyProcessEnded", message)

    def stop(self) -> None:
        """Tell every process to drain and end; returns at once."""
        self._stopping.set()
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)

    def _end(self) -> None:
        """Stop them, and wait for them (kill one that outlasts the grace)."""
        self.stop()
        for process in self.processes:
            try:
                process.wait(self.job.grace + _END_MARGIN)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        for watcher in self._watchers:
            watcher.join()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end()
