"""The key derivation of `backup` and `restore` begun from the raw command line, before it
is parsed: for a directory repository whose password is in $DISKFERRY_PASSWORD or in the
regular file that `--password-file` names (a pipe is left for the command to read once).
What the parsed command then opens takes the derived key only where the repository and
password are the same, so a misread line costs time only.
"""

from __future__ import annotations

import os

_COMMANDS = ("backup", "restore")


def _value(argv: list[str], option: str) -> str | None:
    """The value given to `option` (as `OPTION VALUE` or `OPTION=VALUE`), the last one wins."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg[len(option) + 1 :]
    return value


def begin_key_derivation(argv: list[str]) -> None:
    """Begin deriving the repository key that the command line `argv` is about to need."""
    if not argv or argv[0] not in _COMMANDS:
        return
    from diskferry.backup import PasswordError, derive_key_ahead, read_password

    repo = _value(argv, "--repo")
    if not repo or "://" in repo:
        return
    password_file = _value(argv, "--password-file")
    if password_file and not os.path.isfile(password_file):
        return  # a pipe is read once, by the command itself
    try:
        password = read_password(password_file)
    except PasswordError:
        return
    if password:
        derive_key_ahead(repo, password)
