"""The proxy's routes: which export server serves each namespace/name (`RouteSource`), as a
routes file says, reloaded on change (`RoutesFile`); where to ask whether an export whose
server's name resolves to nothing exists (`Presence`); and the TLS contexts that verify each
server against its route's CA (`ClientContexts`)."""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from diskferry.export.errors import RoutesError
from diskferry.serving.watch import FileWatch
from diskferry.serving.yaml_file import read_yaml_model

log = logging.getLogger(__name__)


class Route(BaseModel):
    """One export: where its server is, the CA that verifies it, and whether it is ready; with
    `unixSocket`, the proxy reaches the server in plain HTTP on that socket of this host
    instead of over TLS at `url`. With `refusedWhileStarting`, a server that refuses the
    connection is one not ready yet (503), not one gone wrong (502): where `url` names a server
    before it listens, as a Service names its Pod."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    namespace: str
    name: str
    url: str
    ca_file: str | None = Field(None, alias="caFile")
    ready: bool = True
    unix_socket: str | None = Field(None, alias="unixSocket")
    refused_while_starting: bool = Field(False, alias="refusedWhileStarting")


class RoutesDocument(BaseModel):
    """The whole routes file."""

    model_config = ConfigDict(extra="forbid")

    exports: list[Route] = []


def load_routes(path: str | os.PathLike[str]) -> dict[tuple[str, str], Route]:
    """The routes in `path` by (namespace, name); a missing file has none."""
    p = Path(path)
    if not p.exists():
        return {}
    doc = read_yaml_model(p, RoutesDocument, RoutesError, "routes")
    return {(r.namespace, r.name): r for r in doc.exports}


@dataclass(frozen=True)
class Presence:
    """Where to ask whether an export exists while its server has no address: the URL of an
    object of the cluster's API (200: the export exists, 404: it does not), and the headers and
    TLS context to ask with."""

    url: str
    headers: dict[str, str]
    context: ssl.SSLContext


class RouteSource(Protocol):
    """Where the proxy finds each export's server."""

    def get(self, namespace: str, name: str) -> Route | None:
        """The route of one export, None for an export it knows not."""

    def unix_sockets(self) -> set[str]:
        """The Unix sockets the routes name."""

    def client_context(self, route: Route) -> ssl.SSLContext:
        """The TLS context that verifies the route's server against its CA."""

    def presence(self, route: Route) -> Presence | None:
        """Where to ask whether the export of `route`, whose server's name resolves to nothing,
        exists all the same; None where nothing can be asked (OSError when its credentials
        cannot be read)."""


class ClientContexts:
    """TLS client contexts, one per CA file, made again when the file changes."""

    def __init__(self) -> None:
        self._contexts: dict[str, tuple[FileWatch, ssl.SSLContext]] = {}

    def get(self, ca_file: str | None) -> ssl.SSLContext:
        """The context that verifies servers against `ca_file` (the system's CAs without one)."""
        key = ca_file or ""
        cached = self._contexts.get(key)
        if cached is not None and not cached[0].changed():
            return cached[1]
        watch = FileWatch([key] if key else [])
        watch.changed()
        ctx = ssl.create_default_context(cafile=ca_file)
        self._contexts[key] = (watch, ctx)
        return ctx


class RoutesFile:
    """The routes, re-read when the file changes; a bad file keeps the previous routes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise RoutesError(f"the routes file {self.path} does not exist")
        self._watch = FileWatch([self.path])
        self._watch.changed()
        self._routes = load_routes(self.path)
        self._contexts = ClientContexts()

    def get(self, namespace: str, name: str) -> Route | None:
        """The route of one export, as the file says now."""
        if self._watch.changed():
            try:
                self._routes = load_routes(self.path)
            except RoutesError as e:
                log.warning("keeping the previous routes: %s", e)
        return self._routes.get((namespace, name))

    def unix_sockets(self) -> set[str]:
        """The Unix sockets the routes name, as the file said when last read."""
        return {r.unix_socket for r in self._routes.values() if r.unix_socket is not None}

    def client_context(self, route: Route) -> ssl.SSLContext:
        """The TLS context that verifies the route's server against its CA, cached per CA file."""
        return self._contexts.get(route.ca_file)

    def presence(self, route: Route) -> Presence | None:
        """None: a routes file names every export it routes, and no name of it is looked up."""
        return None
