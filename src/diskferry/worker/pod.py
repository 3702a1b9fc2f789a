"""What a worker that runs in a Pod takes from it: the address its status server listens on (the
Pod's IP, which the Pod passes down in ADDRESS_ENV), and its job's server too when the job asks
for every address, and the file its result is written to besides stdout (the container's
termination message, named in RESULT_FILE_ENV), where the runner that started the Pod reads it
once the container has ended.

A termination message holds RESULT_LIMIT bytes at most (Kubernetes cuts a longer one): a result
that does not fit is written there as a failure that says so (ResultTooLarge), never cut.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger("diskferry.worker")
ADDRESS_ENV = "DISKFERRY_WORKER_ADDRESS"
RESULT_FILE_ENV = "DISKFERRY_RESULT_FILE"
RESULT_LIMIT = 4096
"""The bytes of a container's termination message Kubernetes keeps."""
RESULT_TOO_LARGE = "ResultTooLarge"
EVERY_ADDRESS = ("0.0.0.0", "::")


def listen_address(job_address: str) -> str:
    """The address the status server listens on: the Pod's, when it gives one, else the job's."""
    return os.environ.get(ADDRESS_ENV) or job_address


def server_address(job_address: str) -> str:
    """The address a job's server listens on: the Pod's, when the job asks for every address
    and the Pod gives its own (a Pod on the host's network has every address of the host), else
    the job's."""
    pod = os.environ.get(ADDRESS_ENV)
    return pod if pod and job_address in EVERY_ADDRESS else job_address


def _fitting(result: dict[str, Any]) -> bytes:
    """`result` as one line of JSON, or a ResultTooLarge failure when it is longer than
    RESULT_LIMIT."""
    line = json.dumps(result, sort_keys=True).encode()
    if len(line) <= RESULT_LIMIT:
        return line
    refused = {
        "ok": False,
        "reason": RESULT_TOO_LARGE,
        "message": f"the job's result ({len(line)} bytes) is longer than a termination message "
        f"holds ({RESULT_LIMIT} bytes): its worker's log has it whole",
        "jobId": result.get("jobId"),
    }
    return json.dumps(refused, sort_keys=True).encode()


def write_result(result: dict[str, Any]) -> None:
    """Write `result` to the file the Pod names, if it names one (a failure to is logged)."""
    path = os.environ.get(RESULT_FILE_ENV)
    if not path:
        return
    try:
        with open(path, "wb") as out:
            out.write(_fitting(result))
    except OSError as e:
        log.error("cannot write the result to %s: %s", path, e.strerror or e)
