"""Upload sources: an upload server worker per object, on 127.0.0.1 with a port of its own, its
certificate from the daemon's CA, its secret a fresh token; the URLs users upload to, in
Deckhouse's secret-path shape (`/upload/<secret>`), read back from the running worker."""

from __future__ import annotations

import secrets
from typing import Any

from diskferry.control.reconcilers.exportcerts import ServerCerts
from diskferry.control.runner.base import IMPORT, Runner
from diskferry.importer.upload_job import UploadPhase
from diskferry.importer.upload_server import UPLOAD_PREFIX

UPLOAD_HOST = "127.0.0.1"
EXTERNAL_HOST = "localhost"
UPLOAD_SANS = [UPLOAD_HOST, EXTERNAL_HOST]
TOKEN_FILE = "token"
WAITING = (UploadPhase.STARTING.value, UploadPhase.WAITING.value)


def start_upload(
    runner: Runner, certs: ServerCerts, job_id: str, target: str, size: int | None
) -> None:
    """Start the upload server that writes what is uploaded into `target` (grown to `size`)."""
    job: dict[str, Any] = {
        "kind": "upload",
        "target": target,
        "format": "raw",
        "tokenFile": TOKEN_FILE,
        "certDir": ".",
        "sans": UPLOAD_SANS,
        "listenAddress": UPLOAD_HOST,
        "listenPort": 0,
    }
    if size is not None:
        job["size"] = size
    files = {**certs.files(UPLOAD_SANS), TOKEN_FILE: secrets.token_urlsafe(32).encode()}
    runner.start(job_id, IMPORT, job, files, credentials=[TOKEN_FILE])


def waiting_for_user(progress: dict[str, Any] | None) -> bool:
    """Whether the upload server has no upload under way yet."""
    return progress is None or progress.get("phase") in WAITING


def upload_urls(runner: Runner, job_id: str, progress: dict[str, Any] | None) -> dict[str, str]:
    """`imageUploadURLs` of the running server, {} until it listens: `external` (by name)
    and `inCluster` (by address), both `https://HOST:PORT/upload/<secret>`."""
    port = ((progress or {}).get("details") or {}).get("listenPort")
    token = runner.read_file(job_id, TOKEN_FILE)
    if not isinstance(port, int) or not token:
        return {}
    secret = token.decode().splitlines()[0]
    return {
        "external": f"https://{EXTERNAL_HOST}:{port}{UPLOAD_PREFIX}{secret}",
        "inCluster": f"https://{UPLOAD_HOST}:{port}{UPLOAD_PREFIX}{secret}",
    }


def uploaded_result(result: dict[str, Any]) -> dict[str, Any]:
    """An upload job's result as an import's: what the upload imported."""
    if "uploaded" not in result:
        return result
    return {"ok": bool(result.get("uploaded")), **(result.get("uploaded") or {})}
