"""The CLI and every worker freeze the cyclic collector last at exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_REPORT = """
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count(), flush=True))
"""
_CLI = (
    _REPORT
    + """
from diskferry.cli.main import main
main(["--version"])
"""
)
_WORKER = (
    _REPORT
    + """
from diskferry.importer.job import ImportJob
from diskferry.worker.runtime import JobKind, run_worker
run_worker({"import": JobKind(ImportJob, lambda job, ctx: {})}, default="import")
"""
)


def _frozen(code: str, *args: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    word, count = proc.stdout.splitlines()[-1].split()
    assert word == "frozen", proc.stdout
    return int(count)


def test_the_cli_freezes_the_collector_at_exit() -> None:
    assert _frozen(_CLI) > 0


def test_a_worker_freezes_the_collector_at_exit(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text('{"jobId": "j-1", "source": "x", "target": "y"}')
    assert _frozen(_WORKER, str(job)) > 0
