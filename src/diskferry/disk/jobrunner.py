"""The worker runtime every engine's `python -m ... JOB.json` entry point shares.

It reads and validates the job, answers GET /progress and GET /metrics while the job
runs, turns SIGTERM into cancellation, logs to stderr, and ends with a one-line JSON
result on stdout and an exit code: 0 done, 1 failed or cancelled, 2 a bad job file.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from diskferry.disk.errors import DiskferryError
from diskferry.disk.progress import Progress

log = logging.getLogger("diskferry.worker")


class WorkerJob(BaseModel):
    """Fields every job has: the port for /progress and /metrics (0 picks one)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    port: int = 0


J = TypeVar("J", bound=WorkerJob)


def metrics_text(kind: str, progress: Progress) -> str:
    """Progress in the Prometheus text format."""
    p = progress.to_dict()
    label = f'job="{kind}"'
    rows = [
        ("diskferry_job_bytes_done", "Bytes done so far.", p["bytesDone"]),
        ("diskferry_job_bytes_total", "Bytes the job expects to do.", p["bytesTotal"]),
        ("diskferry_job_percent", "Percent done.", p["percent"]),
        ("diskferry_job_average_speed_bytes", "Bytes per second since start.", p["averageSpeed"]),
        ("diskferry_job_current_speed_bytes", "Bytes per second lately.", p["currentSpeed"]),
    ]
    out = []
    for name, text, value in rows:
        out += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name}{{{label}}} {value}"]
    return "\n".join(out) + "\n"


def _server(kind: str, progress: Progress, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/progress":
                body, ctype = json.dumps(progress.to_dict()).encode(), "application/json"
            elif self.path == "/metrics":
                body, ctype = metrics_text(kind, progress).encode(), "text/plain; version=0.0.4"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _finish(result: dict[str, Any], code: int) -> NoReturn:
    print(json.dumps(result, sort_keys=True), flush=True)
    sys.exit(code)


def run_worker(
    kind: str,
    model: type[J],
    run: Callable[[J, Progress, threading.Event], dict[str, Any]],
    argv: list[str] | None = None,
) -> NoReturn:
    """Run one job from the JOB.json named in `argv` and exit with its result."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        _finish({"ok": False, "reason": "BadJob", "message": "usage: worker JOB.json"}, 2)
    try:
        job = model.model_validate_json(Path(args[0]).read_text())
    except (OSError, ValidationError, ValueError) as e:
        message = " ".join(str(e).split())
        _finish({"ok": False, "reason": "BadJob", "message": message}, 2)
    progress = Progress()
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: cancel.set())
    signal.signal(signal.SIGINT, lambda *_: cancel.set())
    server = _server(kind, progress, job.port)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        result = run(job, progress, cancel)
    except DiskferryError as e:
        log.error("%s failed: %s", kind, e.message)
        _finish({"ok": False, "reason": e.reason, "message": e.message}, 1)
    finally:
        server.shutdown()
    progress.finish()
    _finish({"ok": True, **result}, 0)
