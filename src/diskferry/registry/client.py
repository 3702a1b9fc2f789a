"""A synchronous OCI distribution client: auth challenges, manifests, blob reads and uploads."""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode, urljoin

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError, SSLError

from diskferry.base.retry import fault_text, pause
from diskferry.disk.http import TlsError, http_pool
from diskferry.registry.auth import (
    Challenge,
    Credentials,
    credentials_from_authfile,
    default_authfile,
    parse_challenge,
)
from diskferry.registry.errors import (
    BY_CODE,
    BY_STATUS,
    BlobUnknownError,
    ManifestUnknownError,
    RegistryError,
    UnauthorizedError,
)
from diskferry.registry.reference import Reference

_TOKEN_LIFETIME = 60  # seconds, when the token server does not say
_TOKEN_MARGIN = 5
_RETRY = frozenset({429, 500, 502, 503, 504})
CREDENTIALS_HINT = "give --creds or --authfile"


@dataclass
class RegistryOptions:
    """How to reach registries: credentials, auth file, CA bundle, plain HTTP on loopback."""

    credentials: Credentials | None = None
    authfile: str | None = None
    ca_bundle: str | None = None
    insecure: bool = False
    retries: int = 5
    backoff: float = 0.5
    timeout: float = 30.0


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine (localhost, 127/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class _Token:
    value: str
    expires: float


@dataclass
class RegistryClient:
    """One registry: requests answer its auth challenges, retry 5xx, and fail in one line."""

    registry: str
    host: str
    options: RegistryOptions = field(default_factory=RegistryOptions)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.options.insecure and not is_loopback(self.host):
            raise RegistryError(
                f"--insecure (plain HTTP) is allowed only for a registry on loopback, "
                f"not {self.registry}",
                reason="InsecureRefused",
            )
        self.base = f"{'http' if self.options.insecure else 'https'}://{self.registry}"
        self.credentials = self.options.credentials or self._from_authfile()
        self._pool = http_pool(self.options.ca_bundle, self.options.timeout)
        self._scheme: str | None = None
        self._challenge: Challenge | None = None
        self._tokens: dict[str, _Token] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_reference(cls, ref: Reference, options: RegistryOptions) -> RegistryClient:
        """A client of the registry `ref` names."""
        return cls(ref.registry, ref.host, options)

    def _from_authfile(self) -> Credentials | None:
        path = self.options.authfile or default_authfile()
        return credentials_from_authfile(path, self.registry) if path else None

    def url(self, path: str) -> str:
        """The absolute URL of `path` (or of a Location the registry sent)."""
        return urljoin(self.base + "/", path)

    def auth_headers(self, scope: str) -> dict[str, str]:
        """The Authorization header for `scope` (scopes apart by spaces), once asked for one."""
        with self._lock:
            if self._scheme == "basic" and self.credentials:
                return {"Authorization": self.credentials.basic()}
            if self._scheme == "bearer" and self._challenge is not None:
                token = self._tokens.get(scope)
                if token is None or token.expires <= self.clock():
                    token = self._fetch_token(self._challenge, scope)
                    self._tokens[scope] = token
                return {"Authorization": f"Bearer {token.value}"}
        return {}

    def _answer(self, challenge: Challenge, scope: str) -> None:
        with self._lock:
            self._scheme = challenge.scheme
            if challenge.scheme == "basic":
                if self.credentials is None:
                    raise UnauthorizedError(
                        f"{self.registry} asks for credentials", 401, hint=CREDENTIALS_HINT
                    )
                return
            self._challenge = challenge
            self._tokens.pop(scope, None)

    def _fetch_token(self, challenge: Challenge, scope: str) -> _Token:
        realm = challenge.params.get("realm")
        if not realm:
            raise UnauthorizedError(f"{self.registry}: its Bearer challenge names no realm", 401)
        query = [("scope", one) for one in scope.split()]
        if challenge.params.get("service"):
            query.append(("service", challenge.params["service"]))
        headers = {"Authorization": self.credentials.basic()} if self.credentials else {}
        where = realm.split("?", 1)[0]
        resp = self._send("GET", f"{realm}?{urlencode(query)}", headers, None, where)
        if resp.status in (401, 403):
            resp.drain_conn()
            raise UnauthorizedError(
                f"the token server {where} refused "
                f"{'the credentials given' if self.credentials else 'an anonymous token'} "
                f"for {scope}",
                resp.status,
            )
        if resp.status != 200:
            raise self._error(resp, f"token server {where}")
        try:
            answer = json.loads(resp.data)
            value = answer.get("token") or answer["access_token"]
        except (ValueError, KeyError, AttributeError) as e:
            raise UnauthorizedError(f"the token server {where} sent no token") from e
        lifetime = int(answer.get("expires_in") or _TOKEN_LIFETIME)
        return _Token(value, self.clock() + max(lifetime - _TOKEN_MARGIN, 1))

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        where: str,
        *,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        attempt = 0
        while True:
            try:
                return self._pool.request(
                    method,
                    url,
                    headers=headers,
                    body=body,
                    preload_content=not stream,
                    decode_content=False,
                )
            except (MaxRetryError, Urllib3Error) as e:
                reason = getattr(e, "reason", None) or e
                if isinstance(reason, SSLError):
                    raise TlsError(f"{where}: TLS verification failed: {reason}") from e
                attempt += 1
                if attempt > self.options.retries:
                    raise RegistryError(f"{where}: cannot connect: {fault_text(reason)}") from e
                pause(attempt, self.options.backoff, f"{where}: {fault_text(reason)}")

    def request(
        self,
        method: str,
        path: str,
        *,
        scope: str,
        what: str,
        ok: tuple[int, ...] = (200,),
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """One request, authorised for `scope`; an answer outside `ok` raises a typed error."""
        url = self.url(path)
        attempt = 0
        challenged = False
        while True:
            sent = {**(headers or {}), **self.auth_headers(scope)}
            resp = self._send(method, url, sent, body, what, stream=stream)
            if resp.status in ok:
                return resp
            if resp.status == 401 and not challenged:
                challenge = parse_challenge(resp.headers.get("WWW-Authenticate", ""))
                if challenge is not None:
                    resp.drain_conn()
                    challenged = True
                    self._answer(challenge, scope)
                    continue
            if resp.status in _RETRY and attempt < self.options.retries:
                resp.drain_conn()
                attempt += 1
                pause(attempt, self.options.backoff, f"{what}: HTTP {resp.status}")
                continue
            raise self._error(resp, what, url)

    def _error(self, resp: urllib3.BaseHTTPResponse, what: str, url: str = "") -> RegistryError:
        try:
            data = resp.data if resp.status != 204 else b""
            first = json.loads(data)["errors"][0]
            code, message = str(first.get("code", "")), str(first.get("message", ""))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, Urllib3Error):
            code, message = "", ""
        kind = BY_CODE.get(code) or BY_STATUS.get(resp.status, RegistryError)
        if resp.status == 404 and not code:  # a HEAD answers without a body
            if "/blobs/" in url:
                kind, code, message = BlobUnknownError, "BLOB_UNKNOWN", "blob unknown to registry"
            elif "/manifests/" in url:
                kind, code, message = ManifestUnknownError, "MANIFEST_UNKNOWN", "manifest unknown"
        said = message or resp.reason or "error"
        tail = f" ({code})" if code else f" (HTTP {resp.status})"
        hint = CREDENTIALS_HINT if kind is UnauthorizedError and self.credentials is None else None
        return kind(f"{what}: {said}{tail}", resp.status, hint=hint)
