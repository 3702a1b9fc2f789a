"""The worker runtime: a job file it cannot run is refused (exit 2, BadJob) without echoing what
it holds, and whatever stops a job, its last stdout line is a JSON result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from worker_support import Finished, job_file, run

SECRET = "hunter2-s3cr3t"


def _bad_job(finished: Finished) -> str:
    assert finished.code == 2, finished.stderr
    result = finished.result
    assert (result["ok"], result["reason"]) == (False, "BadJob")
    finished.assert_one_log_line_of_failure()
    return result["message"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"source": "a", "target": ', "is not JSON: Expecting value at line 1 column 27"),
        ("[1, 2]", "does not hold a JSON object"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
    ],
)
def test_a_job_file_that_is_not_a_job_object(tmp_path: Path, text: str | bytes, says: str) -> None:
    path = tmp_path / "job.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert says in _bad_job(run("import", path))


def test_a_missing_job_file_or_none(tmp_path: Path) -> None:
    message = _bad_job(run("import", tmp_path / "nothing.json"))
    assert (
        message
        == f"cannot read the job file {tmp_path / 'nothing.json'}: No such file or directory"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.importer.worker"], capture_output=True, text=True
    )
    assert _bad_job(Finished(proc.returncode, proc.stdout.splitlines(), proc.stderr))


def test_a_wrong_field_is_named_and_the_job_id_kept(tmp_path: Path) -> None:
    job = {"jobId": "j-7", "source": "x", "target": "y", "format": "vmdk"}
    finished = run("import", job_file(tmp_path, job))
    message = _bad_job(finished)
    assert message.endswith("is not a valid import job: format: Input should be 'raw' or 'qcow2'")
    assert finished.result["jobId"] == "j-7"


def test_an_unknown_kind(tmp_path: Path) -> None:
    finished = run("backup", job_file(tmp_path, {"kind": SECRET, "repo": str(tmp_path)}))
    message = _bad_job(finished)
    assert "unknown kind of job: use one of backup, restore, init, check" in message
    assert SECRET not in finished.stderr + "".join(finished.stdout)


@pytest.mark.parametrize(
    ("engine", "job", "field"),
    [
        ("import", {"source": "x", "target": "y", "headers": {"Authorization": SECRET}}, "headers"),
        ("import", {"source": "x", "target": "y", "token": SECRET}, "token"),
        ("import", {"source": "x", "target": "y", "creds": f"user:{SECRET}"}, "creds"),
        ("import", {"source": "x", "target": "y", "retries": SECRET}, "retries"),
        ("backup", {"kind": "prune", "repo": "r", "password": SECRET}, "password"),
        ("backup", {"kind": "init", "repo": "r", "passwordFile": {"v": SECRET}}, "passwordFile"),
        (
            "export",
            {"name": "e", "volumes": [], "tokenFile": "t", "certDir": "c", "token": SECRET},
            "token",
        ),
    ],
)
def test_a_secret_in_a_job_file_is_never_shown(
    tmp_path: Path, engine: str, job: dict, field: str
) -> None:
    finished = run(engine, job_file(tmp_path, job))
    message = _bad_job(finished)
    assert field in message
    assert SECRET not in finished.stderr
    assert not [line for line in finished.stdout if SECRET in line]


def test_inline_headers_are_refused_in_a_job_file_only(tmp_path: Path) -> None:
    job = {"source": "x", "target": "y", "headers": {"Authorization": SECRET}}
    message = _bad_job(run("import", job_file(tmp_path, job)))
    assert "headers: a job file may not hold this secret inline: name a file with headersFile" in (
        message
    )
    from diskferry.importer.job import ImportJob

    assert ImportJob(**job).headers == {"Authorization": SECRET}


# an engine function that fails in a way no engine foresaw
_UNFORESEEN = """
import sys
from diskferry.importer.job import ImportJob
from diskferry.worker.runtime import JobKind, run_worker

def fail(job, ctx):
    raise RuntimeError("http://user:pw@host/x is gone\\nand a second line")

run_worker({"import": JobKind(ImportJob, fail)}, default="import")
"""


def test_an_unforeseen_exception_is_an_internal_error_in_one_line(tmp_path: Path) -> None:
    job = job_file(tmp_path, {"jobId": "j-9", "source": "x", "target": "y"})
    proc = subprocess.run(
        [sys.executable, "-c", _UNFORESEEN, str(job)], capture_output=True, text=True, timeout=60
    )
    finished = Finished(proc.returncode, proc.stdout.splitlines(), proc.stderr)
    assert finished.code == 1
    assert json.loads(finished.stdout[0]).keys() == {"port"}
    assert finished.result == {
        "ok": False,
        "reason": "InternalError",
        "message": "RuntimeError: http://host/x is gone",
        "jobId": "j-9",
    }
    finished.assert_one_log_line_of_failure()
    assert "pw@" not in finished.stderr


def test_a_status_address_that_cannot_be_bound(tmp_path: Path) -> None:
    job = {"source": "x", "target": "y", "address": "no-such-host.invalid"}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 1
    assert finished.result["reason"] == "StatusServerFailed"
    assert "no-such-host.invalid" in finished.result["message"]
    finished.assert_one_log_line_of_failure()
