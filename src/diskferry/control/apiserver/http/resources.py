"""The resource endpoints: get, list, watch, create, update, patch and delete of every kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from diskferry.control.apiserver.http import bodies, media
from diskferry.control.apiserver.http.paths import Target, resolve
from diskferry.control.apiserver.http.tables import table
from diskferry.control.apiserver.http.watch import Watcher
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import BadRequestError, MethodNotAllowedError
from diskferry.control.resources.kinds import KindInfo, Registry

FIELD_VALIDATIONS = ("Strict", "Warn", "Ignore")
TRUE = ("true", "1")
MANAGER_LENGTH = 128


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in TRUE


def _int(request: Request, name: str) -> int | None:
    text = request.query_params.get(name)
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadRequestError(f"{name}: invalid value {text!r}: not an integer") from None
    if value < 0:
        raise BadRequestError(f"{name}: invalid value {value}: must not be negative")
    return value


def _include(request: Request) -> str:
    """What a Table row carries of its object: Metadata (the default), Object or None."""
    return request.query_params.get("includeObject") or "Metadata"


def _dry_run(request: Request, options: dict[str, Any] | None = None) -> bool:
    values = request.query_params.getlist("dryRun") + list((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise BadRequestError(f"dryRun: unsupported value {value!r}: only All is")
    return bool(values)


def _manager(request: Request) -> str | None:
    """Who writes: `fieldManager`, else the client's name in its User-Agent, as Kubernetes
    names an update's manager."""
    given = request.query_params.get("fieldManager")
    agent = request.headers.get("user-agent", "").split("/")[0].strip()
    return given or agent[:MANAGER_LENGTH] or None


def _field_validation(request: Request) -> Any:
    value = request.query_params.get("fieldValidation") or "Strict"
    if value not in FIELD_VALIDATIONS:
        raise BadRequestError(f"fieldValidation: invalid value {value!r}: Strict, Warn or Ignore")
    return value


def _answer(body: Any, code: int = 200, warnings: list[str] | None = None) -> JSONResponse:
    response = JSONResponse(body, status_code=code)
    for warning in warnings or []:
        # a header holds latin-1 only: the field names a warning quotes may hold anything
        text = warning.replace(chr(34), chr(39)).encode("ascii", "backslashreplace").decode()
        response.headers.append("Warning", f'299 - "{text}"')
    return response


async def _decode(request: Request) -> Any:
    return bodies.decode(await request.body(), request.headers.get("content-type"))


async def _object(request: Request) -> dict[str, Any]:
    body = await _decode(request)
    if not isinstance(body, dict):
        raise BadRequestError("the body of the request must be an object")
    return body


