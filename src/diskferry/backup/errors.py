"""Typed errors of the backup repository."""

from diskferry.base.errors import DiskferryError


class RepositoryError(DiskferryError):
    """The repository cannot be used as asked."""

    reason = "RepositoryError"


class RepositoryNotFoundError(RepositoryError):
    """No repository exists at the URL."""

    reason = "RepositoryNotFound"


class RepositoryExistsError(RepositoryError):
    """A repository already exists where one was to be made."""

    reason = "RepositoryExists"


class NotEmptyError(RepositoryError):
    """A repository was to be made where other things are."""

    reason = "NotEmpty"


class TamperingError(RepositoryError):
    """The repository is not what its keys vouch for: a config that fails its MAC, a key file of
    another kind than the config says, encryption turned off."""

    reason = "Tampered"


class PasswordError(RepositoryError):
    """The password is missing or does not open the repository."""

    reason = "WrongPassword"


class CorruptObjectError(RepositoryError):
    """An object of the repository failed to open or to verify."""

    reason = "CorruptObject"

    def __init__(self, message: str, *, objects: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.objects = objects


class ForeignObjectError(CorruptObjectError):
    """The repository holds an object under a name it never writes."""

    reason = "ForeignObject"


class KdfBoundsError(CorruptObjectError):
    """A key file asks for a key derivation past the bounds of any diskferry makes; it is refused
    before anything is derived."""

    reason = "KdfOutOfBounds"


class SnapshotNotFoundError(RepositoryError):
    """No snapshot has the given id."""

    reason = "SnapshotNotFound"


class LockedError(RepositoryError):
    """Someone else holds a conflicting lock on the repository."""

    reason = "Locked"


class LockLostError(RepositoryError):
    """A lock the operation held was lost; it stopped before writing more to the repository."""

    reason = "LockLost"


class CheckFailedError(RepositoryError):
    """The repository check found damage."""

    reason = "CheckFailed"


class PointTokenError(DiskferryError):
    """The token of a backup point to read cannot be read."""

    reason = "PointTokenUnreadable"
