"""The API's errors, each a Kubernetes `Status` with its HTTP code and reason."""

from __future__ import annotations

from typing import Any

from diskferry.base.errors import DiskferryError


class ApiError(DiskferryError):
    """An error the API answers with: an HTTP code, a Status reason, and details."""

    code = 500
    reason = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        kind: str | None = None,
        name: str | None = None,
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.causes = causes or []

    def to_status(self) -> dict[str, Any]:
        """The error as a `meta.k8s.io/v1` Status object."""
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            status["details"] = details
        return status


class BadRequestError(ApiError):
    """The request itself is malformed."""

    code = 400
    reason = "BadRequest"


class ForbiddenError(ApiError):
    """The request is understood but not allowed, such as deleting the default namespace."""

    code = 403
    reason = "Forbidden"


class NotFoundError(ApiError):
    """No object of that kind and name."""

    code = 404
    reason = "NotFound"


class MethodNotAllowedError(ApiError):
    """The path exists but does not take that method."""

    code = 405
    reason = "MethodNotAllowed"


class AlreadyExistsError(ApiError):
    """An object of that kind and name exists already."""

    code = 409
    reason = "AlreadyExists"


class ConflictError(ApiError):
    """The update was made against a resourceVersion that is no longer current."""

    code = 409
    reason = "Conflict"


class GoneError(ApiError):
    """A watch asked to start from a resourceVersion older than the store keeps."""

    code = 410
    reason = "Expired"


class UnsupportedMediaTypeError(ApiError):
    """The body's content type is not one the API takes for that method."""

    code = 415
    reason = "UnsupportedMediaType"


class InvalidError(ApiError):
    """The object is not valid: each cause names the field's path."""

    code = 422
    reason = "Invalid"


class RequestEntityTooLargeError(ApiError):
    """The request's body, or the object it would store, is larger than the server takes."""

    code = 413
    reason = "RequestEntityTooLarge"


class RequestTimeoutError(ApiError):
    """The client was too slow to send its request; the connection closes after the answer."""

    code = 408
    reason = "Timeout"


class TooManyRequestsError(ApiError):
    """The server takes no more such requests now; the client may try again after a while."""

    code = 429
    reason = "TooManyRequests"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def to_status(self) -> dict[str, Any]:
        """The Status, with the seconds to wait before trying again."""
        status = super().to_status()
        status.setdefault("details", {})["retryAfterSeconds"] = self.retry_after
        return status
