"""The repository password asked on the terminal when no file or environment variable gives it."""

from __future__ import annotations

import getpass
import os
import sys

from diskferry.backup import PasswordError

PASSWORD_ENV = "DISKFERRY_PASSWORD"


def ask_password(prompt: str, twice: bool) -> str:
    """A password typed on the terminal (`twice`: typed again, and both the same)."""
    first = getpass.getpass(prompt)
    if twice and getpass.getpass("enter the password again: ") != first:
        raise PasswordError("the passwords do not match")
    if not first:
        raise PasswordError("the password is empty")
    return first


def prompt_if_needed(password_file: str | None, *, twice: bool = False) -> None:
    """Ask the password on a terminal when neither --password-file nor $DISKFERRY_PASSWORD
    gives it, and hand it on as $DISKFERRY_PASSWORD, as if it had been set."""
    if password_file or os.environ.get(PASSWORD_ENV) or not sys.stdin.isatty():
        return
    prompt = "enter the password for the new repository: " if twice else "enter the password: "
    os.environ[PASSWORD_ENV] = ask_password(prompt, twice)


def new_password(password_file: str | None) -> str:
    """The new password of `repo key add|passwd`: from --new-password-file, or typed twice."""
    if password_file:
        from diskferry.backup import read_password

        found = read_password(password_file)
        assert found is not None  # a password file gives a password or raises
        return found
    if not sys.stdin.isatty():
        raise PasswordError("give the new password with --new-password-file")
    return ask_password("enter the new password: ", twice=True)
