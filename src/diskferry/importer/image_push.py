"""`image push`: import any source into a scratch image, then store it as a containerDisk."""

from __future__ import annotations

import shutil
import tempfile
import threading
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob, registry_options
from diskferry.importer.probe import probe_job_source
from diskferry.qemu import img
from diskferry.registry.containerdisk_push import DiskFile, push_container_disk
from diskferry.registry.destination import open_destination
from diskferry.worker.reporter import QUIET, Reporter

_KEPT_FORMATS = ("raw", "qcow2")


class ImagePushJob(ImportJob):
    """What the worker's `push` kind runs: import `source`, store it as a containerDisk at
    `reference` (docker:// or oci:), in `storeFormat` or as `image push` chooses."""

    kind: Literal["push"] = "push"  # type: ignore[assignment]
    target: str = ""
    reference: str
    store_format: Literal["raw", "qcow2"] | None = Field(default=None, alias="storeFormat")


class ImagePushResult(BaseModel):
    """What a push stored."""

    model_config = ConfigDict(populate_by_name=True)

    reference: str
    digest: str
    format: str
    source_format: str = Field(alias="sourceFormat")
    stored_size: int = Field(alias="storedSize")
    unpacked_size: int = Field(alias="unpackedSize")
    layer_digest: str = Field(alias="layerDigest")
    layer_size: int = Field(alias="layerSize")

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)


def stored_format(job: ImportJob, wanted: Literal["raw", "qcow2"] | None) -> str:
    """The format to store: `wanted`, else the source's when raw or qcow2, else qcow2."""
    if wanted:
        return wanted
    found = probe_job_source(job)["format"]
    return found if found in _KEPT_FORMATS else "qcow2"


def push_image(
    job: ImportJob,
    reference: str,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> ImagePushResult:
    """Import `job.source` (as `job.format`), push it to `reference` (docker:// or oci:).

    `job.target` is ignored: the image lands in a scratch directory, removed after.
    """
    destination = open_destination(reference, registry_options(job))
    scratch = tempfile.mkdtemp(prefix="diskferry-push-")
    try:
        name = f"disk.{'img' if job.format == 'raw' else 'qcow2'}"
        path = f"{scratch}/{name}"
        imported = run_import(job.model_copy(update={"target": path}), progress, cancel, reporter)
        info = img.info(path, job.format)
        disk = DiskFile(path, name, job.format, info.virtual_size)
        pushed = push_container_disk(destination, disk, Progress())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ImagePushResult(
        reference=pushed.name,
        source_format=imported.source_format,
        digest=pushed.digest,
        format=job.format,
        stored_size=pushed.stored_size,
        unpacked_size=info.virtual_size,
        layer_digest=pushed.layer_digest,
        layer_size=pushed.layer_size,
    )
