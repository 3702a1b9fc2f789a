"""What Accept and Content-Type headers ask for: Tables, aggregated discovery, patches."""

from __future__ import annotations

from dataclasses import dataclass

from diskferry.control.errors import UnsupportedMediaTypeError

DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
APPLY_PATCH = "application/apply-patch+yaml"
BODY_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "")


@dataclass(frozen=True)
class MediaType:
    """One media type of a header, with its parameters (`as`, `g`, `v`)."""

    type: str
    params: dict[str, str]

    def is_json(self) -> bool:
        """Whether a JSON answer suits it."""
        return self.type in ("application/json", "application/*", "*/*")


def parse(header: str | None) -> list[MediaType]:
    """The media types of an Accept or Content-Type header, in the order given."""
    out = []
    for part in (header or "").split(","):
        kind, *params = (p.strip() for p in part.split(";"))
        if not kind:
            continue
        pairs = dict(p.partition("=")[::2] for p in params if "=" in p)
        out.append(MediaType(kind.lower(), {k.strip(): v.strip() for k, v in pairs.items()}))
    return out


def wants(header: str | None, as_: str, version: str, group: str) -> bool:
    """Whether the Accept header asks for the JSON `as_` of `group/version` before plain JSON."""
    for media in parse(header):
        if media.params.get("as") == as_:
            if media.params.get("v") == version and media.params.get("g") == group:
                return True
        elif media.is_json():
            return False
    return False


def wants_table(header: str | None) -> bool:
    """Whether a `meta.k8s.io/v1` Table is asked for."""
    return wants(header, "Table", "v1", "meta.k8s.io")


def wants_discovery_v2(header: str | None) -> bool:
    """Whether aggregated discovery (`apidiscovery.k8s.io/v2`) is asked for."""
    return wants(header, "APIGroupDiscoveryList", "v2", "apidiscovery.k8s.io")


def is_apply(content_type: str | None) -> bool:
    """Whether a PATCH's body is a server-side apply configuration."""
    media = parse(content_type)
    return bool(media) and media[0].type == APPLY_PATCH


def body_type(content_type: str | None) -> str:
    """The media type of a POST or PUT body (JSON or YAML); 415 for any other."""
    media = parse(content_type)
    name = media[0].type if media else ""
    if name not in BODY_TYPES:
        raise UnsupportedMediaTypeError(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/yaml, application/vnd.kubernetes.protobuf"
        )
    return name
