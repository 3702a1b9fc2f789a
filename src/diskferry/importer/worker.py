"""`python -m diskferry.importer.worker JOB.json`: one import, one push into an image store, or
one upload server, as a child process or Pod."""

from __future__ import annotations

from typing import Any

from diskferry.importer.engine import run_import
from diskferry.importer.image_push import ImagePushJob, push_image, stored_format
from diskferry.importer.job import ImportJob
from diskferry.importer.upload_job import UploadJob
from diskferry.importer.upload_service import serve_upload
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


if __name__ == "__main__":
    run_worker(
        {
            "import": JobKind(ImportJob, run),
            "push": JobKind(ImagePushJob, run_push),
            "upload": JobKind(UploadJob, run_upload),
        },
        default="import",
    )
