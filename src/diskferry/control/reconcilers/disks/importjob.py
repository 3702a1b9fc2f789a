"""One import job into a claim, and how it went: the path disks, images and snapshots share.

The job's id is the object's kind prefix and uid, so a reconcile after a daemon restart finds
the job it started (running, or ended with a result); a file claim that the job committed
carries that id (see `diskferry.disk.prime`), so the job started again once its files are gone
finds its work done in the claim and reads nothing (see `diskferry.importer.engine`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Claim
from diskferry.control.reconcilers.disks.clonesources import CloneSources
from diskferry.control.reconcilers.disks.uploads import (
    UploadPolicy,
    drop_upload_route,
    refused_upload,
    renew_expired_token,
    start_upload,
    upload_urls,
    waiting_for_user,
)
from diskferry.control.resources.model import Reason
from diskferry.control.resources.quantity import format_bytes
from diskferry.control.runtime.progress import progress_fields
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Running, Succeeded
from diskferry.disk.schemes import is_layout_reference
from diskferry.importer import ImportJob, ImportResult, UploadResult

log = logging.getLogger("diskferry.control")
_VIRTUAL_SIZE = re.compile(r"virtual size \((\d+) bytes\)")
SIZE_TOO_SMALL = Reason("SizeTooSmall")
IMPORT_FAILED = Reason("ImportFailed")
UPLOAD_STOPPED = Reason("UploadStopped")
AUTH_FILE = "auth.json"
CA_FILE = "ca.pem"
TOO_SMALL = (SIZE_TOO_SMALL, "TargetTooSmall")


@dataclass(frozen=True)
class Source:
    """What an import reads: a URL or a local file, with what checks it."""

    location: str
    checksum: str | None = None
    ca_bundle: bytes | None = None
    size: int | None = None
    uid: str | None = None
    namespace: str | None = None
    authfile: bytes | None = None
    insecure: bool = False
    upload: bool = False

    @property
    def local_file(self) -> bool:
        """Whether the source is the file of another object's claim (so it may be cloned)."""
        return self.uid is not None and not is_layout_reference(self.location)


@dataclass(frozen=True)
class Outcome:
    """Where the import is: running (with its status fields), done (its result) or failed."""

    running: bool
    fields: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    reason: str | None = None
    message: str | None = None
    upload_urls: dict[str, str] | None = None

    @property
    def waiting_for_upload(self) -> bool:
        """Whether an upload server runs and no upload has begun."""
        return self.running and self.upload_urls is not None

    @property
    def failed(self) -> bool:
        """Whether the import ended without success."""
        return not self.running and self.reason is not None


MANIFEST_ADVICE = {
    "NotADiskImage": (
        "spec.dataSource must name a disk image (qcow2, raw, vmdk, vhd, vhdx, vdi or iso, "
        "compressed or not)"
    ),
    "Unauthorized": (
        "spec.dataSource.containerImage.imagePullSecret must name a Secret whose "
        ".dockerconfigjson holds credentials the registry takes"
    ),
}
"""What to change in the object's manifest when an import failed for a reason, where the
engine's own words would give a command-line option."""


def advised(failed: Failed) -> tuple[str, str]:
    """The reason and message of an import that failed, with what to change in the manifest
    when its reason calls for that."""
    advice = MANIFEST_ADVICE.get(failed.reason)
    return failed.reason, f"{failed.message}: {advice}" if advice else failed.message


def too_small_message(claim_size: int, message: str) -> str:
    """The refusal of an image larger than its claim, naming both sizes."""
    found = _VIRTUAL_SIZE.search(message)
    image = f"the image's virtual size ({found[1]} bytes)" if found else "the image"
    return (
        f"the claim's size, {format_bytes(claim_size)} ({claim_size} bytes), is smaller than "
        f"{image}"
    )


def source_files(source: Source) -> tuple[dict[str, Any], list[JobFile]]:
    """The fields of an import job that reach `source` (its CA bundle, registry credentials,
    plain HTTP to a registry on loopback), and the files they name."""
    fields: dict[str, Any] = {}
    files: list[JobFile] = []
    if source.ca_bundle:
        files.append(JobFile(CA_FILE, source.ca_bundle))
        fields["ca_bundle"] = CA_FILE
    if source.authfile:
        files.append(JobFile(AUTH_FILE, source.authfile, credential=True))
        fields["authfile"] = AUTH_FILE
    if source.insecure:
        fields["insecure"] = True
    return fields, files


class SourceUnavailableError(DiskferryError):
    """A source this runtime cannot serve or read."""

    reason = "DataSourceUnavailable"


