"""Where the repository password comes from: a password file, or $DISKFERRY_PASSWORD."""

from __future__ import annotations

import os

from diskferry.backup.errors import PasswordError


def read_password(password_file: str | None = None) -> str | None:
    """The password from `password_file` (first line), else $DISKFERRY_PASSWORD, else None."""
    if password_file:
        try:
            with open(password_file) as f:
                line = f.readline().rstrip("\r\n")
        except OSError as e:
            raise PasswordError(f"cannot read password file {password_file}: {e.strerror}") from e
        if not line:
            raise PasswordError(f"password file {password_file} is empty")
        return line
    return os.environ.get("DISKFERRY_PASSWORD") or None
