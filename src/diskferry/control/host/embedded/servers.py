"""The embedded host's export servers (`host.servers`): each on 127.0.0.1 with a port of its
own, recorded on the object it serves, probed there; nothing more makes them reachable."""

from __future__ import annotations

from typing import TypeVar

from diskferry.control.host.servers import (
    PORT_ANNOTATION,
    ServerPlace,
    answers,
    loopback,
    recorded_port,
)
from diskferry.control.resources.model import Resource
from diskferry.control.runtime.client import Client
from diskferry.export import service_name

M = TypeVar("M", bound=Resource)


class LoopbackServers:
    """Places servers on this host's loopback, their ports recorded through `client`."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def service_name(self, obj: Resource) -> str:
        """The name KubeVirt would give the Service of the object's server (there is none)."""
        return service_name(obj.metadata.name or "")

    def place(self, obj: M, job_id: str) -> tuple[M, ServerPlace]:
        """The port recorded on the object while it is free, else a new one recorded."""
        obj, port = recorded_port(self.client, obj)
        return obj, loopback(port)

    def placed(self, obj: Resource) -> ServerPlace | None:
        """The recorded port's place; None once the annotation is gone."""
        recorded = obj.metadata.annotations.get(PORT_ANNOTATION)
        return None if recorded is None else loopback(int(recorded))

    def expose(self, obj: Resource, job_id: str) -> None:
        """Nothing: a server on this host is reached where it listens."""

    def answers(self, obj: Resource, job_id: str, place: ServerPlace, ca_pem: bytes) -> bool:
        """Whether the server answers on 127.0.0.1."""
        return answers(place.port, ca_pem)

    def unexpose(self, obj: Resource) -> None:
        """Nothing was made."""
