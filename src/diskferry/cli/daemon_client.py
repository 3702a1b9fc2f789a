"""The daemon's API as the CLI reaches it: the kubeconfig found, HTTPS with its CA and token,
discovery of the kinds, errors as one line."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
import yaml

from diskferry.base import DiskferryError
from diskferry.serving import default_data_dir

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
MERGE_PATCH = "application/merge-patch+json"
START_HINT = "start it with `diskferry serve`"


class DaemonError(DiskferryError):
    """The API answered with an error: its Status message, reason and HTTP code."""

    def __init__(self, message: str, *, code: int, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.code = code


class DaemonUnreachableError(DiskferryError):
    """No daemon answers where the kubeconfig points, or there is no kubeconfig."""

    reason = "DaemonNotRunning"


def find_kubeconfig(kubeconfig: str | None, data_dir: str | None) -> Path:
    """The kubeconfig to use: `--kubeconfig`, else $KUBECONFIG, else the data directory's."""
    if kubeconfig:
        return Path(kubeconfig)
    if not data_dir:
        env = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        if env:
            return Path(env[0])
    return Path(data_dir or default_data_dir()) / "kubeconfig"


@dataclass(frozen=True)
class Endpoint:
    """Where the daemon listens, the CA that verifies it, the token it wants, the namespace."""

    server: str
    ca_pem: str | None = field(repr=False)
    token: str | None = field(repr=False)
    namespace: str = "default"


def _named(entries: list[dict[str, Any]] | None, name: str | None, what: str) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            return entry.get(what) or {}
    if entries and name is None:
        return entries[0].get(what) or {}
    return {}


def _file_or_data(section: dict[str, Any], key: str, base: Path) -> str | None:
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"]).decode()
    if section.get(key):
        return (base / section[key]).read_text()
    return None


def read_kubeconfig(path: Path) -> Endpoint:
    """The current context's server, CA, token and namespace in the kubeconfig at `path`."""
    if not path.exists():
        serve = f"diskferry serve --data-dir {path.parent}"
        raise DaemonUnreachableError(
            f"no daemon found: {path} does not exist; start one with `{serve}`, "
            "or give --kubeconfig"
        )
    try:
        config = yaml.safe_load(path.read_text()) or {}
        context = _named(config.get("contexts"), config.get("current-context"), "context")
        cluster = _named(config.get("clusters"), context.get("cluster"), "cluster")
        user = _named(config.get("users"), context.get("user"), "user")
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = (path.parent / user["tokenFile"]).read_text().strip()
        ca = _file_or_data(cluster, "certificate-authority", path.parent)
    except (OSError, yaml.YAMLError, AttributeError, ValueError) as e:
        raise DiskferryError(f"cannot read the kubeconfig {path}: {e}") from None
    if not cluster.get("server"):
        raise DiskferryError(f"the kubeconfig {path} names no server")
    return Endpoint(cluster["server"], ca, token, context.get("namespace") or "default")


@dataclass(frozen=True)
class ResourceType:
    """One kind the daemon serves, as discovery tells it."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """`group/version`, or the version alone for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`singular.group` as kubectl names a kind in its output (`secret` in the core group)."""
        return f"{self.singular}.{self.group}" if self.group else self.singular

    def ref(self, name: str) -> str:
        """`virtualdisk.diskferry.io/vd1`."""
        return f"{self.qualified}/{name}"

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        """The API path of the collection, or of one object or its subresource."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            prefix += f"/namespaces/{namespace}"
        parts = [prefix, self.plural, *(p for p in (name, sub) if p)]
        return "/".join(parts)

    def names(self) -> set[str]:
        """Every name a user may give the kind by."""
        base = {self.kind.lower(), self.plural, self.singular, *self.short_names}
        return base | {f"{n}.{self.group}" for n in base if self.group}


