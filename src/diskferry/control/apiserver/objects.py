"""The ObjectService: objects created, read, changed, deleted and watched as Kubernetes does."""

from __future__ import annotations

import base64
import binascii
import copy
import json
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from diskferry.control.apiserver.store import apply as applies
from diskferry.control.apiserver.store import patch as patches
from diskferry.control.apiserver.store.db import Database, Key, Tx
from diskferry.control.apiserver.store.feed import Feed, Watch
from diskferry.control.apiserver.store.selectors import matcher, parse_fields
from diskferry.control.apiserver.validation import FieldValidation, validate
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    NotFoundError,
)
from diskferry.control.resources import noeffect
from diskferry.control.resources.core import EVENTS, NAMESPACES, Secret, new_event
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.resources.labels import parse_labels
from diskferry.control.resources.model import GROUP, Resource
from diskferry.control.resources.updates import check_update

DEFAULT_NAMESPACE = "default"
KEEP_CHANGES = 10_000  # changes the feed keeps, as a watch may resume from one
EVENT_TTL = 3600.0
PROTECTED_NAMESPACES = (DEFAULT_NAMESPACE,)
SERVER_FIELDS = ("uid", "creationTimestamp", "deletionTimestamp", "generation", "resourceVersion")
EMPTY_OMITTED = ("labels", "annotations", "finalizers", "ownerReferences")
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
FOREGROUND = "foregroundDeletion"
PROPAGATIONS = ("Background", "Foreground", "Orphan")
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)

Obj = dict[str, Any]


@dataclass
class ObjectList:
    """One page of a list: its items, the resourceVersion it was read at, and how to go on."""

    items: list[Obj] = field(default_factory=list)
    resource_version: str = "0"
    continue_token: str | None = None
    remaining: int | None = None


def kind_key(info: KindInfo) -> str:
    """The store's name of a kind: `group/Kind`."""
    return f"{info.group}/{info.kind}"


def resource_name(info: KindInfo) -> str:
    """The kind as Kubernetes' messages name it: `secrets`, `virtualdisks.diskferry.io`."""
    return f"{info.plural}.{info.group}" if info.group else info.plural


def _not_found(info: KindInfo, name: str) -> NotFoundError:
    return NotFoundError(f'{resource_name(info)} "{name}" not found', kind=info.plural, name=name)


def _conflict(info: KindInfo, name: str, why: str) -> ConflictError:
    return ConflictError(
        f'Operation cannot be fulfilled on {resource_name(info)} "{name}": {why}',
        kind=info.plural,
        name=name,
    )


def _is_namespace(info: KindInfo) -> bool:
    return kind_key(info) == kind_key(NAMESPACES)


