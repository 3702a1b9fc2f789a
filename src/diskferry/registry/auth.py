"""Registry credentials (--creds, Docker config `auths` files) and WWW-Authenticate challenges."""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from diskferry.registry.errors import RegistryError

_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^,\s]*))')


class AuthFileError(RegistryError):
    """The auth file cannot be read, or its entry cannot be decoded."""

    reason = "BadAuthFile"


@dataclass(frozen=True)
class Credentials:
    """A user name and password (or identity token) for one registry."""

    username: str
    password: str

    def basic(self) -> str:
        """The value of an `Authorization: Basic` header."""
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=***)"


@dataclass(frozen=True)
class Challenge:
    """What a 401 asks for: the scheme (basic or bearer) and its parameters."""

    scheme: str
    params: dict[str, str]


def parse_creds(text: str) -> Credentials:
    """USER:PASS as --creds takes it."""
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise AuthFileError("--creds is not USER:PASSWORD", reason="BadCredentials")
    return Credentials(user, password)


def default_authfile() -> Path | None:
    """The auth file skopeo and docker would read, when there is one."""
    candidates = [os.environ.get("REGISTRY_AUTH_FILE")]
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "containers/auth.json"))
    candidates.append(os.path.expanduser("~/.docker/config.json"))
    for path in candidates:
        if path and os.path.isfile(path):
            return Path(path)
    return None


def _host_of(key: str) -> str:
    return key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]


def credentials_from_authfile(path: str | Path, registry: str) -> Credentials | None:
    """The `auths` entry for `registry` in a Docker config file, when it has one."""
    try:
        auths = json.loads(Path(path).read_text()).get("auths", {})
    except (OSError, ValueError, AttributeError) as e:
        why = getattr(e, "strerror", None) or "not a JSON object"
        raise AuthFileError(f"cannot read the auth file {path}: {why}") from e
    if registry == "registry-1.docker.io":
        registry = "docker.io"
    for key, entry in auths.items():
        if _host_of(key) not in (registry, "index." + registry) or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError) as e:
                raise AuthFileError(f"{path}: the auth of {key} is not base64 USER:PASS") from e
            return Credentials(user, password)
        if entry.get("username"):
            return Credentials(entry["username"], entry.get("password", ""))
        if entry.get("identitytoken"):
            return Credentials("<token>", entry["identitytoken"])
    return None


def parse_challenge(header: str) -> Challenge | None:
    """The first challenge of a WWW-Authenticate header: Basic or Bearer with its params."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() not in ("basic", "bearer"):
        return None
    params = {m.group(1).lower(): m.group(2) or m.group(3) for m in _PARAM.finditer(rest)}
    return Challenge(scheme.lower(), params)
