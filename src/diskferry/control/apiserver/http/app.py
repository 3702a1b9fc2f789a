"""The FastAPI app: bearer-token auth, discovery, resources, OpenAPI, health and metrics."""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from diskferry.control.apiserver.http import (
    bodies,
    discovery,
    media,
    openapi,
    openapiproto,
    reviews,
)
from diskferry.control.apiserver.http.connections import ConnectionActivity, Connections
from diskferry.control.apiserver.http.limits import DEFAULT_LIMITS, Limits, RequestLimits, answer
from diskferry.control.apiserver.http.metrics import Metrics
from diskferry.control.apiserver.http.resources import ResourceApi
from diskferry.control.apiserver.http.watch import Watcher
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import ApiError, MethodNotAllowedError, NotFoundError
from diskferry.control.resources.kinds import KindInfo, Registry

log = logging.getLogger(__name__)
PUBLIC = ("/healthz", "/readyz", "/livez", "/version", "/version/")
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def _status(code: int, reason: str, message: str) -> JSONResponse:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return JSONResponse(body, status_code=code)


class ApiServer:
    """The app and what its routes share: the service, the registry, the token, the metrics."""

    def __init__(
        self,
        service: ObjectService,
        registry: Registry,
        token: str,
        server_address: str,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.service = service
        self.limits = limits
        self.connections = Connections(limits)
        self.registry = registry
        self.discoverable = Registry([*registry.kinds, *reviews.KINDS])
        self.token = token
        self.server_address = server_address
        self.metrics = Metrics()
        self.watcher = Watcher()
        self.resources = ResourceApi(service, registry, self.watcher)
        self.v3 = openapi.v3_documents(registry)
        self.v3_index = openapi.v3_index(self.v3)
        self.v2 = openapi.v2_document(registry)
        self.v2_proto = openapiproto.document(self.v2)
        self.app = self._build()

    def stop(self) -> None:
        """End the open watches, so that the server can shut down."""
        self.watcher.stop()

    def close(self) -> None:
        """Stop, and free the watches' threads."""
        self.watcher.close()

    def _authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        # bytes, so that a token of any characters is compared (strings must be ASCII)
        return scheme.lower() == "bearer" and secrets.compare_digest(
            given.strip().encode(), self.token.encode()
        )

    def _object_counts(self) -> dict[str, int]:
        counts = {}
        for info in self.registry.kinds:
            page = self.service.list(info, None, limit=1)
            counts[info.group_kind] = len(page.items) + (page.remaining or 0)
        return counts

    def _build(self) -> FastAPI:
        app = FastAPI(
            title="diskferry",
            openapi_url=None,
            docs_url=None,
            redoc_url=None,
            redirect_slashes=False,
        )
        # inside the authentication (added after, it wraps this): only requests whose token
        # passed count, and the 413 rises in the handler's frames, to the ApiError handler
        app.add_middleware(RequestLimits, limits=self.limits)

        @app.middleware("http")
        async def authenticate(request: Request, call_next: Any) -> Response:
            started = time.monotonic()
            if request.url.path in PUBLIC or self._authorized(request):
                response = await call_next(request)
            else:
                response = _status(401, "Unauthorized", "Unauthorized")
            verb = getattr(request.state, "verb", request.method.lower())
            resource = getattr(request.state, "resource", "")
            self.metrics.observe(verb, resource, response.status_code, time.monotonic() - started)
            return response

        # outermost: a connection's header clock stands still while its request is served
        app.add_middleware(ConnectionActivity, connections=self.connections)

        @app.exception_handler(ApiError)
        async def api_error(request: Request, error: ApiError) -> Response:
            return answer(error)

        @app.exception_handler(HTTPException)
        async def http_error(request: Request, error: HTTPException) -> Response:
            if error.status_code == 404:
                return _status(404, "NotFound", "the server could not find the requested resource")
            return _status(error.status_code, "BadRequest", str(error.detail))

        @app.exception_handler(Exception)
        async def internal(request: Request, error: Exception) -> Response:
            log.exception("%s %s failed", request.method, request.url.path)
            return _status(500, "InternalError", f"an error on the server: {type(error).__name__}")

        for path in ("/healthz", "/readyz", "/livez"):
            app.add_api_route(path, self._health, methods=["GET"])
        app.add_api_route("/metrics", self._metrics, methods=["GET"])
        discovered = {
            "/version": self._version,
            "/api": self._core_versions,
            "/apis": self._groups,
            "/api/{version}": self._core_resources,
            "/apis/{group}": self._group,
            "/apis/{group}/{version}": self._group_resources,
        }
        for path, endpoint in discovered.items():
            # kube-apiserver answers these with a trailing slash too (kr8s and the kubernetes
            # client ask for `/version/`); before the resources, whose path may be empty
            for each in (path, f"{path}/"):
                app.add_api_route(each, endpoint, methods=["GET"])
        app.add_api_route("/api/{version}/{path:path}", self._core, methods=METHODS)
        app.add_api_route("/apis/{group}/{version}/{path:path}", self._named, methods=METHODS)
        app.add_api_route("/openapi/v2", self._openapi_v2, methods=["GET"])
        app.add_api_route("/openapi/v3", self._openapi_v3_index, methods=["GET"])
        app.add_api_route("/openapi/v3/{path:path}", self._openapi_v3, methods=["GET"])
        return app

    async def _health(self) -> Response:
        return PlainTextResponse("ok")

    async def _version(self) -> dict[str, str]:
        return discovery.version_info()

    async def _metrics(self) -> Response:
        text = await run_in_threadpool(self.metrics.text, self._object_counts, self.watcher.open)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    def _discovery(self, request: Request, core: bool, plain: dict[str, Any]) -> Response:
        if media.wants_discovery_v2(request.headers.get("accept")):
            body = discovery.aggregated(self.discoverable, core)
            return JSONResponse(body, media_type=media.DISCOVERY_V2)
        return JSONResponse(plain)

    async def _core_versions(self, request: Request) -> Response:
        return self._discovery(request, True, discovery.api_versions(self.server_address))

    async def _groups(self, request: Request) -> Response:
        return self._discovery(request, False, discovery.api_group_list(self.discoverable))

    async def _core_resources(self, version: str) -> dict[str, Any]:
        return discovery.api_resource_list(self.discoverable, "", version)

    async def _group(self, group: str) -> dict[str, Any]:
        return discovery.api_group(self.discoverable, group)

    async def _group_resources(self, group: str, version: str) -> dict[str, Any]:
        return discovery.api_resource_list(self.discoverable, group, version)

    async def _core(self, request: Request, version: str, path: str) -> Response:
        return await self.resources.handle(request, "", version, path)

    async def _named(self, request: Request, group: str, version: str, path: str) -> Response:
        review = reviews.find(group, version, path)
        if review is not None:
            return await self._review(request, review)
        return await self.resources.handle(request, group, version, path)

    async def _review(self, request: Request, info: KindInfo) -> Response:
        """Answer a review: created (201), never stored; only POST is served."""
        request.state.resource = info.plural
        if request.method != "POST":
            raise MethodNotAllowedError(f"the server does not allow this method on {info.plural}")
        request.state.verb = "create"
        body = bodies.decode(await request.body(), request.headers.get("content-type"))
        return JSONResponse(reviews.answer(info, body, self.token), status_code=201)

    async def _openapi_v2(self, request: Request) -> Response:
        accepted = media.parse(request.headers.get("accept"))
        for wanted in accepted:
            if wanted.type in openapiproto.ACCEPTED:
                return Response(self.v2_proto, media_type=openapiproto.MEDIA_TYPE)
            if wanted.is_json():
                break
        if accepted and not any(m.is_json() for m in accepted):
            return _status(406, "NotAcceptable", "only JSON and protobuf are served")
        return JSONResponse(self.v2)

    async def _openapi_v3_index(self) -> dict[str, Any]:
        return self.v3_index

    async def _openapi_v3(self, path: str) -> dict[str, Any]:
        doc = self.v3.get(path.strip("/"))
        if doc is None:
            raise NotFoundError(f"no OpenAPI v3 document for {path}")
        return doc
