"""The embedded host as the one Node of its cluster: its name, and the labels a Kubernetes node
carries, which node selectors and node affinity are matched against."""

from __future__ import annotations

import platform
import socket

ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


def node_name() -> str:
    """The host's name, as its Node would be named."""
    return socket.gethostname().lower()


def node_labels() -> dict[str, str]:
    """The well-known labels of the host's Node."""
    machine = platform.machine()
    return {
        "kubernetes.io/hostname": node_name(),
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": ARCHITECTURES.get(machine, machine),
    }


def node_fields() -> dict[str, str]:
    """The fields of the host's Node a node selector term may name."""
    return {"metadata.name": node_name()}
