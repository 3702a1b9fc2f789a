"""An export's token: the Secret `spec.tokenSecretRef` names, or one made for it (the object's
`token_secret_name`, `export-token-<name>` for an export, owned by the object so that it goes
with it). A VirtualMachineExport or a pulled VirtualMachineBackup has one."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from diskferry.control.errors import AlreadyExistsError
from diskferry.control.resources.core import Secret
from diskferry.control.resources.model import ObjectMeta, OwnerReference, Reason
from diskferry.control.resources.vmbackup import VirtualMachineBackup
from diskferry.control.resources.vmexport import VirtualMachineExport
from diskferry.control.runtime.client import Client

TOKEN_KEY = "token"
TOKEN_NOT_READY = Reason("TokenNotReady")
TOKEN_BYTES = 32
Served = VirtualMachineExport | VirtualMachineBackup


@dataclass(frozen=True)
class Token:
    """The token and the Secret it is kept in."""

    secret_name: str
    value: bytes


def _generated(export: Served) -> Secret:
    token = secrets.token_urlsafe(TOKEN_BYTES).encode()
    owner = OwnerReference(
        apiVersion=export.api_version,
        kind=export.kind,
        name=export.metadata.name or "",
        uid=export.metadata.uid or "",
        controller=True,
        blockOwnerDeletion=True,
    )
    return Secret(
        metadata=ObjectMeta(
            name=export.token_secret_name,
            namespace=export.metadata.namespace,
            ownerReferences=[owner],
        ),
        data={TOKEN_KEY: base64.b64encode(token).decode()},
    )


def export_token(client: Client, export: Served) -> Token | str:
    """The export's token (its Secret made when the spec names none), or why there is none."""
    name = export.token_secret_name
    namespace = export.metadata.namespace
    secret = client.get(Secret, namespace, name)
    if secret is None:
        if export.spec.token_secret_ref:
            return f"the token Secret {name} does not exist"
        try:
            secret = client.create(_generated(export))
        except AlreadyExistsError:
            secret = client.get(Secret, namespace, name)
            if secret is None:
                return f"the token Secret {name} is being replaced"
    value = (secret.value(TOKEN_KEY) or b"").strip()
    if not value:
        return f"the Secret {name} holds no data.{TOKEN_KEY}"
    return Token(name, value)
