"""The cluster's API through the official kubernetes client's DynamicClient: objects as JSON
values, each request tried again with backoff a bounded number of times (on 429 and 5xx, after
the server's Retry-After when it gives one, and on a connection that fails), and every refusal
as the control plane's own ApiError (NotFoundError, ConflictError, GoneError...)."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import dynamic, watch
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from diskferry.control.errors import (
    AlreadyExistsError,
    ApiError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    MethodNotAllowedError,
    NotFoundError,
    RequestEntityTooLargeError,
    TooManyRequestsError,
    UnsupportedMediaTypeError,
)
from diskferry.kube.errors import ClusterUnreachableError

log = logging.getLogger("diskferry.kube")
FIELD_MANAGER = "diskferry-operator"
MERGE_PATCH = "application/merge-patch+json"
RETRIED = frozenset({429, 500, 502, 503, 504})
REQUEST_TIMEOUT = (10.0, 60.0)  # seconds to connect, and to wait for an answer
WATCH_SILENCE = 90.0  # beyond a watch's length, the seconds without a byte that break it
PAGE = 500  # objects a list asks for at once, as client-go's reflector does
LOG_BLOCK = 64 << 10  # bytes of a Pod's log read at once
ERRORS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    410: GoneError,
    413: RequestEntityTooLargeError,
    415: UnsupportedMediaTypeError,
    422: InvalidError,
}

Obj = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How many times a request is tried, and the wait between tries: doubling from `first`
    up to `most` seconds (each between half and all of it, so that clients spread out), or the
    server's Retry-After."""

    attempts: int = 5
    first: float = 0.2
    most: float = 5.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after `failures` failed tries (1 after the first)."""
        return min(self.most, self.first * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)


def _status(error: ApiException) -> Obj:
    """The Status the API answered with, {} when its body is none."""
    try:
        body = json.loads(error.body or b"{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def api_error(error: ApiException) -> ApiError:
    """The control plane's error for the API's refusal `error`, with its message and causes."""
    status = _status(error)
    message = status.get("message") or f"{error.status} {error.reason}"
    details = status.get("details") or {}
    if error.status == 429:
        return TooManyRequestsError(message, retry_after=int(details.get("retryAfterSeconds") or 1))
    if status.get("reason") == AlreadyExistsError.reason:
        kind: type[ApiError] = AlreadyExistsError
    else:
        kind = ERRORS.get(error.status or 0, ApiError)
    return kind(
        message, kind=details.get("kind"), name=details.get("name"), causes=details.get("causes")
    )


def _retry_after(error: ApiException) -> float | None:
    """The seconds the server's Retry-After asks to wait, None when it names none."""
    value = (error.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class KubeApi:
    """Reads, writes and watches objects of any kind the cluster serves, by apiVersion and kind."""

    def __init__(
        self,
        client: ApiClient,
        *,
        backoff: Backoff | None = None,
        field_manager: str = FIELD_MANAGER,
        discovery_cache: Path | None = None,
    ) -> None:
        self.backoff = backoff or Backoff()
        self.field_manager = field_manager
        cache = str(discovery_cache) if discovery_cache else None
        self.dynamic = self._call(
            "discovery", lambda: dynamic.DynamicClient(client, cache_file=cache)
        )
        self._resources: dict[tuple[str, str], Any] = {}
        self._discovering = threading.Lock()

    def _call(self, what: str, request: Callable[[], T]) -> T:
        """`request`'s answer, tried again on 429, 5xx and failed connections up to the
        backoff's attempts; ApiError for a refusal, ClusterUnreachableError in the end."""
        failures = 0
        while True:
            failures += 1
            try:
                return request()
            except ApiException as error:
                if error.status not in RETRIED or failures >= self.backoff.attempts:
                    raise api_error(error) from None
                delay = _retry_after(error) or self.backoff.delay(failures)
                cause = f"{error.status} {error.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if failures >= self.backoff.attempts:
                    raise ClusterUnreachableError(
                        f"{what}: the cluster's API did not answer in {failures} tries: {error}"
                    ) from None
                delay = self.backoff.delay(failures)
                cause = str(error)
            log.warning("%s: %s; trying again in %.1f s", what, cause, delay)
            time.sleep(delay)

    def _json(self, what: str, request: Callable[[], Any]) -> Obj:
        answer = self._call(what, request)
        return json.loads(answer.data)

    def resource(self, api_version: str, kind: str) -> Any:
        """The DynamicClient's resource of the kind; NotFoundError when the cluster serves none."""
        key = (api_version, kind)
        with self._discovering:  # the discoverer's cache is not safe for threads
            found = self._resources.get(key)
            if found is None:
                try:
                    found = self._call(
                        f"discovery of {kind}",
                        lambda: self.dynamic.resources.get(api_version=api_version, kind=kind),
                    )
                except ResourceNotFoundError:
                    raise NotFoundError(f"the cluster serves no {kind} in {api_version}") from None
                self._resources[key] = found
        return found

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object, None when there is none."""
        resource = self.resource(api_version, kind)
        try:
            return self._json(
                f"get {kind} {name}",
                lambda: resource.get(
                    name=name,
                    namespace=namespace,
                    serialize=False,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )
        except NotFoundError:
            return None

    def _page(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        limit: int,
        token: str | None,
    ) -> Obj:
        resource = self.resource(api_version, kind)
        page = self._json(
            f"list {kind}",
            lambda: resource.get(
                namespace=namespace,
                label_selector=label_selector,
                limit=limit,
                _continue=token,
                serialize=False,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
        for item in page.get("items") or []:  # kube-apiserver leaves them out of typed lists
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return page

    def pages(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
    ) -> Iterator[tuple[list[Obj], str]]:
        """The objects of the kind (in `namespace`, all when None) matching `label_selector`, a
        page at a time, each read when the one before was taken, with the listing's
        resourceVersion (the last page's is the one to watch from)."""
        token = None
        while True:
            page = self._page(api_version, kind, namespace, label_selector, PAGE, token)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            yield page.get("items") or [], str(meta.get("resourceVersion") or "")
            if not token:
                return

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """Every object of the kind (in `namespace`, all when None) matching `label_selector`,
        read a page at a time, and the resourceVersion of the listing to watch from."""
        items: list[Obj] = []
        version = ""
        for page, listed in self.pages(api_version, kind, namespace, label_selector=label_selector):
            items += page
            version = listed
        return items, version

    def create(self, api_version: str, kind: str, namespace: str | None, body: Obj) -> Obj:
        """Create the object; the object stored. AlreadyExistsError when the name is taken."""
        resource = self.resource(api_version, kind)
        name = (body.get("metadata") or {}).get("name")
        return self._json(
            f"create {kind} {name}",
            lambda: resource.create(
                body=body,
                namespace=namespace,
                serialize=False,
                field_manager=self.field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    def replace(
        self, api_version: str, kind: str, namespace: str | None, name: str, body: Obj
    ) -> Obj:
        """Replace the object; ConflictError when its resourceVersion is no longer current."""
        resource = self.resource(api_version, kind)
        return self._json(
            f"update {kind} {name}",
            lambda: resource.replace(
                body=body,
                name=name,
                namespace=namespace,
                serialize=False,
                field_manager=self.field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Merge-patch the object, or its `subresource` (status); the object after."""
        resource = self.resource(api_version, kind)
        target = resource.subresources[subresource] if subresource else resource
        return self._json(
            f"patch {kind} {name}{f' {subresource}' if subresource else ''}",
            lambda: target.patch(
                body=patch,
                name=name,
                namespace=namespace,
                content_type=MERGE_PATCH,
                serialize=False,
                field_manager=self.field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        """Delete the object; nothing when it is gone already."""
        resource = self.resource(api_version, kind)
        try:
            self._call(
                f"delete {kind} {name}",
                lambda: resource.delete(
                    name=name,
                    namespace=namespace,
                    serialize=False,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )
        except NotFoundError:
            return

    def pod_log(self, namespace: str, name: str, *, tail_lines: int, limit_bytes: int) -> str:
        """The last `tail_lines` lines of the log of the Pod's container, within its last
        `limit_bytes` (as the server cuts them); NotFoundError when there is no such Pod."""
        core = CoreV1Api(self.dynamic.client)
        answer = self._call(
            f"log of Pod {name}",
            lambda: core.read_namespaced_pod_log(
                name,
                namespace,
                tail_lines=tail_lines,
                limit_bytes=limit_bytes,
                _preload_content=False,  # the text as it is, never taken for JSON
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
        return answer.data.decode(errors="replace")

    def pod_log_lines(self, namespace: str, name: str, *, limit_bytes: int) -> Iterator[str]:
        """The lines of the log of the Pod's container from its start, within its first
        `limit_bytes` (a line cut there left out), read as they come; NotFoundError when there
        is no such Pod, BadRequestError when its container has not started."""
        core = CoreV1Api(self.dynamic.client)
        answer = self._call(
            f"log of Pod {name}",
            lambda: core.read_namespaced_pod_log(
                name,
                namespace,
                limit_bytes=limit_bytes,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
        try:
            rest, left = b"", limit_bytes
            for block in answer.stream(LOG_BLOCK):
                block = block[:left]
                left -= len(block)
                *lines, rest = (rest + block).split(b"\n")
                yield from (line.decode(errors="replace") for line in lines)
                if not left:
                    break
        finally:
            answer.release_conn()

    def watch(
        self,
        api_version: str,
        kind: str,
        resource_version: str,
        seconds: int,
        label_selector: str | None = None,
    ) -> Iterator[Obj]:
        """The kind's events (`type` and `object`) after `resource_version`, in every namespace,
        of the objects matching `label_selector` (all when None), for `seconds` (the server ends
        the request then; a connection silent for longer than that and a bookmark's interval is
        taken for broken).

        GoneError when that resourceVersion is no longer kept (410): list again. A broken
        connection is ClusterUnreachableError; the caller watches again from the last
        resourceVersion it saw.
        """
        resource = self.resource(api_version, kind)
        try:
            for event in watch.Watch().stream(
                resource.get,
                namespace=None,
                label_selector=label_selector,
                resource_version=resource_version,
                timeout_seconds=seconds,
                allow_watch_bookmarks=True,
                serialize=False,
                _request_timeout=(REQUEST_TIMEOUT[0], seconds + WATCH_SILENCE),
            ):
                yield {"type": event["type"], "object": event["raw_object"]}
        except ApiException as error:
            raise api_error(error) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ClusterUnreachableError(f"the watch of {kind} broke: {error}") from None
