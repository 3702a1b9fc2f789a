"""OpenAPI documents in kube-apiserver's layout: `/openapi/v3` (an index) and `/openapi/v2`."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from diskferry import __version__
from diskferry.control.apiserver.crd import TOP_LEVEL, openapi_schema
from diskferry.control.resources.kinds import KindInfo, Registry

Doc = dict[str, Any]
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
STATUS = f"{META}.Status"
OBJECT_METADATA = (
    "The object's metadata, as every Kubernetes object has it: name, namespace, labels, "
    "annotations, uid, resourceVersion, generation, finalizers, ownerReferences, "
    "creationTimestamp and deletionTimestamp."
)
LIST_METADATA = "The list's resourceVersion, and `continue` when more objects follow."
STATUS_SCHEMA = {
    "type": "object",
    "description": "The outcome of a request that returns no object, or an error.",
    "properties": {
        **{name: TOP_LEVEL[name] for name in ("apiVersion", "kind")},
        "metadata": {"type": "object", "description": "Empty in a Status."},
        "status": {"type": "string", "description": "Success or Failure."},
        "message": {"type": "string", "description": "What happened, for people."},
        "reason": {
            "type": "string",
            "description": "Why the request failed, as one CamelCase word (NotFound, "
            "AlreadyExists, Conflict, Invalid, ...); empty on success.",
        },
        "code": {"type": "integer", "description": "The HTTP status code of the answer."},
        "details": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "description": "The object the answer is about (its name and kind), each field at "
            "fault with why (causes), and how long to wait before retrying "
            "(retryAfterSeconds).",
        },
    },
}
LIST_PARAMS = (
    ("labelSelector", "string", "Only objects whose labels match."),
    ("fieldSelector", "string", "Only objects whose fields match."),
    ("limit", "integer", "At most this many objects; `continue` gets the rest."),
    ("continue", "string", "Where the previous page ended."),
    ("resourceVersion", "string", "The resourceVersion a watch starts after."),
    ("watch", "boolean", "Stream the changes instead of listing."),
    ("timeoutSeconds", "integer", "How long a watch lasts."),
    ("allowWatchBookmarks", "boolean", "Send BOOKMARK events in a watch."),
)
WRITE_PARAMS = (
    ("dryRun", "string", "`All`: check and answer, store nothing."),
    ("fieldValidation", "string", "Strict, Warn or Ignore unknown fields."),
    ("fieldManager", "string", "The name of the writer."),
)
ENUMS = {"dryRun": ["All"], "fieldValidation": ["Strict", "Warn", "Ignore"]}
V3_ONLY = ("anyOf", "oneOf", "allOf", "not", "nullable")
PATCH_MEDIA = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
)


def schema_name(info: KindInfo) -> str:
    """The definition's name, as Kubernetes names it: `io.diskferry.v1alpha1.VirtualDisk`."""
    if not info.group or info.group.endswith(".k8s.io"):
        group = info.group.removesuffix(".k8s.io") or "core"
        return f"io.k8s.api.{group}.{info.version}.{info.kind}"
    reversed_group = ".".join(reversed(info.group.split(".")))
    return f"{reversed_group}.{info.version}.{info.kind}"


def _gvk(info: KindInfo) -> list[dict[str, str]]:
    return [{"group": info.group, "version": info.version, "kind": info.kind}]


def _schemas(kinds: list[KindInfo], ref: str) -> dict[str, Any]:
    out: dict[str, Any] = {STATUS: STATUS_SCHEMA}
    for info in kinds:
        schema = copy.deepcopy(openapi_schema(info))
        schema["properties"]["metadata"]["description"] = OBJECT_METADATA
        schema["x-kubernetes-group-version-kind"] = _gvk(info)
        out[schema_name(info)] = schema
        out[f"{schema_name(info)}List"] = {
            "type": "object",
            "description": f"A list of {info.kind} objects.",
            "required": ["items"],
            "properties": {
                **{name: TOP_LEVEL[name] for name in ("apiVersion", "kind")},
                "metadata": {"type": "object", "description": LIST_METADATA},
                "items": {
                    "type": "array",
                    "description": "The objects.",
                    "items": {"$ref": f"{ref}{schema_name(info)}"},
                },
            },
            "x-kubernetes-group-version-kind": [{**_gvk(info)[0], "kind": f"{info.kind}List"}],
        }
    return out


