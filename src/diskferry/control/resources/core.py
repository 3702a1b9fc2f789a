"""The core kinds the daemon serves under `/api/v1`: Namespace, Secret and Event."""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import ApiModel, Resource


class NamespaceStatus(ApiModel):
    """A namespace's phase: Active, or Terminating while its objects are deleted."""

    phase: Literal["Active", "Terminating"] = Field(
        default="Active",
        description="Active (the default), or Terminating while its objects are deleted.",
    )


class Namespace(Resource):
    """A namespace objects live in."""

    api_version: Literal["v1"] = Field(default="v1", alias="apiVersion")
    kind: Literal["Namespace"] = "Namespace"
    spec: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Kubernetes' NamespaceSpec (`finalizers`: a list of names), kept as given.",
    )
    status: NamespaceStatus = Field(default_factory=NamespaceStatus)


class Secret(Resource):
    """Named secret values, base64 in `data`; `stringData` is folded into `data` on write.

    A Secret is kept readable by root only and never logged; `diskferry describe` shows its data
    only as sizes.
    """

    api_version: Literal["v1"] = Field(default="v1", alias="apiVersion")
    kind: Literal["Secret"] = "Secret"
    type: str = Field(
        default="Opaque",
        description="What the Secret holds, as Kubernetes names it (Opaque, the default; "
        "kubernetes.io/dockerconfigjson for a registry's credentials, ...); a field selector "
        "may pick Secrets by it.",
    )
    data: dict[str, str] = Field(
        default_factory=dict,
        description="The values by key, each in base64. Default empty.",
    )
    string_data: dict[str, str] = Field(
        default_factory=dict,
        alias="stringData",
        description="Values given as plain text, written into `data` (in base64) when the "
        "Secret is stored; never read back. Default empty.",
    )
    immutable: bool | None = Field(
        default=None,
        description="true: only the Secret's metadata may change any more (delete it and make "
        "it again to change the rest). Default false.",
    )

    @field_validator("data")
    @classmethod
    def _base64(cls, value: dict[str, str]) -> dict[str, str]:
        for key, encoded in value.items():
            try:
                base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"data[{key}]: not base64") from None
        return value

    def folded(self) -> Secret:
        """The secret with `stringData` encoded into `data`, as the API stores it."""
        data = dict(self.data)
        for key, text in self.string_data.items():
            data[key] = base64.b64encode(text.encode()).decode()
        return self.model_copy(update={"data": data, "string_data": {}})

    def value(self, key: str) -> bytes | None:
        """The decoded value of `key`, None when absent."""
        folded = self.folded()
        encoded = folded.data.get(key)
        return None if encoded is None else base64.b64decode(encoded)


class ObjectReference(ApiModel):
    """The object an event is about."""

    api_version: str | None = Field(
        default=None, alias="apiVersion", description="Its apiVersion (diskferry.io/v1alpha1)."
    )
    kind: str | None = Field(default=None, description="Its kind.")
    namespace: str | None = Field(default=None, description="Its namespace.")
    name: str | None = Field(default=None, description="Its name.")
    uid: str | None = Field(default=None, description="Its uid.")
    resource_version: str | None = Field(
        default=None,
        alias="resourceVersion",
        description="Its resourceVersion when the event happened.",
    )
    field_path: str | None = Field(
        default=None, alias="fieldPath", description="The part of it the event is about."
    )


class EventSource(ApiModel):
    """Who wrote an event."""

    component: str | None = Field(default=None, description="The component, such as diskferry.")
    host: str | None = Field(default=None, description="The host it runs on.")


class Event(Resource):
    """Something that happened to an object: a phase change, a failure, a warning."""

    api_version: Literal["v1"] = Field(default="v1", alias="apiVersion")
    kind: Literal["Event"] = "Event"
    involved_object: ObjectReference = Field(alias="involvedObject")
    reason: str = Field(
        default="",
        description="What happened, as one CamelCase word (Ready, Failed, InUse, ...).",
    )
    message: str = Field(default="", description="What happened, for people.")
    type: Literal["Normal", "Warning"] = Field(
        default="Normal", description="Normal (the default) or Warning."
    )
    count: int = Field(
        default=1,
        description="How many times it happened (1, the default); Events are deleted an hour "
        "after they were last seen.",
    )
    first_timestamp: datetime | None = Field(
        default=None, alias="firstTimestamp", description="When it first happened."
    )
    last_timestamp: datetime | None = Field(
        default=None, alias="lastTimestamp", description="When it last happened."
    )
    event_time: datetime | None = Field(
        default=None,
        alias="eventTime",
        description="When it happened, to the microsecond (Kubernetes' newer field); the "
        "daemon's own Events give firstTimestamp and lastTimestamp instead.",
    )
    source: EventSource = Field(default_factory=EventSource)
    reporting_component: str | None = Field(
        default=None, alias="reportingComponent", description="The component that wrote it."
    )
    reporting_instance: str | None = Field(
        default=None, alias="reportingInstance", description="The instance that wrote it."
    )
    action: str | None = Field(default=None, description="What was done, or failed.")


def event_reference(involved: dict[str, Any]) -> dict[str, Any]:
    """The involvedObject of an Event about `involved` (an object's API values)."""
    meta = involved.get("metadata") or {}
    reference = {
        "apiVersion": involved.get("apiVersion"),
        "kind": involved.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {key: value for key, value in reference.items() if value is not None}


def new_event(
    involved: dict[str, Any], type_: str, reason: str, message: str, component: str, now: str
) -> dict[str, Any]:
    """A first Event about `involved`, in its namespace (`default` for a cluster-scoped one),
    named after it and a digest of what happened and who says so: the same again is found by
    that name, and its count bumped."""
    meta = involved.get("metadata") or {}
    digest = hashlib.sha256(
        "\0".join((meta.get("uid") or "", type_, reason, message, component)).encode()
    ).hexdigest()[:16]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name', '')[:200]}.{digest}",
            "namespace": meta.get("namespace") or "default",
        },
        "involvedObject": event_reference(involved),
        "type": type_,
        "reason": reason,
        "message": message,
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component},
        "reportingComponent": component,
    }


NAMESPACES = KindInfo(
    group="",
    version="v1",
    kind="Namespace",
    plural="namespaces",
    model=Namespace,
    namespaced=False,
    short_names=("ns",),
    columns=(Column("Status", ".status.phase"), AGE),
)
SECRETS = KindInfo(
    group="",
    version="v1",
    kind="Secret",
    plural="secrets",
    model=Secret,
    has_status=False,
    field_selectors=("type",),
    columns=(Column("Type", ".type"), AGE),
)
EVENTS = KindInfo(
    group="",
    version="v1",
    kind="Event",
    plural="events",
    model=Event,
    short_names=("ev",),
    has_status=False,
    field_selectors=(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    columns=(
        Column("Last Seen", ".lastTimestamp", "date"),
        Column("Type", ".type"),
        Column("Reason", ".reason"),
        Column("Object", ".involvedObject.name"),
        Column("Message", ".message"),
    ),
)