def _spec(obj: Obj) -> Obj:
    """What a generation counts: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _encode_continue(snapshot: int, last: Key) -> str:
    raw = json.dumps({"rv": snapshot, "start": list(last)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, Key]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, name = data["start"]
        return int(data["rv"]), (str(namespace), str(name))
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise BadRequestError("continue key is not valid") from None


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadRequestError(f"invalid resourceVersion {text!r}") from None


def typed_body(info: KindInfo, obj: Any) -> Obj:
    """A copy of the body `obj` with `info`'s apiVersion and kind (set when absent) and a
    metadata object; BadRequestError when it names another kind or is no object."""
    if not isinstance(obj, dict):
        raise BadRequestError("the body must be a JSON object")
    body = copy.deepcopy(obj)
    api_version = body.setdefault("apiVersion", info.api_version)
    kind = body.setdefault("kind", info.kind)
    if api_version != info.api_version:
        raise BadRequestError(
            f"the API version in the data ({api_version}) does not match the expected"
            f" API version ({info.api_version})"
        )
    if kind != info.kind:
        raise BadRequestError(
            f"the kind in the data ({kind}) does not match the expected kind ({info.kind})"
        )
    if body.get("metadata") is None:
        body["metadata"] = {}
    if not isinstance(body["metadata"], dict):
        raise BadRequestError("metadata must be a JSON object")
    return body


class ObjectService:
    """Objects of the registry's kinds in one SQLite file, with Kubernetes' semantics."""

    def __init__(
        self,
        db_path: Path,
        registry: Registry,
        clock: Clock | None = None,
        *,
        keep_changes: int = KEEP_CHANGES,
    ) -> None:
        self.registry = registry
        self.clock = clock or Clock()
        self.db = Database(db_path, keep_changes=keep_changes)
        self.feed = Feed(self.db)
        self._kinds = {kind_key(info): info for info in registry.kinds}
        with self._writing(dry_run=False) as tx:
            if tx.get(kind_key(NAMESPACES), "", DEFAULT_NAMESPACE) is None:
                body = typed_body(NAMESPACES, {"metadata": {"name": DEFAULT_NAMESPACE}})
                self._insert(tx, NAMESPACES, None, body)

    def close(self) -> None:
        """Wake every watch for good and close the state file."""
        self.feed.close()
        self.db.close()

    @contextmanager
    def _writing(self, *, dry_run: bool) -> Iterator[Tx]:
        with self.db.write(commit=not dry_run) as tx:  # the feed gets what it commits
            yield tx

    def resource_version(self) -> str:
        """The store's current resourceVersion."""
        with self.db.read() as tx:
            return str(tx.current_rv())

    # --- reading

    def get(self, info: KindInfo, namespace: str | None, name: str) -> Obj:
        """The object; NotFoundError when there is none."""
        with self.db.read() as tx:
            return self._current(tx, info, namespace, name)

    def _current(self, tx: Tx, info: KindInfo, namespace: str | None, name: str) -> Obj:
        obj = tx.get(kind_key(info), self._scope(info, namespace), name)
        if obj is None:
            raise _not_found(info, name)
        return obj

    def _scope(self, info: KindInfo, namespace: str | None) -> str:
        return (namespace or DEFAULT_NAMESPACE) if info.namespaced else ""

    def list(
        self,
        info: KindInfo,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList:
        """The objects of a kind (in `namespace`, or all), filtered, one page of `limit` at most.

        A continued list reads the same snapshot as its first page; GoneError once that
        snapshot is older than the change feed keeps.
        """
        match = matcher(parse_labels(label_selector), parse_fields(field_selector, info))
        scope = namespace if info.namespaced and namespace else None
        limit = limit if limit and limit > 0 else None
        after: Key | None = None
        with self.db.read() as tx:
            if continue_token:
                snapshot, after = _decode_continue(continue_token)
                if snapshot < tx.trimmed():
                    raise GoneError(CONTINUE_EXPIRED)
            else:
                snapshot = tx.current_rv()
            items: list[Obj] = []
            last: Key | None = None
            more = False
            for key, obj in tx.rows_at(kind_key(info), scope, after, snapshot):
                if not match(obj):
                    continue
                if limit and len(items) >= limit:
                    more = True
                    break
                items.append(obj)
                last = key
            page = ObjectList(items, str(snapshot))
            if more and last is not None:
                page.continue_token = _encode_continue(snapshot, last)
                if not label_selector and not field_selector:
                    page.remaining = tx.count(kind_key(info), scope, last)
        return page

    # --- writing

    def _stored(self, model: Resource) -> Obj:
        """The JSON stored for a validated model: Secrets folded, empty metadata lists left out."""
        if isinstance(model, Secret):
            model = model.folded()
        data = model.to_json()
        if isinstance(model, Secret):
            data.pop("stringData", None)
        meta = data["metadata"]
        for key in EMPTY_OMITTED:
            if not meta.get(key):
                meta.pop(key, None)
        return data

    def create(
        self,
        info: KindInfo,
        namespace: str | None,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_validation: FieldValidation = "Strict",
        manager: str | None = None,
    ) -> tuple[Obj, list[str]]:
        """Store a new object; returns it as stored and the validation warnings. Its fields
        are `manager`'s (operation Update) when one is named.

        AlreadyExistsError when the name is taken, NotFoundError when the namespace is missing.
        """
        body = typed_body(info, obj)
        with self._writing(dry_run=dry_run) as tx:
            return self._insert(tx, info, namespace, body, field_validation, manager)

    def _insert(
        self,
        tx: Tx,
        info: KindInfo,
        namespace: str | None,
        body: Obj,
        field_validation: FieldValidation = "Strict",
        manager: str | None = None,
    ) -> tuple[Obj, list[str]]:
        meta = body["metadata"]
        if meta.get("resourceVersion"):
            raise BadRequestError("resourceVersion should not be set on objects to be created")
        if not applies.decodable(meta.get("managedFields", [])):  # as kube-apiserver: none
            meta.pop("managedFields")
        scope = self._create_scope(info, namespace, meta)
        for key in SERVER_FIELDS:
            meta.pop(key, None)
        if info.has_status:
            body.pop("status", None)
        name = meta.get("name") or self._generated_name(tx, info, scope, meta)
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=self.clock.stamp())
        meta["generation"] = 1
        if info.namespaced:
            meta["namespace"] = scope
            self._require_namespace(tx, scope)
        model, warnings = validate(info, body, field_validation)
        data = self._stored(model)
        warnings = [*warnings, *noeffect.warnings(model, data, None)]
        self._record(info, None, data, None, manager)
        if tx.get(kind_key(info), scope, name) is not None:
            raise AlreadyExistsError(
                f'{resource_name(info)} "{name}" already exists', kind=info.plural, name=name
            )
        return tx.write(kind_key(info), data, "ADDED"), warnings

    def _create_scope(self, info: KindInfo, namespace: str | None, meta: Obj) -> str:
        if not info.namespaced:
            meta.pop("namespace", None)
            return ""
        given = meta.get("namespace")
        if namespace and given and given != namespace:
            raise BadRequestError(
                "the namespace of the provided object does not match the namespace sent on"
                " the request"
            )
        return namespace or given or DEFAULT_NAMESPACE

    def _generated_name(self, tx: Tx, info: KindInfo, scope: str, meta: Obj) -> str:
        prefix = meta.get("generateName")
        if not prefix:
            raise InvalidError(
                f'{info.group_kind} "" is invalid: metadata.name: Required value: name or'
                " generateName is required",
                kind=info.kind,
                causes=[{"reason": "FieldValueRequired", "field": "metadata.name"}],
            )
        while True:
            name = prefix + "".join(secrets.choice(SUFFIX_ALPHABET) for _ in range(5))
            if tx.get(kind_key(info), scope, name) is None:
                return name

    def _require_namespace(self, tx: Tx, namespace: str) -> None:
        found = tx.get(kind_key(NAMESPACES), "", namespace)
        if found is None:
            raise NotFoundError(
                f'namespaces "{namespace}" not found', kind="namespaces", name=namespace
            )
        if found["metadata"].get("deletionTimestamp"):
            raise ForbiddenError(
                f"unable to create new content in namespace {namespace} because it is being"
                " terminated",
                kind="namespaces",
                name=namespace,
            )

    def update(
        self,
        info: KindInfo,
        namespace: str | None,
        name: str,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation = "Strict",
        manager: str | None = None,
    ) -> tuple[Obj, list[str]]:
        """Replace an object (or only its status, with subresource "status"); the fields it
        changes become `manager`'s when one is named.

        ConflictError when `metadata.resourceVersion` is given and is not the current one.
        """
        body = typed_body(info, obj)
        with self._writing(dry_run=dry_run) as tx:
            current = self._current(tx, info, namespace, name)
            return self._replace(tx, info, current, body, subresource, field_validation, manager)

    def patch(
        self,
        info: KindInfo,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation = "Strict",
        manager: str | None = None,
    ) -> tuple[Obj, list[str]]:
        """Patch an object with a merge, JSON or (core kinds only) strategic merge patch; the
        fields it changes become `manager`'s when one is named."""
        kind = patches.patch_kind(patch_type, strategic=info.group != GROUP)
        parsed = patches.decode(patch)
        with self._writing(dry_run=dry_run) as tx:
            current = self._current(tx, info, namespace, name)
            patched = typed_body(info, patches.apply(current, parsed, kind))
            return self._replace(tx, info, current, patched, subresource, field_validation, manager)

    def apply(
        self,
        info: KindInfo,
        namespace: str | None,
        name: str,
        config: Obj,
        manager: str,
        *,
        force: bool = False,
        dry_run: bool = False,
        field_validation: FieldValidation = "Strict",
    ) -> tuple[Obj, list[str], bool]:
        """Server-side apply of `config` by `manager`: the object created or changed, its
        validation warnings, and whether it was created.

        ConflictError when another manager owns a field `config` changes, unless `force`.
        """
        body = typed_body(info, config)
        with self._writing(dry_run=dry_run) as tx:
            current = tx.get(kind_key(info), self._scope(info, namespace), name)
            merged = applies.apply(
                current,
                body,
                manager,
                force=force,
                with_status=info.has_status,
                now=self.clock.stamp(),
            )
            if current is None:
                obj, warnings = self._insert(tx, info, namespace, merged, field_validation)
                return obj, warnings, True
            obj, warnings = self._replace(tx, info, current, merged, None, field_validation)
            return obj, warnings, False

    def _replace(
        self,
        tx: Tx,
        info: KindInfo,
        current: Obj,
        body: Obj,
        subresource: str | None,
        field_validation: FieldValidation,
        manager: str | None = None,
    ) -> tuple[Obj, list[str]]:
        cur_meta = current["metadata"]
        name, meta = cur_meta["name"], body["metadata"]
        if meta.get("name") not in (None, name):
            raise BadRequestError(
                f"the name of the object ({meta.get('name')}) does not match the name on the"
                f" URL ({name})"
            )
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != cur_meta["resourceVersion"]:
            raise _conflict(
                info,
                name,
                "the object has been modified; please apply your changes to the latest version"
                " and try again",
            )
        if subresource == "status" and info.has_status:
            new = copy.deepcopy(current)
            new["status"] = body.get("status") or {}
        elif subresource is not None:
            raise NotFoundError(f"the server could not find the requested resource ({subresource})")
        else:
            new = self._without_server_changes(info, current, body)
        model, warnings = validate(info, new, field_validation)
        if subresource is None:
            check_update(info, info.model.model_validate(current), model)
        data = self._stored(model)
        warnings = [*warnings, *noeffect.warnings(model, data, current)]
        self._check_immutable(info, current, data)
        self._record(info, current, data, subresource, manager)
        if _spec(data) != _spec(current):
            data["metadata"]["generation"] = int(cur_meta.get("generation") or 0) + 1
        if data == current:
            return current, warnings
        if data["metadata"].get("deletionTimestamp") and not data["metadata"].get("finalizers"):
            return self._finish(tx, info, data), warnings
        return tx.write(kind_key(info), data, "MODIFIED"), warnings

    def _record(
        self,
        info: KindInfo,
        current: Obj | None,
        new: Obj,
        subresource: str | None,
        manager: str | None,
    ) -> None:
        """The fields `new` changes become `manager`'s, when a manager is named."""
        if manager:
            applies.record_update(
                current,
                new,
                manager,
                subresource=subresource,
                with_status=info.has_status,
                now=self.clock.stamp(),
            )

    def _without_server_changes(self, info: KindInfo, current: Obj, body: Obj) -> Obj:
        """`body` with the fields only the server sets taken from `current`."""
        new = copy.deepcopy(body)
        meta, cur_meta = new["metadata"], current["metadata"]
        for key in (*SERVER_FIELDS, "name", "namespace"):
            if key in cur_meta:
                meta[key] = cur_meta[key]
            else:
                meta.pop(key, None)
        given = meta.get("managedFields")
        if given is None or not applies.decodable(given):  # as kube-apiserver: the object's own
            meta["managedFields"] = copy.deepcopy(cur_meta.get("managedFields"))
        if info.has_status:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        if cur_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(cur_meta.get("finalizers") or [])
            if added:
                raise InvalidError(
                    f'{info.group_kind} "{cur_meta["name"]}" is invalid: metadata.finalizers:'
                    " Forbidden: no new finalizers can be added if the object is being deleted",
                    kind=info.kind,
                    name=cur_meta["name"],
                )
        return new

    def _check_immutable(self, info: KindInfo, current: Obj, new: Obj) -> None:
        if info.kind == "Secret" and current.get("immutable") and _spec(current) != _spec(new):
            raise InvalidError(
                f'Secret "{current["metadata"]["name"]}" is invalid: data: Forbidden: field is'
                " immutable when `immutable` is set",
                kind=info.kind,
                name=current["metadata"]["name"],
            )

    # --- deleting

    def delete(
        self,
        info: KindInfo,
        namespace: str | None,
        name: str,
        *,
        dry_run: bool = False,
        propagation: str = "Background",
        uid_precondition: str | None = None,
        rv_precondition: str | None = None,
    ) -> Obj:
        """Delete an object: at once, or marked with deletionTimestamp while finalizers remain.

        Its dependents (ownerReferences naming its uid) are deleted after it (Background),
        before it (Foreground), or left with that reference removed (Orphan).
        """
        if propagation not in PROPAGATIONS:
            raise BadRequestError(f"unknown propagationPolicy {propagation!r}")
        with self._writing(dry_run=dry_run) as tx:
            current = self._current(tx, info, namespace, name)
            meta = current["metadata"]
            if uid_precondition and uid_precondition != meta["uid"]:
                raise _conflict(
                    info,
                    name,
                    f"Precondition failed: UID in precondition: {uid_precondition}, UID in"
                    f" object meta: {meta['uid']}",
                )
            if rv_precondition and rv_precondition != meta["resourceVersion"]:
                raise _conflict(
                    info,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {rv_precondition},"
                    f" ResourceVersion in object meta: {meta['resourceVersion']}",
                )
            if _is_namespace(info) and name in PROTECTED_NAMESPACES:
                raise ForbiddenError(
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    kind="namespaces",
                    name=name,
                )
            return self._delete(tx, info, current, propagation)

    def _delete(self, tx: Tx, info: KindInfo, obj: Obj, propagation: str) -> Obj:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return obj
        if propagation == "Orphan":
            self._orphan(tx, meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        dependents = tx.dependents(meta["uid"])
        if propagation == "Foreground" and dependents and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        is_namespace = _is_namespace(info)
        if not finalizers and not is_namespace:
            return self._remove(tx, info, obj)
        marked = copy.deepcopy(obj)
        marked["metadata"]["deletionTimestamp"] = self.clock.stamp()
        marked["metadata"]["finalizers"] = finalizers
        if not finalizers:
            del marked["metadata"]["finalizers"]
        if is_namespace:
            marked["status"] = {"phase": "Terminating"}
        marked = tx.write(kind_key(info), marked, "MODIFIED")
        if is_namespace:
            self._empty_namespace(tx, meta["name"])
        elif propagation == "Foreground":
            self._delete_dependents(tx, meta["uid"], "Foreground")
            self._owner_progress(tx, meta["uid"])
        return (
            tx.get(kind_key(info), marked["metadata"].get("namespace", ""), meta["name"]) or marked
        )

    def _empty_namespace(self, tx: Tx, namespace: str) -> None:
        for kind, name in tx.in_namespace(namespace):
            obj = tx.get(kind, namespace, name)
            info = self._kinds.get(kind)
            if obj is not None and info is not None:
                self._delete(tx, info, obj, "Background")
        self._namespace_done(tx, namespace)

    def _namespace_done(self, tx: Tx, namespace: str) -> None:
        """Remove a terminating namespace once nothing is left in it."""
        ns = tx.get(kind_key(NAMESPACES), "", namespace)
        if (
            ns is not None
            and ns["metadata"].get("deletionTimestamp")
            and not ns["metadata"].get("finalizers")
            and not tx.in_namespace(namespace)
        ):
            self._remove(tx, NAMESPACES, ns)

    def _finish(self, tx: Tx, info: KindInfo, obj: Obj) -> Obj:
        """An object being deleted whose last finalizer went: remove it, or keep a namespace
        that still holds objects."""
        if _is_namespace(info) and tx.in_namespace(obj["metadata"]["name"]):
            return tx.write(kind_key(info), obj, "MODIFIED")
        return self._remove(tx, info, obj)

    def _remove(self, tx: Tx, info: KindInfo, obj: Obj) -> Obj:
        """Remove the object for good, then collect its dependents and let its owners go on."""
        final = tx.write(kind_key(info), copy.deepcopy(obj), "DELETED")
        meta = final["metadata"]
        self._delete_dependents(tx, meta["uid"], "Background")
        for ref in meta.get("ownerReferences", []):
            self._owner_progress(tx, ref["uid"])
        if info.namespaced:
            self._namespace_done(tx, meta["namespace"])
        return final

    def _delete_dependents(self, tx: Tx, owner_uid: str, propagation: str) -> None:
        for kind, namespace, name in tx.dependents(owner_uid):
            obj, info = tx.get(kind, namespace, name), self._kinds.get(kind)
            if obj is None or info is None:
                continue
            refs = obj["metadata"].get("ownerReferences", [])
            others = [r for r in refs if r["uid"] != owner_uid and tx.by_uid(r["uid"]) is not None]
            if others:
                self._drop_owner(tx, info, obj, owner_uid)
            else:
                self._delete(tx, info, obj, propagation)

    def _orphan(self, tx: Tx, owner_uid: str) -> None:
        for kind, namespace, name in tx.dependents(owner_uid):
            obj, info = tx.get(kind, namespace, name), self._kinds.get(kind)
            if obj is not None and info is not None:
                self._drop_owner(tx, info, obj, owner_uid)

    def _drop_owner(self, tx: Tx, info: KindInfo, obj: Obj, owner_uid: str) -> None:
        new = copy.deepcopy(obj)
        refs = [r for r in new["metadata"].get("ownerReferences", []) if r["uid"] != owner_uid]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        tx.write(kind_key(info), new, "MODIFIED")

    def _owner_progress(self, tx: Tx, owner_uid: str) -> None:
        """A dependent went: an owner deleted in the foreground goes once none is left."""
        found = tx.by_uid(owner_uid)
        if found is None:
            return
        kind, owner = found
        info, meta = self._kinds.get(kind), owner["metadata"]
        if (
            info is None
            or not meta.get("deletionTimestamp")
            or FOREGROUND not in meta.get("finalizers", [])
            or tx.dependents(owner_uid)
        ):
            return
        new = copy.deepcopy(owner)
        new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND]
        if new["metadata"]["finalizers"]:
            tx.write(kind, new, "MODIFIED")
        else:
            del new["metadata"]["finalizers"]
            self._finish(tx, info, new)

    # --- watching

    def watch(
        self,
        info: KindInfo | None,
        namespace: str | None,
        *,
        resource_version: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """Follow changes after `resource_version` (of one kind, or all with None).

        Without a resourceVersion (or "0") the watch starts with an ADDED event for each
        current object. GoneError when the feed no longer reaches back that far.
        """
        match = matcher(parse_labels(label_selector), parse_fields(field_selector, info))
        scope = namespace if namespace and (info is None or info.namespaced) else None
        kinds = [info] if info is not None else self.registry.kinds
        if resource_version in (None, "", "0"):
            start, listing = int(self.resource_version()), [kind_key(each) for each in kinds]
        else:
            start, listing = _parse_rv(resource_version), []

        def bookmark(rv: int) -> Obj:
            api_version, kind = (info.api_version, info.kind) if info else ("v1", "Status")
            return {
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"resourceVersion": str(rv)},
            }

        return Watch(
            self.db,
            self.feed,
            start=start,
            kind=kind_key(info) if info else None,
            namespace=scope,
            match=match,
            listing=listing,
            bookmark=bookmark,
        )

    # --- events

    def record_event(
        self, involved: Obj, type_: str, reason: str, message: str, component: str
    ) -> Obj:
        """Record an Event about `involved` in its namespace; the same one again bumps its count."""
        body = new_event(involved, type_, reason, message, component, self.clock.stamp())
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        with self._writing(dry_run=False) as tx:
            existing = tx.get(kind_key(EVENTS), namespace, name)
            if existing is None:
                return self._insert(tx, EVENTS, namespace, typed_body(EVENTS, body))[0]
            bumped = copy.deepcopy(existing)
            bumped["count"] = int(existing.get("count") or 1) + 1
            bumped["lastTimestamp"] = body["lastTimestamp"]
            bumped["involvedObject"] = body["involvedObject"]
            return tx.write(kind_key(EVENTS), bumped, "MODIFIED")

    def expire_events(self, ttl: float = EVENT_TTL) -> int:
        """Delete the Events last seen more than `ttl` seconds ago, as Kubernetes does after an
        hour; returns how many went."""
        cutoff = rfc3339(self.clock.now() - timedelta(seconds=ttl))
        with self._writing(dry_run=False) as tx:
            rows = tx.rows_at(kind_key(EVENTS), None, None, tx.current_rv())
            old = [obj for _, obj in rows if (obj.get("lastTimestamp") or "") < cutoff]
            for obj in old:
                self._remove(tx, EVENTS, obj)
        return len(old)