def _check_identity(target: Target, body: dict[str, Any]) -> None:
    """Refuse a body naming another namespace or (for PUT) another name than the path."""
    meta = body.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise BadRequestError("metadata must be an object")
    if target.namespace is not None:
        if meta.get("namespace") not in (None, "", target.namespace):
            raise BadRequestError(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = target.namespace
    if target.name is not None and meta.get("name") not in (None, target.name):
        raise BadRequestError("the name of the object does not match the name on the URL")


class ResourceApi:
    """Answers the requests under `/api/v1` and `/apis/<group>/<version>` for each kind."""

    def __init__(self, service: ObjectService, registry: Registry, watcher: Watcher) -> None:
        self.service = service
        self.registry = registry
        self.watcher = watcher

    def _encoder(self, request: Request, info: KindInfo) -> Callable[[dict], dict]:
        if not media.wants_table(request.headers.get("accept")):
            return lambda obj: obj
        return lambda obj: table(info, [obj], include_object=_include(request))

    async def handle(self, request: Request, group: str, version: str, path: str) -> Response:
        """Answer one request; an ApiError raised is answered as its Status by the app."""
        target = resolve(self.registry, group, version, path)
        request.state.resource = target.info.plural
        method = request.method
        collection = target.name is None
        if method == "GET" and (collection or _flag(request, "watch")):
            if _flag(request, "watch"):
                request.state.verb = "watch"
                return await self._watch(request, target)
            request.state.verb = "list"
            return await self._list(request, target)
        verbs = {
            ("GET", False): ("get", self._get),
            ("POST", True): ("create", self._create),
            ("PUT", False): ("update", self._update),
            ("PATCH", False): ("patch", self._patch),
            ("DELETE", False): ("delete", self._delete),
            ("DELETE", True): ("deletecollection", self._delete_collection),
        }
        found = verbs.get((method, collection))
        all_namespaces = collection and target.namespace is None and target.info.namespaced
        if found is None or (all_namespaces and method != "GET"):
            raise MethodNotAllowedError(f"the server does not allow this method on {path}")
        request.state.verb, handler = found
        return await handler(request, target)

    async def _get(self, request: Request, target: Target) -> Response:
        obj = await run_in_threadpool(self.service.get, target.info, target.namespace, target.name)
        return _answer(self._encoder(request, target.info)(obj))

    def _selectors(self, request: Request, target: Target) -> dict[str, str | None]:
        fields = request.query_params.get("fieldSelector") or None
        if target.name is not None:
            by_name = f"metadata.name={target.name}"
            fields = f"{fields},{by_name}" if fields else by_name
        return {
            "label_selector": request.query_params.get("labelSelector") or None,
            "field_selector": fields,
        }

    async def _list(self, request: Request, target: Target) -> Response:
        info = target.info
        page = await run_in_threadpool(
            lambda: self.service.list(
                info,
                target.namespace,
                limit=_int(request, "limit") or None,
                continue_token=request.query_params.get("continue") or None,
                **self._selectors(request, target),
            )
        )
        metadata: dict[str, Any] = {"resourceVersion": page.resource_version}
        if page.continue_token:
            metadata["continue"] = page.continue_token
        if page.remaining:
            metadata["remainingItemCount"] = page.remaining
        if media.wants_table(request.headers.get("accept")):
            rows = table(info, page.items, include_object=_include(request), metadata=metadata)
            return _answer(rows)
        return _answer(
            {
                "kind": f"{info.kind}List",
                "apiVersion": info.api_version,
                "metadata": metadata,
                "items": page.items,
            }
        )

    async def _watch(self, request: Request, target: Target) -> Response:
        timeout = _int(request, "timeoutSeconds")
        selectors = self._selectors(request, target)
        rv = request.query_params.get("resourceVersion") or None

        def start() -> Any:
            return self.service.watch(
                target.info, target.namespace, resource_version=rv, **selectors
            )

        wants_table = media.wants_table(request.headers.get("accept"))
        return await self.watcher.response(
            start,
            self._encoder(request, target.info) if wants_table else None,
            client=request.client.host if request.client else "",
            timeout=timeout,
            bookmarks=_flag(request, "allowWatchBookmarks"),
        )

    async def _create(self, request: Request, target: Target) -> Response:
        body = await _object(request)
        _check_identity(target, body)
        obj, warnings = await run_in_threadpool(
            lambda: self.service.create(
                target.info,
                target.namespace,
                body,
                dry_run=_dry_run(request),
                field_validation=_field_validation(request),
                manager=_manager(request),
            )
        )
        return _answer(obj, 201, warnings)

    async def _update(self, request: Request, target: Target) -> Response:
        body = await _object(request)
        _check_identity(target, body)
        obj, warnings = await run_in_threadpool(
            lambda: self.service.update(
                target.info,
                target.namespace,
                target.name,
                body,
                subresource=target.subresource,
                dry_run=_dry_run(request),
                field_validation=_field_validation(request),
                manager=_manager(request),
            )
        )
        return _answer(obj, 200, warnings)

    async def _patch(self, request: Request, target: Target) -> Response:
        content_type = request.headers.get("content-type") or ""
        dry_run, validation = _dry_run(request), _field_validation(request)
        if media.is_apply(content_type):
            return await self._apply(request, target, dry_run, validation)
        patch = await request.body()
        if not patch.strip():
            raise BadRequestError("the body of the request is empty: a patch is needed")
        obj, warnings = await run_in_threadpool(
            lambda: self.service.patch(
                target.info,
                target.namespace,
                target.name,
                patch,
                content_type,
                subresource=target.subresource,
                dry_run=dry_run,
                field_validation=validation,
                manager=_manager(request),
            )
        )
        return _answer(obj, 200, warnings)

    async def _apply(
        self, request: Request, target: Target, dry_run: bool, validation: Any
    ) -> Response:
        """Server-side apply: the configuration's fields owned by its field manager."""
        body = bodies.apply_configuration(await request.body())
        manager = request.query_params.get("fieldManager")
        if not manager:
            raise BadRequestError("fieldManager: Required value: is required for apply patch")
        _check_identity(target, body)
        body["metadata"]["name"] = target.name
        if target.subresource:
            return await self._apply_merged(target, body, dry_run, validation)
        obj, warnings, created = await run_in_threadpool(
            lambda: self.service.apply(
                target.info,
                target.namespace,
                target.name,
                body,
                manager,
                force=_flag(request, "force"),
                dry_run=dry_run,
                field_validation=validation,
            )
        )
        return _answer(obj, 201 if created else 200, warnings)

    async def _apply_merged(
        self, target: Target, body: dict[str, Any], dry_run: bool, validation: Any
    ) -> Response:
        """Apply to a subresource: the configuration merged over what is stored, no fields
        managed."""
        obj, warnings = await run_in_threadpool(
            lambda: self.service.patch(
                target.info,
                target.namespace,
                target.name,
                body,
                "application/merge-patch+json",
                subresource=target.subresource,
                dry_run=dry_run,
                field_validation=validation,
            )
        )
        return _answer(obj, 200, warnings)

    async def _delete(self, request: Request, target: Target) -> Response:
        options = await _decode(request) or {}
        if not isinstance(options, dict):
            raise BadRequestError("DeleteOptions must be an object")
        preconditions = options.get("preconditions") or {}
        propagation = (
            request.query_params.get("propagationPolicy")
            or options.get("propagationPolicy")
            or "Background"
        )
        obj = await run_in_threadpool(
            lambda: self.service.delete(
                target.info,
                target.namespace,
                target.name,
                dry_run=_dry_run(request, options),
                propagation=propagation,
                uid_precondition=preconditions.get("uid"),
                rv_precondition=preconditions.get("resourceVersion"),
            )
        )
        return _answer(obj)

    async def _delete_collection(self, request: Request, target: Target) -> Response:
        info = target.info
        dry_run = _dry_run(request)
        selectors = self._selectors(request, target)

        def delete_all() -> list[dict[str, Any]]:
            items = self.service.list(info, target.namespace, **selectors).items
            return [
                self.service.delete(
                    info,
                    obj["metadata"].get("namespace"),
                    obj["metadata"]["name"],
                    dry_run=dry_run,
                )
                for obj in items
            ]

        deleted = await run_in_threadpool(delete_all)
        return _answer(
            {
                "kind": f"{info.kind}List",
                "apiVersion": info.api_version,
                "metadata": {},
                "items": deleted,
            }
        )
