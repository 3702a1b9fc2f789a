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

from diskferry.base.errors import DiskferryError
from diskferry.control.resources import duration, quantity
from diskferry.control.resources.model import API_VERSION, ApiModel
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
    """Digests the file must match, in hex, over its bytes as received (before any
    decompression): of those given, the strongest (sha512, sha256, sha1, md5) is checked, and
    a mismatch fails the object with the reason ChecksumMismatch. Default: none, not checked."""

    md5: str | None = Field(
        default=None, pattern=r"^[0-9a-fA-F]{32}$", description="MD5, 32 hex digits."
    )
    sha1: str | None = Field(
        default=None, pattern=r"^[0-9a-fA-F]{40}$", description="SHA-1, 40 hex digits."
    )
    sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-fA-F]{64}$", description="SHA-256, 64 hex digits."
    )
    sha512: str | None = Field(
        default=None, pattern=r"^[0-9a-fA-F]{128}$", description="SHA-512, 128 hex digits."
    )


class DataSourceHTTP(ApiModel):
    """A file at an HTTP or HTTPS URL: raw, qcow2, vmdk, vhd, vhdx, vdi or iso, maybe
    compressed (gzip, xz, zstd, bzip2); its format and compression are found from its bytes."""

    url: str = Field(
        pattern=r"^https?://\S+$",
        description="The file's URL, http:// or https://, with no spaces; a user:password@ in "
        "it is sent as Basic authentication. Required.",
    )
    ca_bundle: Base64 | None = Field(
        default=None,
        alias="caBundle",
        description="PEM certificates, in base64, of the CAs the server's TLS certificate is "
        "verified with, instead of the system's. Default: the system's CAs.",
    )
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
    """The Secret, in the same namespace, with the registry's credentials: a Docker config
    under the key `.dockerconfigjson` (a Secret of type kubernetes.io/dockerconfigjson). The
    object waits while the Secret or its key is missing. Default: none, pulled anonymously."""

    name: str | None = Field(default=None, description="The Secret's name.")


class ImagePullSecret(ImagePullSecretName):
    """The Secret with the registry's credentials, a Docker config under the key
    `.dockerconfigjson`, in the namespace named. The image waits while the Secret or its key
    is missing. Default: none, pulled anonymously."""

    namespace: str | None = Field(default=None, description="The Secret's namespace.")


def registry_reference(image: str) -> str:
    """The docker:// reference of `containerImage.image` ("registry.example.org/disk:1", as
    Deckhouse takes it, or already docker://...)."""
    return image if is_reference(image) else f"docker://{image}"


def registry_on_loopback(reference: str) -> bool:
    """Whether the registry of the docker:// `reference` is on this machine (localhost,
    127/8, ::1)."""
    from diskferry.registry.client import is_loopback  # urllib3, only when an image is read

    return is_loopback(parse_reference(reference).host)


def _image_reference(value: str) -> str:
    try:
        parse_reference(registry_reference(value))
    except DiskferryError as e:
        raise invalid(f"not HOST[:PORT]/NAME[:TAG|@DIGEST]: {e.message}") from None
    return value


class ContainerImage(ApiModel):
    """A disk image in a container registry: a container-disk image, its disk file in a
    layer."""

    image: Annotated[str, AfterValidator(_image_reference)] = Field(
        min_length=1,
        description="The image's reference, HOST[:PORT]/NAME[:TAG|@DIGEST] "
        "(registry.example.org/disks/ubuntu:24.04), or the same after docker://. Required.",
    )
    image_pull_secret: ImagePullSecretName | None = Field(default=None, alias="imagePullSecret")
    ca_bundle: Base64 | None = Field(
        default=None,
        alias="caBundle",
        description="PEM certificates, in base64, of the CAs the registry's TLS certificate is "
        "verified with, instead of the system's. Default: the system's CAs; a registry on "
        "this machine (localhost, 127.0.0.0/8, ::1) without one is reached over plain HTTP.",
    )


class ObjectRefKind(StrEnum):
    """The kinds an image can be made from."""

    VIRTUAL_IMAGE = "VirtualImage"
    CLUSTER_VIRTUAL_IMAGE = "ClusterVirtualImage"
    VIRTUAL_DISK = "VirtualDisk"
    VIRTUAL_DISK_SNAPSHOT = "VirtualDiskSnapshot"


class ObjectRef(ApiModel):
    """An existing object whose data is copied: it is waited for until it is Ready."""

    kind: ObjectRefKind = Field(
        description="VirtualImage, ClusterVirtualImage, VirtualDisk or VirtualDiskSnapshot; "
        "required."
    )
    name: str = Field(
        min_length=1,
        description="The object's name: in the same namespace, or cluster-wide for a "
        "ClusterVirtualImage. Required.",
    )


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

    type: DataSourceType = Field(
        description="HTTP (a file at a URL, in `http`), ContainerImage (an image in a "
        "registry, in `containerImage`), ObjectRef (another object's data, in `objectRef`) or "
        "Upload (bytes a user uploads to status.imageUploadURLs, `upload` optional); only the "
        "sub-object of this type may be set. Required."
    )
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
    """How fast the data is read while the object is provisioned, as Deckhouse shows it:
    since the start (avg) and over the last seconds (current), each as text in binary units
    ("512/s", "1.5Mi/s", "12Mi/s") and in bytes a second (a string)."""

    avg: str | None = Field(default=None, description="The average speed, as text (12Mi/s).")
    avg_bytes: str | None = Field(
        default=None, alias="avgBytes", description="The average speed, in bytes a second."
    )
    current: str | None = Field(
        default=None, description="The speed over the last seconds, as text (12Mi/s)."
    )
    current_bytes: str | None = Field(
        default=None,
        alias="currentBytes",
        description="The speed over the last seconds, in bytes a second.",
    )


class ImageUploadURLs(ApiModel):
    """Where to upload the data of an Upload source, set once its upload server listens: PUT
    (or POST) the file's bytes to either URL. Each ends in a secret that is replaced when it
    expires (after 24h, or the annotation diskferry.io/upload-token-ttl), the old URLs then
    refused."""

    external: str | None = Field(
        default=None,
        description="The URL through the export proxy, for clients elsewhere; absent where "
        "nothing reaches the proxy from outside (a cluster with neither a Route nor an Ingress "
        "to it).",
    )
    in_cluster: str | None = Field(
        default=None,
        alias="inCluster",
        description="The URL of the upload server itself: on 127.0.0.1 of the daemon's host, "
        "or in a cluster its Service's (https://SERVICE.NAMESPACE.svc:8443).",
    )
