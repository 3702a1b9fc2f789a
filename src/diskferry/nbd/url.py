"""NBD URLs as the NBD URI spec writes them: nbd[s]://HOST[:PORT]/NAME, nbd[s]+unix:///NAME?socket=P."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from diskferry.disk.urls import without_credentials
from diskferry.nbd.errors import NbdUrlError
from diskferry.nbd.protocol import DEFAULT_PORT

# scheme -> (over a Unix socket, with TLS)
_SCHEMES = {
    "nbd": (False, False),
    "nbds": (False, True),
    "nbd+unix": (True, False),
    "nbds+unix": (True, True),
}
_TLS_PARAMS = {"tls-certificates", "tls-hostname", "tls-verify-peer"}
_USAGE = "use nbd://HOST[:PORT]/NAME or nbd+unix:///NAME?socket=PATH"


@dataclass(frozen=True)
class NbdUrl:
    """Where an NBD export is: a TCP host and port or a Unix socket, its name, and TLS wishes."""

    export: str
    host: str | None = None
    port: int = DEFAULT_PORT
    socket: str | None = None
    tls: bool = False
    tls_certificates: str | None = None
    tls_hostname: str | None = None
    tls_verify_peer: bool = True

    def __str__(self) -> str:
        """The URL of the export, for messages (TLS parameters left out)."""
        scheme = "nbds" if self.tls else "nbd"
        export = quote(self.export)
        if self.socket is not None:
            return f"{scheme}+unix:///{export}?socket={quote(self.socket)}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/{export}"


def parse_url(spec: str) -> NbdUrl:
    """Read an NBD URL, or raise NbdUrlError saying what is wrong with it."""
    shown = without_credentials(spec)
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError as e:
        raise NbdUrlError(f"cannot read NBD URL {shown!r}: {e}; {_USAGE}") from e
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise NbdUrlError(f"{shown!r} is not a supported NBD URL: {_USAGE}")
    unix, tls = _SCHEMES[scheme]
    if parts.fragment:
        raise NbdUrlError(f"NBD URL {shown!r} has a fragment (#...): remove it")
    params = _query(shown, parts.query)
    export = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    for name in _TLS_PARAMS & params.keys():
        if not tls:
            raise NbdUrlError(f"NBD URL {shown!r}: {name} needs an nbds:// or nbds+unix:// URL")
    verify = params.get("tls-verify-peer", "1")
    if verify not in ("0", "1"):
        raise NbdUrlError(f"NBD URL {shown!r}: tls-verify-peer must be 0 or 1")
    common = {
        "export": export,
        "tls": tls,
        "tls_certificates": params.get("tls-certificates"),
        "tls_hostname": params.get("tls-hostname"),
        "tls_verify_peer": verify == "1",
    }
    if unix:
        if parts.netloc:
            raise NbdUrlError(f"NBD URL {shown!r} names a host for a Unix socket: {_USAGE}")
        if not params.get("socket"):
            raise NbdUrlError(f"NBD URL {shown!r} has no socket=PATH: {_USAGE}")
        return NbdUrl(socket=params["socket"], **common)
    if "socket" in params:
        raise NbdUrlError(f"NBD URL {shown!r}: socket= needs nbd+unix://; {_USAGE}")
    if not parts.hostname:
        raise NbdUrlError(f"NBD URL {shown!r} has no host: {_USAGE}")
    return NbdUrl(host=parts.hostname, port=port or DEFAULT_PORT, **common)


def _query(shown: str, query: str) -> dict[str, str]:
    """Query parameters, percent-decoded (a '+' stays a '+'); unknown or repeated ones refused."""
    params: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        key = unquote(key)
        if key not in _TLS_PARAMS | {"socket"}:
            raise NbdUrlError(f"NBD URL {shown!r} has an unknown parameter {key!r}")
        if key in params:
            raise NbdUrlError(f"NBD URL {shown!r} repeats the parameter {key!r}")
        params[key] = unquote(value)
    return params
