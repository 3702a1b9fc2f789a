"""A worker whose job directory is removed (its daemon gone for good, its data directory
deleted) stops as on SIGTERM, within a bound: an import is cancelled and leaves nothing, a
proxy, which has no TTL, stops serving."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from worker_support import Finished, Running, job_file, start

from diskferry.serving.certs import create_ca
from diskferry.worker.jobdir import CHECK_SECONDS

MiB = 1 << 20
# the watch sees the directory gone within CHECK_SECONDS; the job then stops as on SIGTERM
BOUND = CHECK_SECONDS + 15


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "job"
    directory.mkdir()
    return directory


@pytest.fixture
def started() -> Iterator[list[Running]]:
    """The workers a test starts, killed at its end if they still run."""
    workers: list[Running] = []
    yield workers
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.communicate()


def _removed(worker: Running, directory: Path) -> Finished:
    """What the worker printed once it ended after `directory` was removed under it."""
    shutil.rmtree(directory)
    return worker.finish(timeout=BOUND)


def test_an_import_whose_job_directory_is_removed_is_cancelled(
    faulty, images, tmp_path: Path, job_dir: Path, started: list[Running]
) -> None:
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(32 * MiB))
    url = faulty.add("slow.img", source, piece=64 * 1024, trickle=0.05)
    target = tmp_path / "out" / "disk.img"
    target.parent.mkdir()
    job = {"jobId": "import-9", "source": url, "target": str(target)}
    worker = start("import", job_file(job_dir, job))
    started.append(worker)
    worker.wait_for(lambda s: s["bytesDone"] > 0)
    finished = _removed(worker, job_dir)
    assert finished.code == 1, finished.stderr
    assert (finished.result["reason"], finished.result["jobId"]) == ("Cancelled", "import-9")
    assert "job directory" in finished.stderr
    assert not target.exists() and images.leftovers(target.parent) == []


def test_a_proxy_whose_job_directory_is_removed_stops_serving(
    job_dir: Path, started: list[Running]
) -> None:
    create_ca(job_dir / "ca")
    (job_dir / "routes.yaml").write_text(yaml.safe_dump({"exports": []}))
    job = {
        "kind": "proxy",
        "routes": "routes.yaml",
        "certDir": "ca",
        "sans": ["127.0.0.1"],
        "listenAddress": "127.0.0.1",
        "listenPort": 0,
        "processes": 2,
    }
    worker = start("export", job_file(job_dir, job))
    started.append(worker)
    port = worker.wait_for(lambda s: s["phase"] == "Serving")["details"]["listenPort"]
    finished = _removed(worker, job_dir)
    assert finished.code == 0, finished.stderr
    assert (finished.result["ended"], finished.result["listenPort"]) == ("stopped", port)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
