"""Upload sources: an upload server worker per object, listening where the runner says (on
127.0.0.1 with a port of its own on this host, on its Pod's address behind a Service in a
cluster), its certificate from the daemon's CA for the names the runner gives, its secret a
fresh token; the URLs users upload to, in Deckhouse's secret-path shape (`/upload/<secret>`),
read back from the running worker.

The external URL goes through the export proxy, as an export's external links do, under the
upload's job id: on this host the server is routed there under the namespace
`diskferry-uploads`; in a cluster, where the proxy finds each server through its Service, the
server is reached by the Service the proxy derives from the job's id (`ExportProxy.finds`),
under the claim's namespace. There is none where nothing reaches the proxy from outside. The
in-cluster URL reaches the worker itself, by the address the runner gives.

The token expires (`diskferry.io/upload-token-ttl`, 24h by default): an expired one is replaced
with a fresh one while the server runs, so `imageUploadURLs` then name the new secret and the
old URLs are refused. An upload whose bytes do not match the source's checksum is refused
by the server, which then waits for another; the object fails with the reason
ChecksumMismatch, as the same bytes never match. An object may give
`diskferry.io/upload-timeout`: when no upload is under way that long after it was created,
it fails with the reason UploadTimedOut (by default it waits for ever, as Deckhouse and CDI
do).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Claim
from diskferry.control.resources.duration import format_duration, parse_duration
from diskferry.control.resources.model import Reason, Resource
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.disk.checksums import ChecksumError
from diskferry.importer import UploadJob, UploadPhase

TOKEN_FILE = "token"
WAITING = (UploadPhase.STARTING.value, UploadPhase.WAITING.value)
ROUTE_NAMESPACE = "diskferry-uploads"
TOKEN_TTL_ANNOTATION = "diskferry.io/upload-token-ttl"
TIMEOUT_ANNOTATION = "diskferry.io/upload-timeout"
DEFAULT_TOKEN_TTL = timedelta(hours=24)
UPLOAD_TIMED_OUT = Reason("UploadTimedOut")
FINAL_FAILURES = (ChecksumError.reason,)


@dataclass(frozen=True)
class UploadPolicy:
    """How long an upload token lives, and how long an object waits for an upload to begin."""

    token_ttl: timedelta = DEFAULT_TOKEN_TTL
    timeout: timedelta | None = None


def upload_policy(obj: Resource) -> UploadPolicy:
    """The object's policy from its annotations; DurationError names a bad one."""
    notes = obj.metadata.annotations
    ttl = notes.get(TOKEN_TTL_ANNOTATION)
    timeout = notes.get(TIMEOUT_ANNOTATION)
    return UploadPolicy(
        token_ttl=parse_duration(ttl) if ttl else DEFAULT_TOKEN_TTL,
        timeout=parse_duration(timeout) if timeout else None,
    )


def timed_out(obj: Resource, policy: UploadPolicy) -> str | None:
    """Why the object, still waiting for its upload, has waited too long; None while it may
    wait on."""
    created = obj.metadata.creation_timestamp
    if policy.timeout is None or created is None:
        return None
    if datetime.now(UTC) - created < policy.timeout:
        return None
    return f"no upload was under way {format_duration(policy.timeout)} after the object was created"


def token_text(ttl: timedelta) -> bytes:
    """A fresh token file: the token, then the RFC 3339 time it expires."""
    expires = (datetime.now(UTC) + ttl).isoformat(timespec="seconds")
    return f"{secrets.token_urlsafe(32)}\n{expires}\n".encode()