def _prefix(info: KindInfo) -> str:
    return f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"


def _param(name: str, kind: str, text: str, where: str = "query", v3: bool = True) -> Doc:
    schema: Doc = {"type": kind, "uniqueItems": True}
    if name in ENUMS:
        schema["enum"] = ENUMS[name]
    out: Doc = {"name": name, "in": where, "description": text}
    if where == "path":
        out["required"] = True
        schema.pop("uniqueItems")
        schema["pattern"] = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    if v3:
        out["schema"] = schema
    else:
        out.update(schema)
    return out


class _Builder:
    """The operations of kinds, in the v3 or the v2 way of writing bodies and answers."""

    def __init__(self, v3: bool) -> None:
        self.v3 = v3
        self.ref = "#/components/schemas/" if v3 else "#/definitions/"

    def _answer(self, definition: str, text: str) -> Doc:
        schema = {"$ref": f"{self.ref}{definition}"}
        if self.v3:
            return {"description": text, "content": {"application/json": {"schema": schema}}}
        return {"description": text, "schema": schema}

    def _body(self, definition: str, media: tuple[str, ...] = ("application/json",)) -> Doc:
        schema = {"$ref": f"{self.ref}{definition}"}
        if self.v3:
            return {
                "requestBody": {"required": True, "content": {m: {"schema": schema} for m in media}}
            }
        return {
            "parameters": [{"name": "body", "in": "body", "required": True, "schema": schema}],
            "consumes": list(media),
        }

    def _operation(
        self, info: KindInfo, action: str, op_id: str, params: tuple, answer: str, **extra: Any
    ) -> Doc:
        parameters = [_param(n, k, t, v3=self.v3) for n, k, t in params]
        body = extra.pop("body", {})
        parameters += body.pop("parameters", [])
        op: Doc = {
            "operationId": op_id,
            "parameters": parameters,
            "responses": {
                "200": self._answer(answer, "OK"),
                "default": self._answer(STATUS, "An error, as a Status."),
            },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": _gvk(info)[0],
            **body,
        }
        if action in ("post", "put"):
            op["responses"]["201"] = self._answer(answer, "Created")
        return op

    def paths(self, info: KindInfo) -> dict[str, Doc]:
        """The paths and operations of one kind."""
        name, items = schema_name(info), f"{schema_name(info)}List"
        suffix = info.kind
        base = _prefix(info)
        scoped = f"{base}/namespaces/{{namespace}}/{info.plural}" if info.namespaced else None
        collection = scoped or f"{base}/{info.plural}"
        where = (("namespace", "string", "The namespace."),) if info.namespaced else ()
        path_params = [_param(n, k, t, "path", self.v3) for n, k, t in where]
        name_param = _param("name", "string", "The object's name.", "path", self.v3)
        json_body = self._body(name)
        patch_body = self._body(name, PATCH_MEDIA)
        out: dict[str, Doc] = {
            collection: {
                "parameters": path_params,
                "get": self._operation(info, "list", f"list{suffix}", LIST_PARAMS, items),
                "post": self._operation(
                    info, "post", f"create{suffix}", WRITE_PARAMS, name, body=json_body
                ),
                "delete": self._operation(
                    info, "deletecollection", f"deletecollection{suffix}", LIST_PARAMS[:4], items
                ),
            },
            f"{collection}/{{name}}": {
                "parameters": [*path_params, name_param],
                "get": self._operation(info, "get", f"read{suffix}", (), name),
                "put": self._operation(
                    info, "put", f"replace{suffix}", WRITE_PARAMS, name, body=self._body(name)
                ),
                "patch": self._operation(
                    info, "patch", f"patch{suffix}", WRITE_PARAMS, name, body=patch_body
                ),
                "delete": self._operation(
                    info, "delete", f"delete{suffix}", WRITE_PARAMS[:1], name
                ),
            },
        }
        if info.has_status:
            out[f"{collection}/{{name}}/status"] = {
                "parameters": [*path_params, name_param],
                "get": self._operation(info, "get", f"read{suffix}Status", (), name),
                "put": self._operation(
                    info, "put", f"replace{suffix}Status", WRITE_PARAMS, name, body=self._body(name)
                ),
                "patch": self._operation(
                    info,
                    "patch",
                    f"patch{suffix}Status",
                    WRITE_PARAMS,
                    name,
                    body=self._body(name, PATCH_MEDIA),
                ),
            }
        if info.namespaced:
            out[f"{base}/{info.plural}"] = {
                "get": self._operation(
                    info, "list", f"list{suffix}ForAllNamespaces", LIST_PARAMS, items
                )
            }
        return out


