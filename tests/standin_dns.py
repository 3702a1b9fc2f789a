"""The stand-in cluster's DNS, as its kubelet gives it to every Pod's container: a hosts file
(its /etc/hosts) naming each headless Service's ready Pods (running ones: the stand-in probes
no readiness), or with `publishNotReadyAddresses` every Pod it selects that has an IP and has
not ended, `<service>.<namespace>.svc` and `<service>.<namespace>.svc.cluster.local` to each
Pod IP, as CoreDNS answers for a headless Service; and a resolv.conf that names no server but
127.0.0.1, where none answers, so that a name the cluster does not know fails at once and no
lookup leaves loopback.

The hosts file is written again in place (the containers have it bind-mounted) whenever the
Services or the Pods they select change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

HOST_HOSTS = Path("/etc/hosts")
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
DOMAIN = "cluster.local"
Obj = dict[str, Any]


def _address(pod: Obj, not_ready: bool) -> str | None:
    """The Pod's IP while it runs and is not being deleted; with `not_ready`, while it has one
    and has not ended."""
    status = pod.get("status") or {}
    if not_ready:
        return None if status.get("phase") in ("Succeeded", "Failed") else status.get("podIP")
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    return status.get("podIP")


def service_lines(services: list[Obj], pods: list[Obj]) -> list[str]:
    """The hosts lines of every headless Service with a selector: one per Pod it selects and
    names."""
    lines = []
    for service in services:
        spec, meta = service.get("spec") or {}, service["metadata"]
        selector = spec.get("selector") or {}
        if spec.get("clusterIP") != "None" or not selector:
            continue
        fqdn = f"{meta['name']}.{meta['namespace']}.svc"
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            address = _address(pod, bool(spec.get("publishNotReadyAddresses")))
            same = pod["metadata"]["namespace"] == meta["namespace"]
            if same and address and selector.items() <= labels.items():
                lines.append(f"{address}\t{fqdn} {fqdn}.{DOMAIN}")
    return sorted(lines)


class ClusterDns:
    """The hosts file and resolv.conf under `root`, which every Pod's container mounts."""

    def __init__(self, root: Path) -> None:
        self.hosts = root / "hosts"
        self.resolv = root / "resolv.conf"
        self._base = HOST_HOSTS.read_text() if HOST_HOSTS.exists() else "127.0.0.1\tlocalhost\n"
        self._written: str | None = None
        self.resolv.write_text(RESOLV_CONF)
        self.resolv.chmod(0o644)
        self.sync([], [])

    def sync(self, services: list[Obj], pods: list[Obj]) -> None:
        """Write the hosts file again when what it names changed."""
        text = (
            self._base.rstrip("\n")
            + "\n"
            + "".join(f"{line}\n" for line in service_lines(services, pods))
        )
        if text == self._written:
            return
        fd = os.open(self.hosts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        self._written = text

    def flags(self) -> list[str]:
        """podman's flags that give a container the cluster's names."""
        return ["-v", f"{self.hosts}:/etc/hosts:ro", "-v", f"{self.resolv}:/etc/resolv.conf:ro"]
