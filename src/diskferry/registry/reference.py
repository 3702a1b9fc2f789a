"""Image references as skopeo writes them: docker://HOST[:PORT]/NAME[:TAG|@DIGEST]."""

from __future__ import annotations

import re
from dataclasses import dataclass

from diskferry.disk.schemes import is_reference
from diskferry.registry.errors import BadReferenceError

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DOCKER_HUB = "registry-1.docker.io"


@dataclass(frozen=True)
class Reference:
    """A registry (host[:port]), a repository, and a tag or a digest."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What goes after /manifests/: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def host(self) -> str:
        """The registry's host name, without the port."""
        if self.registry.startswith("["):
            return self.registry[1:].split("]")[0]
        return self.registry.rsplit(":", 1)[0] if ":" in self.registry else self.registry

    def with_digest(self, digest: str) -> Reference:
        """The same repository, pinned to `digest`."""
        return Reference(self.registry, self.repository, self.tag, digest)

    def __str__(self) -> str:
        tail = f"@{self.digest}" if self.digest else f":{self.tag or 'latest'}"
        return f"docker://{self.registry}/{self.repository}{tail}"


def parse_reference(text: str) -> Reference:
    """Parse docker://HOST[:PORT]/NAME[:TAG|@DIGEST]; a bare first component means Docker Hub."""
    if not is_reference(text):
        raise BadReferenceError(f"{text!r} is not a docker://HOST/NAME[:TAG|@DIGEST] reference")
    rest = text.removeprefix("docker://")
    rest, _, digest = rest.partition("@")
    first, sep, path = rest.partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        first, path = _DOCKER_HUB, rest if "/" in rest else f"library/{rest}"
    name, tag = path, None
    if ":" in path.rsplit("/", 1)[-1]:
        name, tag = path.rsplit(":", 1)
    if not first or not _NAME.match(name):
        raise BadReferenceError(f"{text!r}: {name!r} is not a repository name")
    if tag is not None and not _TAG.match(tag):
        raise BadReferenceError(f"{text!r}: {tag!r} is not a tag")
    if digest and not DIGEST.match(digest):
        raise BadReferenceError(f"{text!r}: {digest!r} is not a sha256 digest")
    return Reference(first, name, tag, digest or None)