def _kinds(registry: Registry, group_version: str) -> list[KindInfo]:
    return [i for i in registry.kinds if i.api_version == group_version]


def _url_key(info: KindInfo) -> str:
    return _prefix(info).lstrip("/")


def v3_documents(registry: Registry) -> dict[str, Doc]:
    """Each group-version's OpenAPI v3 document, keyed `api/v1`, `apis/<group>/<version>`."""
    out: dict[str, Doc] = {}
    builder = _Builder(v3=True)
    for group_version in registry.groups():
        kinds = _kinds(registry, group_version)
        paths: dict[str, Doc] = {}
        for info in kinds:
            paths.update(builder.paths(info))
        out[_url_key(kinds[0])] = {
            "openapi": "3.0.0",
            "info": {"title": "diskferry", "version": __version__},
            "paths": paths,
            "components": {
                "schemas": _schemas(kinds, builder.ref),
                "securitySchemes": {
                    "BearerToken": {"type": "apiKey", "in": "header", "name": "authorization"}
                },
            },
            "security": [{"BearerToken": []}],
        }
    return out


def _hash(doc: Doc) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()


def v3_index(docs: dict[str, Doc]) -> Doc:
    """`/openapi/v3`: where each group-version's document is, with a hash of its content."""
    return {
        "paths": {
            key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={_hash(doc)}"}
            for key, doc in docs.items()
        }
    }


def v2_schema(node: Doc) -> Doc:
    """A structural schema as kube-apiserver publishes a CRD's in OpenAPI v2, which kubectl
    validates against: no `anyOf`/`oneOf`/`allOf`/`not`, nothing under a node that keeps
    unknown fields, no type on an array left without items."""
    out = {key: value for key, value in node.items() if key not in V3_ONLY}
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("properties", None)
        out.pop("items", None)
    if out.get("type") == "array" and "items" not in out:
        out.pop("type")
    if "properties" in out:
        out["properties"] = {name: v2_schema(value) for name, value in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = v2_schema(out[key])
    return out


def v2_document(registry: Registry) -> Doc:
    """`/openapi/v2`: one Swagger 2.0 document of every kind."""
    builder = _Builder(v3=False)
    paths: dict[str, Doc] = {}
    for info in registry.kinds:
        paths.update(builder.paths(info))
    definitions = _schemas(registry.kinds, builder.ref)
    return {
        "swagger": "2.0",
        "info": {"title": "diskferry", "version": __version__},
        "paths": paths,
        "definitions": {name: v2_schema(schema) for name, schema in definitions.items()},
        "securityDefinitions": {
            "BearerToken": {"type": "apiKey", "in": "header", "name": "authorization"}
        },
        "security": [{"BearerToken": []}],
    }