class Imports:
    """Starts import jobs through `runner` and reads their outcome; upload servers get their
    certificates from `certs` and their external URL through `proxy`. With `served_claims`, a
    source that is another claim is read over NBD from a worker serving it beside its claim
    (see `clonesources`), as in a cluster, where the two claims may be on different nodes."""

    def __init__(
        self,
        runner: Runner,
        certs: ServerCerts | None = None,
        proxy: ExportProxy | None = None,
        *,
        served_claims: bool = False,
    ) -> None:
        self.runner = runner
        self.jobs = Jobs(runner)
        self.certs = certs
        self.proxy = proxy
        self.sources = CloneSources(runner, certs) if served_claims and certs else None
        self.served_claims = served_claims

    def started(self, job_id: str) -> bool:
        """Whether the job was started and not purged yet."""
        return self.runner.state(job_id) is not None

    def step(
        self,
        job_id: str,
        claim: Claim,
        source: Source,
        size: int | None,
        upload: UploadPolicy | None = None,
    ) -> Outcome:
        """Start the job if it was not, else tell how it is going; an upload source's token
        is renewed by `upload` once expired."""
        upload = upload or UploadPolicy()
        polled = self.jobs.poll(job_id, UploadResult if source.upload else ImportResult)
        if polled is None and self.served_claims and source.local_file:
            return self._clone(job_id, claim, source, size)
        if polled is None:
            self._start(job_id, claim, source, size, upload)
            return Outcome(True, progress_fields({}), upload_urls={} if source.upload else None)
        if isinstance(polled, Running):
            progress = polled.progress
            fields = progress_fields(progress) if progress else None
            if source.upload and renew_expired_token(self.runner, job_id, upload.token_ttl):
                log.info("job %s: its upload token expired and was renewed", job_id)
            refused = refused_upload(progress) if source.upload else None
            if refused is not None:
                return Outcome(False, reason=refused[0], message=refused[1])
            if source.upload and waiting_for_user(progress):
                urls = upload_urls(self.runner, job_id, claim.namespace, progress, self.proxy)
                return Outcome(True, progress_fields({}), upload_urls=urls)
            return Outcome(True, fields)
        if isinstance(polled, Succeeded):
            done = polled.result
            if isinstance(done, UploadResult) and not done.uploaded:
                message = "the upload server ended before any upload was in"
                return Outcome(False, reason=UPLOAD_STOPPED, message=message)
            imported = done.uploaded if isinstance(done, UploadResult) else done.to_json()
            return Outcome(False, result={"ok": True, **(imported or {})})
        reason, message = advised(polled)
        # a file claim's TargetTooSmall is the filesystem's free space, not the claim's size
        if size is not None and (reason == SIZE_TOO_SMALL or (claim.block and reason in TOO_SMALL)):
            message = too_small_message(size, message)
        return Outcome(False, reason=reason, message=message)

    def _clone(self, job_id: str, claim: Claim, source: Source, size: int | None) -> Outcome:
        """Start the import of the claim `source` once a worker beside it serves it, or say
        why it cannot be read."""
        if self.sources is None:
            raise SourceUnavailableError("this daemon has no CA to serve a clone's source with")
        served = self.sources.reach(
            job_id,
            source.location,
            source.namespace or claim.namespace,
            (claim.namespace, claim.name),
        )
        if isinstance(served, Failed):
            message = f"the source could not be served: {served.message}"
            return Outcome(False, reason=served.reason, message=message)
        if served is not None:
            job = ImportJob(
                source=served.url, target=claim.path, format="raw", force=True, size=size
            )
            self.jobs.start(job_id, job, served.files)
        return Outcome(True, progress_fields({}))

    def _start(
        self, job_id: str, claim: Claim, source: Source, size: int | None, upload: UploadPolicy
    ) -> None:
        if source.upload:
            if self.certs is None:
                raise SourceUnavailableError("this daemon has no CA to serve uploads with")
            start_upload(
                self.runner,
                self.certs,
                job_id,
                claim,
                size,
                upload.token_ttl,
                source.checksum,
                self.proxy,
            )
            return
        # the claim's volume is this object's own: the import fills it, made or left before
        fields, files = source_files(source)
        job = ImportJob(
            source=source.location,
            target=claim.path,
            format="raw",
            force=True,
            size=size,
            checksum=source.checksum,
            **fields,
        )
        self.jobs.start(job_id, job, files)

    def _unserve(self, job_id: str) -> bool:
        """Stop and remove the worker serving the job's source, if it has one; False while it
        still runs."""
        return self.sources is None or self.sources.stop(job_id)

    def finish(self, job_id: str, tag: str, keep: bool) -> bool:
        """Log the ended job's last lines tagged with `tag`, then settle it (see `settle`)."""
        drop_upload_route(self.proxy, job_id)
        unserved = self._unserve(job_id)
        return self.jobs.settle(job_id, tag, keep) and unserved

    def settle(self, job_id: str, keep: bool) -> bool:
        """Remove the ended job's files, or keep them under jobs/failed/ when `keep`, and the
        worker serving its source; False while either still runs (it is cancelled then)."""
        drop_upload_route(self.proxy, job_id)
        unserved = self._unserve(job_id)
        return self.runner.purge(job_id, keep_scratch=keep) and unserved

    def stop(self, job_id: str) -> bool:
        """Stop the job and remove its files, kept ones and its log too, and the worker serving
        its source; False while either still runs."""
        drop_upload_route(self.proxy, job_id)
        unserved = self._unserve(job_id)
        return self.jobs.stop(job_id) and unserved
