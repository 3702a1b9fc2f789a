"""Typed errors of object storage: a missing object or bucket, refused credentials."""

from diskferry.disk.errors import DiskferryError


class ObjectStoreError(DiskferryError):
    """The object store could not be reached or refused an operation."""

    reason = "ObjectStoreError"


class ObjectNotFoundError(ObjectStoreError):
    """The named object does not exist."""

    reason = "ObjectNotFound"


class BucketNotFoundError(ObjectStoreError):
    """The S3 bucket does not exist."""

    reason = "BucketNotFound"


class CredentialsRefusedError(ObjectStoreError):
    """The object store refused the credentials."""

    reason = "CredentialsRefused"


class ForeignEntryError(ObjectStoreError):
    """A store's directory holds what no store writes at `path`: a symbolic link (never
    followed), a FIFO, a device or a socket."""

    reason = "ForeignEntry"

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path
