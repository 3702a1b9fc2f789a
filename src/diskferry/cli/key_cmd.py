"""`diskferry repo key list|add|remove|passwd`: the passwords that open a repository."""

from __future__ import annotations

from typing import Annotated

import typer

from diskferry.cli.common import note, print_json
from diskferry.cli.help_text import PlainTyper
from diskferry.cli.password_prompt import new_password
from diskferry.cli.repo_cmd import (
    EndpointOpt,
    JsonOpt,
    PasswordFileOpt,
    RegionOpt,
    RepoOpt,
    open_access,
)

key_app = PlainTyper(
    help="""List, add and remove the passwords (key files) that open a repository.

Each password is a key file wrapping the same keys, as restic's `key` has them. The new
password of `add` and `passwd` comes from `--new-password-file`, or is asked twice on a
terminal.""",
    no_args_is_help=True,
)

NewPasswordFileOpt = Annotated[
    str | None,
    typer.Option(
        "--new-password-file",
        help="File whose first line is the new password (else it is asked twice).",
    ),
]
KeyIdArg = Annotated[str, typer.Argument(help="The key's id, or a prefix of it that is unique.")]


@key_app.command("list")
def list_command(
    repo: RepoOpt,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List the key files; `*` marks the one the password given opens.

    Each with its id, user, host and creation time.
    """
    from diskferry.backup import list_keys

    with open_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        keys = list_keys(opened)
    if json_out:
        print_json([k.to_json() for k in keys])
        return
    print(f" {'ID':9} {'USER':12} {'HOST':24} CREATED")
    for k in keys:
        mark = "*" if k.current else " "
        print(f"{mark}{k.id[:8]:9} {k.user or '-':12.12} {k.host or '-':24.24} {k.created or '-'}")


@key_app.command("add")
def add_command(
    repo: RepoOpt,
    new_password_file: NewPasswordFileOpt = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
) -> None:
    """Add a password: a new key file that opens the repository too."""
    from diskferry.backup import add_key

    with open_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        key_id = add_key(opened, new_password(new_password_file))
    note(f"added key {key_id[:8]}")


@key_app.command("remove")
def remove_command(
    key_id: KeyIdArg,
    repo: RepoOpt,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
) -> None:
    """Remove a key file (not the one the password given opens).

    ID is the key's id or a unique prefix of it; the key in use is never removed.
    """
    from diskferry.backup import remove_key

    with open_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        removed = remove_key(opened, key_id)
    note(f"removed key {removed[:8]}")


@key_app.command("passwd")
def passwd_command(
    repo: RepoOpt,
    new_password_file: NewPasswordFileOpt = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
) -> None:
    """Change the password: a key file for the new one replaces the one in use."""
    from diskferry.backup import change_password

    with open_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        key_id = change_password(opened, new_password(new_password_file))
    note(f"changed the password; the new key is {key_id[:8]}")
