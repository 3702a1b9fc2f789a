"""Typed errors of the registry client: one clear line for each code a registry answers."""

from __future__ import annotations

from diskferry.base.errors import DiskferryError


class RegistryError(DiskferryError):
    """The registry could not be reached, or answered with an error."""

    reason = "RegistryError"

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        reason: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, reason=reason, hint=hint)
        self.status = status


class BadReferenceError(RegistryError):
    """An image reference that is not docker://HOST[:PORT]/NAME[:TAG|@DIGEST]."""

    reason = "BadReference"


class UnauthorizedError(RegistryError):
    """The registry wants credentials, or refused the ones given."""

    reason = "Unauthorized"


class DeniedError(RegistryError):
    """The credentials are valid but may not do this."""

    reason = "Denied"


class ManifestUnknownError(RegistryError):
    """No image by that name, tag or digest."""

    reason = "ManifestUnknown"


class BlobUnknownError(RegistryError):
    """The registry holds no blob of that digest."""

    reason = "BlobUnknown"


class TooManyRequestsError(RegistryError):
    """The registry is rate-limiting this client."""

    reason = "TooManyRequests"


class DigestMismatchError(RegistryError):
    """A blob or manifest read did not match its digest."""

    reason = "DigestMismatch"


class ContainerDiskError(RegistryError):
    """The image is not a containerDisk: no disk under disk/, or several."""

    reason = "NotAContainerDisk"


BY_CODE: dict[str, type[RegistryError]] = {
    "UNAUTHORIZED": UnauthorizedError,
    "DENIED": DeniedError,
    "MANIFEST_UNKNOWN": ManifestUnknownError,
    "NAME_UNKNOWN": ManifestUnknownError,
    "BLOB_UNKNOWN": BlobUnknownError,
    "TOOMANYREQUESTS": TooManyRequestsError,
}
BY_STATUS: dict[int, type[RegistryError]] = {
    401: UnauthorizedError,
    403: DeniedError,
    429: TooManyRequestsError,
}
