"""What the disk and image kinds share: data sources, quantities, progress, download speed."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from diskferry.control import duration, quantity
from diskferry.control.model import API_VERSION, ApiModel
from diskferry.disk.errors import DiskferryError
from diskferry.disk.schemes import is_reference
from diskferry.registry.reference import parse_reference


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message is `message` alone, without pydantic's prefix."""
    return PydanticCustomError("value_error", "{message}", {"message": message})


def _kept_as_text(parse: Callable[[Any], object]) -> Callable[[Any], str]:
    """A validator that keeps, as text, a value `parse` accepts, and gives `parse`'s error."""

    def check(value: Any) -> str:
        try:
            parse(value)
        except DiskferryError as e:
            raise invalid(e.message) from None
        return str(value)

    return check


def _base64(value: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("not base64") from None
    return value


Quantity = Annotated[
    str,
    BeforeValidator(_kept_as_text(quantity.parse_quantity)),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": quantity.FORMAT.pattern,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A quantity of bytes ("64Mi", "1G", 100), kept as given; `quantity.parse_quantity` reads it."""

Duration = Annotated[
    str, AfterValidator(_kept_as_text(duration.parse_duration)), WithJsonSchema({"type": "string"})
]
"""A duration as Go writes it ("2h", "1h30m0s"); `duration.parse_duration` reads it."""

Base64 = Annotated[
    str, AfterValidator(_base64), WithJsonSchema({"type": "string", "format": "byte"})
]
"""Bytes in base64, as Kubernetes writes a `[]byte` field."""

Progress = Annotated[str, Field(pattern=r"^(100(\.0+)?|\d{1,2}(\.\d+)?)%$")]
"""How far a job is: "0%", "42.5%", "100%"."""

ApiVersion = Annotated[Literal[API_VERSION], Field(alias="apiVersion")]  # type: ignore[valid-type]
"""The `apiVersion` of every diskferry.io kind."""


class DataSourceType(StrEnum):
    """Where a disk's or an image's data comes from."""

    HTTP = "HTTP"
    CONTAINER_IMAGE = "ContainerImage"
    OBJECT_REF = "ObjectRef"
    UPLOAD = "Upload"


class Checksum(ApiModel):
    """Digests the downloaded file must match, all of those given."""

    md5: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{32}$")
    sha1: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{40}$")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    sha512: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{128}$")


class DataSourceHTTP(ApiModel):
    """A file at an HTTP or HTTPS URL: qcow2, vmdk, vdi, vhdx, iso or raw, maybe gz or xz."""

    url: str = Field(pattern=r"^https?://\S+$")
    ca_bundle: Base64 | None = Field(default=None, alias="caBundle")
    checksum: Checksum | None = None


class DataSourceUpload(ApiModel):
    """What is known of the data a user uploads for a `type: Upload` source."""

    checksum: Checksum | None = Field(
        default=None,
        description=(
            "Digests the uploaded bytes (as sent, before any decompression) must match: md5, "
            "sha1, sha256 and sha512 in hex; the strongest one given is checked, as for "
            "http.checksum. A mismatch fails the object with the reason ChecksumMismatch. "
            "Default: none, the upload is not checked."
        ),
    )


class ImagePullSecretName(ApiModel):
    """The Secret, in the same namespace, with the registry's credentials."""

    name: str | None = None


class ImagePullSecret(ImagePullSecretName):
    """The Secret with the registry's credentials, in the namespace named."""

    namespace: str | None = None


def registry_reference(image: str) -> str:
    """The docker:// reference of `containerImage.image` ("registry.example.org/disk:1", as
    Deckhouse takes it, or already docker://...)."""
    return image if is_reference(image) else f"docker://{image}"


def _image_reference(value: str) -> str:
    try:
        parse_reference(registry_reference(value))
    except DiskferryError as e:
        raise invalid(f"not HOST[:PORT]/NAME[:TAG|@DIGEST]: {e.message}") from None
    return value


class ContainerImage(ApiModel):
    """An image in a container registry."""

    image: Annotated[str, AfterValidator(_image_reference)] = Field(min_length=1)
    image_pull_secret: ImagePullSecretName | None = Field(default=None, alias="imagePullSecret")
    ca_bundle: Base64 | None = Field(default=None, alias="caBundle")


class ObjectRefKind(StrEnum):
    """The kinds an image can be made from."""

    VIRTUAL_IMAGE = "VirtualImage"
    CLUSTER_VIRTUAL_IMAGE = "ClusterVirtualImage"
    VIRTUAL_DISK = "VirtualDisk"
    VIRTUAL_DISK_SNAPSHOT = "VirtualDiskSnapshot"


class ObjectRef(ApiModel):
    """An existing object whose data is copied."""

    kind: ObjectRefKind
    name: str = Field(min_length=1)


SUB_OBJECTS = {
    DataSourceType.HTTP: "http",
    DataSourceType.CONTAINER_IMAGE: "containerImage",
    DataSourceType.OBJECT_REF: "objectRef",
    DataSourceType.UPLOAD: "upload",
}
"""The one sub-object each type may have; each is required but `upload`."""
OPTIONAL_SUB_OBJECTS = {DataSourceType.UPLOAD}


def _data_source_rules(schema: dict[str, Any]) -> None:
    """The rule of `DataSource._one_matching` in the schema: offline (anyOf) and as CEL."""
    branches = []
    for kind in DataSourceType:
        branch: dict[str, Any] = {"properties": {"type": {"enum": [kind.value]}}}
        if kind not in OPTIONAL_SUB_OBJECTS:
            branch["required"] = [SUB_OBJECTS[kind]]
        branches.append(branch)
    schema["anyOf"] = branches
    rules = []
    for kind, wanted in SUB_OBJECTS.items():
        has = [f"!has(self.{name})" for name in SUB_OBJECTS.values() if name != wanted]
        if kind in OPTIONAL_SUB_OBJECTS:
            message = f"type {kind} cannot have the other sources"
        else:
            has.insert(0, f"has(self.{wanted})")
            message = f"type {kind} requires {wanted} and cannot have the other sources"
        rules.append(
            {"rule": f"self.type == '{kind}' ? {' && '.join(has)} : true", "message": message}
        )
    schema["x-kubernetes-validations"] = rules


class DataSource(ApiModel):
    """Where the data comes from: `type` and the one sub-object of that type."""

    model_config = ConfigDict(json_schema_extra=_data_source_rules)

    type: DataSourceType
    http: DataSourceHTTP | None = None
    container_image: ContainerImage | None = Field(default=None, alias="containerImage")
    object_ref: ObjectRef | None = Field(default=None, alias="objectRef")
    upload: DataSourceUpload | None = Field(
        default=None,
        description=(
            "What is known of the uploaded data (type Upload only; optional): its checksum. "
            "Default: none."
        ),
    )

    @model_validator(mode="after")
    def _one_matching(self) -> DataSource:
        given = {
            "http": self.http,
            "containerImage": self.container_image,
            "objectRef": self.object_ref,
            "upload": self.upload,
        }
        wanted = SUB_OBJECTS[self.type]
        if self.type not in OPTIONAL_SUB_OBJECTS and given[wanted] is None:
            raise invalid(f"type {self.type} requires {wanted}")
        others = [name for name, value in given.items() if value is not None and name != wanted]
        if others:
            raise invalid(f"type {self.type} cannot have {' or '.join(others)}")
        return self


class StatusSpeed(ApiModel):
    """The download speed, as text ("1.2 MiB/s") and in bytes per second (as a string)."""

    avg: str | None = None
    avg_bytes: str | None = Field(default=None, alias="avgBytes")
    current: str | None = None
    current_bytes: str | None = Field(default=None, alias="currentBytes")


class ImageUploadURLs(ApiModel):
    """Where to upload the data of an Upload source."""

    external: str | None = None
    in_cluster: str | None = Field(default=None, alias="inCluster")