class DaemonClient:
    """Requests to the daemon's Kubernetes-shaped API."""

    def __init__(self, endpoint: Endpoint, *, timeout: float = 30) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._pool = urllib3.PoolManager(
            ca_cert_data=endpoint.ca_pem,
            cert_reqs="CERT_REQUIRED" if endpoint.server.startswith("https") else "CERT_NONE",
            retries=False,
        )
        self._types: list[ResourceType] | None = None
        self.warnings: list[str] = []

    def _headers(self, accept: str, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "diskferry"}
        if self.endpoint.token:
            headers["Authorization"] = f"Bearer {self.endpoint.token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        accept: str = "application/json",
        content_type: str | None = None,
        stream: bool = False,
        timeout: float | None = None,
    ) -> urllib3.BaseHTTPResponse:
        url = self.endpoint.server.rstrip("/") + path
        if params:
            url += "?" + urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        if data is not None and content_type is None:
            content_type = "application/json"
        read = timeout if stream else (timeout or self.timeout)
        try:
            response = self._pool.request(
                method,
                url,
                body=data,
                headers=self._headers(accept, content_type),
                preload_content=not stream,
                timeout=urllib3.Timeout(connect=5, read=read),
            )
        except urllib3.exceptions.SSLError as e:
            raise DaemonUnreachableError(f"{self.endpoint.server}: TLS failed: {e}") from None
        except urllib3.exceptions.ReadTimeoutError:
            raise DiskferryError(f"{self.endpoint.server} did not answer in time") from None
        except urllib3.exceptions.HTTPError as e:
            raise DaemonUnreachableError(
                f"the daemon at {self.endpoint.server} is not running ({_cause(e)}): {START_HINT}"
            ) from None
        if response.status >= 400:
            raise _api_error(response)
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """One request; the answer's JSON, or DaemonError with the Status message."""
        response = self._send(method, path, **kwargs)
        self.warnings = response.headers.getlist("Warning")
        return json.loads(response.data or b"{}")

    def text(self, path: str) -> str:
        """A text/plain resource (a log)."""
        return self._send("GET", path, accept="text/plain").data.decode(errors="replace")

    def watch(
        self, path: str, params: dict[str, str], *, timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """The watch events at `path`, until the server ends the stream.

        Raises TimeoutError when `timeout` seconds pass without a line.
        """
        response = self._send(
            "GET", path, params={**params, "watch": "true"}, stream=True, timeout=timeout
        )
        buffered = b""
        try:
            for chunk in response.stream(65536):
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except urllib3.exceptions.ReadTimeoutError:
            raise TimeoutError from None
        except urllib3.exceptions.ProtocolError as e:
            if isinstance(e.__context__, TimeoutError) or "timed out" in str(e):
                raise TimeoutError from None
            return
        finally:
            response.release_conn()

    def follow(
        self,
        path: str,
        resource_version: str,
        relist: Callable[[], str],
        *,
        deadline: float | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The watch events at `path` from `resource_version`, resumed when a stream ends.

        When the server no longer keeps that version (410), `relist` reads the state again
        and returns the version to go on from, and a `RELISTED` event says so. Raises
        TimeoutError once the monotonic `deadline` passes.
        """
        version = resource_version
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            params = {"resourceVersion": version, "allowWatchBookmarks": "true"}
            try:
                for event in self.watch(path, params, timeout=remaining):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise DaemonError(
                            obj.get("message", "the watch failed"),
                            code=obj.get("code", 500),
                            reason=obj.get("reason", "Failed"),
                        )
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        yield event
                    if deadline is not None and time.monotonic() >= deadline:
                        raise TimeoutError
            except DaemonError as e:
                if e.code != 410:
                    raise
                version = relist()
                yield {"type": "RELISTED", "object": None}
            time.sleep(0.1)

    def resource_types(self) -> list[ResourceType]:
        """Every kind the daemon serves, by discovery."""
        if self._types is None:
            lists = [self.request("GET", "/api/v1")]
            for group in self.request("GET", "/apis").get("groups", []):
                preferred = group.get("preferredVersion", {}).get("groupVersion")
                if preferred:
                    lists.append(self.request("GET", f"/apis/{preferred}"))
            self._types = [t for resources in lists for t in _types(resources)]
        return self._types

    def resource_type(self, name: str) -> ResourceType:
        """The kind a user names by kind, plural, singular or short name."""
        wanted = name.lower()
        for info in self.resource_types():
            if wanted in info.names():
                return info
        raise DiskferryError(f'the server doesn\'t have a resource type "{name}"')

    def type_of(self, api_version: str, kind: str) -> ResourceType:
        """The kind of a manifest by its apiVersion and kind."""
        for info in self.resource_types():
            if (info.api_version, info.kind) == (api_version, kind):
                return info
        raise DiskferryError(f'no matches for kind "{kind}" in version "{api_version}"')


def _types(resources: dict[str, Any]) -> Iterator[ResourceType]:
    group, _, version = resources.get("groupVersion", "").rpartition("/")
    for entry in resources.get("resources", []):
        if "/" in entry["name"]:
            continue
        yield ResourceType(
            group=group,
            version=version,
            kind=entry["kind"],
            plural=entry["name"],
            singular=entry.get("singularName") or entry["kind"].lower(),
            namespaced=bool(entry.get("namespaced")),
            short_names=tuple(entry.get("shortNames") or ()),
        )


def _cause(error: urllib3.exceptions.HTTPError) -> str:
    reason = getattr(error, "reason", None) or error
    text = str(reason)
    if "Connection refused" in text:
        return "connection refused"
    return text.rsplit(": ", 1)[-1]


def _api_error(response: urllib3.BaseHTTPResponse) -> DaemonError:
    try:
        status = json.loads(response.data)
        message = status["message"]
        reason = status.get("reason") or "Failed"
    except (ValueError, KeyError, TypeError):
        first = response.data.decode(errors="replace").strip().split("\n")[0]
        message = f"HTTP {response.status}: {first or response.reason}"
        reason = "Failed"
    if response.status == 401:
        message = f"{message}: the daemon does not accept the kubeconfig's token"
    return DaemonError(message, code=response.status, reason=reason)


def connect(kubeconfig: str | None, data_dir: str | None) -> DaemonClient:
    """A client of the daemon the options or the environment name."""
    return DaemonClient(read_kubeconfig(find_kubeconfig(kubeconfig, data_dir)))
