"""Object storage: one small API over a directory or an S3 bucket and prefix.

Each name of the face is loaded when first used (diskferry.base.faces).
"""

from diskferry.base.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "backend": ("ObjectInfo",),
        "credentials": ("parse_credentials", "read_credentials"),
        "errors": (
            "BucketNotFoundError",
            "CredentialsRefusedError",
            "ForeignEntryError",
            "ObjectNotFoundError",
            "ObjectStoreError",
            "ObjectTooLargeError",
        ),
        "s3_options": ("S3Options",),
        "store": ("ObjectStore",),
    },
)
