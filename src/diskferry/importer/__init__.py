"""The import engine: brings a disk image from a file, URL or containerDisk into a volume.

Its face: the jobs (import, push into an image store, upload, probe of a source's size; blank,
grow and reflink of a volume; a volume served over NBD for a clone), their results and phases,
the functions that run them, and their errors; each loaded when first used
(diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "engine": ("ImageRefusedError", "run_import"),
        "image_push": ("ImagePushJob", "ImagePushResult", "push_image", "stored_format"),
        "job": ("ImportJob", "ImportPhase", "ImportResult"),
        "probe": ("probe_image",),
        "probe_job": ("ProbeJob", "ProbeResult", "SizeUnknownError"),
        "serve_job": ("ServeJob", "ServePhase", "ServeResult"),
        "source": ("SourceError",),
        "upload_client": ("UploadClientError", "upload_file"),
        "upload_job": ("UploadJob", "UploadPhase", "UploadResult"),
        "upload_service": ("serve_upload",),
        "volume_job": (
            "BlankJob",
            "GrowJob",
            "ReflinkJob",
            "ReflinkResult",
            "VolumePhase",
            "VolumeResult",
        ),
        "volume_ops": ("GuestNotFrozenError",),
    },
)
