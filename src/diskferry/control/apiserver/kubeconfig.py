"""The kubeconfig that points kubectl at the daemon: its URL, CA and token, context `diskferry`."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from diskferry.control.apiserver.pki import write_private

CONTEXT = "diskferry"


def kubeconfig(server: str, ca_pem: bytes, token: str) -> dict:
    """A kubeconfig with one cluster, user and context, all named `diskferry`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str) -> Path:
    """Write the kubeconfig to `path` (mode 0600), replacing what was there at once."""
    text = yaml.safe_dump(kubeconfig(server, ca_pem, token), sort_keys=False)
    write_private(path, text.encode())
    return path