def start_upload(
    runner: Runner,
    certs: ServerCerts,
    job_id: str,
    target: Claim,
    size: int | None,
    token_ttl: timedelta = DEFAULT_TOKEN_TTL,
    checksum: str | None = None,
    proxy: ExportProxy | None = None,
) -> None:
    """Start the upload server that writes what is uploaded into `target` (grown to `size`),
    refusing an upload whose bytes do not match `checksum` (`ALGO:HEX`) when one is given;
    reached first by the names `proxy` finds it by, where it finds servers by their names."""
    server = runner.server_address(job_id, target.namespace)
    found = (proxy.finds(target.namespace, job_id) if proxy is not None else None) or ()
    sans = [*found, *(name for name in server.sans if name not in found)]
    job = UploadJob(
        target=target.path,
        format="raw",
        token_file=TOKEN_FILE,
        cert_dir=".",
        sans=sans,
        listen_address=server.address,
        listen_port=server.port,
        size=size,
        checksum=checksum or None,
    )
    token = JobFile(TOKEN_FILE, token_text(token_ttl), credential=True)
    runner.start(job_id, job, [*certs.job_files(sans), token])


def renew_expired_token(runner: Runner, job_id: str, ttl: timedelta) -> bool:
    """Give the running server a fresh token when its own has expired; whether it did."""
    text = runner.read_file(job_id, TOKEN_FILE)
    lines = text.decode().splitlines() if text else []
    try:
        expires = datetime.fromisoformat(lines[1]) if len(lines) > 1 else None
    except ValueError:
        expires = None
    if expires is not None and datetime.now(UTC) < expires:
        return False
    runner.write_file(job_id, TOKEN_FILE, token_text(ttl))
    return True


def refused_upload(progress: dict[str, Any] | None) -> tuple[str, str] | None:
    """The reason and message of an upload the server refused for good (its bytes did not
    match the checksum: the same bytes never will), from the server's Warning events; None
    while it may take another."""
    for event in reversed((progress or {}).get("events") or []):
        if event.get("type") == "Warning" and event.get("reason") in FINAL_FAILURES:
            return str(event["reason"]), str(event.get("message") or "")
    return None


def waiting_for_user(progress: dict[str, Any] | None) -> bool:
    """Whether the upload server has no upload under way yet."""
    return progress is None or progress.get("phase") in WAITING


def upload_urls(
    runner: Runner,
    job_id: str,
    namespace: str,
    progress: dict[str, Any] | None,
    proxy: ExportProxy | None = None,
) -> dict[str, str]:
    """`imageUploadURLs` of the running server of the claim in `namespace`, {} until it
    listens, each ending in `/upload/<secret>`: `inCluster` by the address the runner gives;
    `external` through `proxy` once it serves (the server routed there, or found by the name
    it was started under), as `inCluster` without a proxy, and absent where nothing reaches the
    proxy from outside (a cluster with neither a Route nor an Ingress to it, as an export's
    external links are) or the proxy cannot find the server (started under other names)."""
    port = ((progress or {}).get("details") or {}).get("listenPort")
    token = runner.read_file(job_id, TOKEN_FILE)
    if not isinstance(port, int) or not token:
        return {}
    server = runner.server_url(job_id, port)
    if server is None:
        return {}
    path = f"{UploadJob.UPLOAD_PREFIX}{token.decode().splitlines()[0]}"
    in_cluster = {"inCluster": f"{server}{path}"}
    if proxy is None:
        return {"external": f"{server}{path}", **in_cluster}
    outside = proxy.outside()
    if isinstance(outside, str):
        return in_cluster
    found = proxy.finds(namespace, job_id)
    if found is not None:
        if urlsplit(server).hostname not in found:
            return in_cluster
        return {"external": f"{outside.export_url(namespace, job_id)}{path}", **in_cluster}
    proxy.route(ROUTE_NAMESPACE, job_id, port, ready=True)
    if not proxy.serving():
        return {}
    return {"external": f"{outside.export_url(ROUTE_NAMESPACE, job_id)}{path}", **in_cluster}


def drop_upload_route(proxy: ExportProxy | None, job_id: str) -> None:
    """Stop routing the job's upload server through the proxy."""
    if proxy is not None:
        proxy.drop_route(ROUTE_NAMESPACE, job_id)
