"""`python -m diskferry.importer.worker JOB.json`: one import, one push into an image store, one
upload server, one probe of a source's size, one volume job (blank, grow, reflink), or a
volume served over NBD for a clone (serve), as a child process or Pod."""

from __future__ import annotations

from typing import Any

from diskferry.importer.engine import run_import
from diskferry.importer.image_push import ImagePushJob, push_image, stored_format
from diskferry.importer.job import ImportJob
from diskferry.importer.probe import probe_size
from diskferry.importer.probe_job import ProbeJob
from diskferry.importer.serve_job import ServeJob
from diskferry.importer.upload_job import UploadJob
from diskferry.importer.upload_service import serve_upload
from diskferry.importer.volume_job import BlankJob, GrowJob, ReflinkJob
from diskferry.worker.runtime import JobContext, JobKind, run_worker


def run(job: ImportJob, ctx: JobContext) -> dict[str, Any]:
    """Run the job's import and return its result as JSON values."""
    return run_import(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def run_push(job: ImagePushJob, ctx: JobContext) -> dict[str, Any]:
    """Import the job's source, store it as a containerDisk, and return what was stored."""
    job = job.model_copy(update={"format": stored_format(job, job.store_format)})
    return push_image(job, job.reference, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def run_upload(job: UploadJob, ctx: JobContext) -> dict[str, Any]:
    """Serve the job's upload and return its result as JSON values."""
    return serve_upload(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def run_probe(job: ProbeJob, ctx: JobContext) -> dict[str, Any]:
    """Tell the format and virtual size of the job's source, from its head."""
    return probe_size(job).to_json()


def run_serve(job: ServeJob, ctx: JobContext) -> dict[str, Any]:
    """Serve the job's volume over NBD until stopped and return where it listened."""
    from diskferry.importer.serve import serve_volume

    return serve_volume(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def run_blank(job: BlankJob, ctx: JobContext) -> dict[str, Any]:
    """Make the job's target blank and return its size."""
    from diskferry.importer.volume_ops import blank

    return blank(job, ctx.progress).to_json()


def run_grow(job: GrowJob, ctx: JobContext) -> dict[str, Any]:
    """Grow the job's target and return its size."""
    from diskferry.importer.volume_ops import grow

    return grow(job, ctx.progress).to_json()


def run_reflink(job: ReflinkJob, ctx: JobContext) -> dict[str, Any]:
    """Clone the job's source into its target at an instant and return whether it could."""
    from diskferry.importer.volume_ops import reflink

    return reflink(job, ctx.progress).to_json()


if __name__ == "__main__":
    run_worker(
        {
            "import": JobKind(ImportJob, run),
            "push": JobKind(ImagePushJob, run_push),
            "upload": JobKind(UploadJob, run_upload),
            "probe": JobKind(ProbeJob, run_probe),
            "serve": JobKind(ServeJob, run_serve),
            "blank": JobKind(BlankJob, run_blank),
            "grow": JobKind(GrowJob, run_grow),
            "reflink": JobKind(ReflinkJob, run_reflink),
        },
        default="import",
    )
