"""The `log` subresource: the captured log of an object's worker, as text/plain.

`GET .../{plural}/{name}/log` answers what the daemon's log reader returns for the object
(the runner's tail of the worker's output); 404 as a Status when the object does not exist
or no worker has run for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.errors import NotFoundError
from diskferry.control.resources.kinds import KindInfo

LogReader = Callable[[KindInfo, dict[str, Any]], str | None]
PATHS = (
    "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/log",
    "/apis/{group}/{version}/{plural}/{name}/log",
    "/api/{version}/namespaces/{namespace}/{plural}/{name}/log",
    "/api/{version}/{plural}/{name}/log",
)


def install(server: ApiServer, read: LogReader) -> None:
    """Serve the `log` subresource on `server`'s app from `read`, ahead of the resource routes
    (which would take the path for an object's)."""

    async def log(request: Request) -> Response:
        params = request.path_params
        request.state.verb, request.state.resource = "get", params["plural"]
        info = server.registry.by_plural(
            params.get("group", ""), params["version"], params["plural"]
        )
        namespace = params.get("namespace")
        if info.namespaced != (namespace is not None):
            raise NotFoundError(
                f"the server could not find the requested resource ({request.url.path})"
            )
        obj = await run_in_threadpool(server.service.get, info, namespace, params["name"])
        text = await run_in_threadpool(read, info, obj)
        if text is None:
            raise NotFoundError(
                f'{info.group_kind} "{params["name"]}" has no log: no worker has run for it',
                kind=info.kind,
                name=params["name"],
            )
        return PlainTextResponse(text)

    routes = server.app.router.routes
    for path in PATHS:
        server.app.add_api_route(path, log, methods=["GET"])
        routes.insert(0, routes.pop())
