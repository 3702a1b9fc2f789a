"""An export's token: the Secret `spec.tokenSecretRef` names, or one made for it
(`export-token-<name>`, owned by the export so that it goes with it)."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from diskferry.control.errors import AlreadyExistsError
from diskferry.control.model import ObjectMeta, OwnerReference
from diskferry.control.resources.core import Secret
from diskferry.control.resources.vmexport import VirtualMachineExport
from diskferry.control.runtime.client import Client

TOKEN_KEY = "token"
TOKEN_BYTES = 32


@dataclass(frozen=True)
class Token:
    """The token and the Secret it is kept in."""

    secret_name: str
    value: bytes


def _generated(export: VirtualMachineExport) -> Secret:
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


def export_token(client: Client, export: VirtualMachineExport) -> Token | str:
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
