"""Typed errors of object storage: a missing object or bucket, refused credentials, an object
longer than its reader takes."""

from diskferry.base.errors import DiskferryError


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


class ObjectTooLargeError(ObjectStoreError):
    """An object is longer than the limit of the whole read asked for it; none of it was read."""

    reason = "ObjectTooLarge"

    def __init__(self, url: str, path: str, *, size: int, limit: int) -> None:
        super().__init__(
            f"{url}: {path} is {size} bytes long, more than the {limit} bytes it may be; "
            "it was not read"
        )
        self.path = path
        self.size = size
        self.limit = limit
