"""`image push`: import any source into a scratch image, then store it as a containerDisk."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob, registry_options
from diskferry.importer.probe import probe_image
from diskferry.qemu import img
from diskferry.registry.client import RegistryClient
from diskferry.registry.containerdisk import DiskFile, push_container_disk
from diskferry.registry.reference import parse_reference
from diskferry.worker.reporter import QUIET, Reporter

_KEPT_FORMATS = ("raw", "qcow2")


class ImagePushResult(BaseModel):
    """What a push stored."""

    model_config = ConfigDict(populate_by_name=True)

    reference: str
    digest: str
    format: str
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
    found = probe_image(
        job.source, ca_bundle=job.ca_bundle, headers=job.headers, registry=registry_options(job)
    )["format"]
    return found if found in _KEPT_FORMATS else "qcow2"


def push_image(
    job: ImportJob,
    reference: str,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> ImagePushResult:
    """Import `job.source` (into `job.format`) and push it to `reference` as a containerDisk.

    `job.target` is ignored: the image lands in a scratch directory, removed after.
    """
    ref = parse_reference(reference)
    client = RegistryClient.for_reference(ref, registry_options(job))
    scratch = tempfile.mkdtemp(prefix="diskferry-push-")
    try:
        name = f"disk.{'img' if job.format == 'raw' else 'qcow2'}"
        path = f"{scratch}/{name}"
        run_import(job.model_copy(update={"target": path}), progress, cancel, reporter)
        info = img.info(path, job.format)
        pushed = push_container_disk(
            client, ref, DiskFile(path, name, job.format, info.virtual_size), Progress()
        )
        stored = os.path.getsize(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ImagePushResult(
        reference=str(pushed.reference),
        digest=pushed.digest,
        format=job.format,
        stored_size=stored,
        unpacked_size=info.virtual_size,
        layer_digest=pushed.layer_digest,
        layer_size=pushed.layer_size,
    )
