"""Test peers for the registry: a proxy that breaks on purpose, and a JWT token server."""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import urllib3

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@dataclass
class Faults:
    """What the proxy breaks: errors to answer per method, a blob body to cut once."""

    errors: dict[str, int] = field(default_factory=dict)
    status: int = 503
    body: bytes = b""
    cut_blob_after: int | None = None
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)


def _proxy_handler(upstream: str, faults: Faults) -> type[BaseHTTPRequestHandler]:
    pool = urllib3.PoolManager()

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            faults.seen.append((self.command, self.path, self.headers.get("Range")))
            if faults.errors.get(self.command, 0) > 0:
                faults.errors[self.command] -= 1
                self.send_response(faults.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(faults.body)))
                self.end_headers()
                self.wfile.write(faults.body)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            resp = pool.request(
                self.command,
                upstream + self.path,
                headers=headers,
                body=body,
                redirect=False,
                preload_content=False,
                decode_content=False,
            )
            cut = None
            if (
                self.command == "GET"
                and "/blobs/" in self.path
                and resp.status == 200
                and faults.cut_blob_after is not None
            ):
                cut, faults.cut_blob_after = faults.cut_blob_after, None
            self.send_response(resp.status)
            for name, value in resp.headers.items():
                if name.lower() not in _HOP:
                    self.send_header(name, value)
            self.end_headers()
            sent = 0
            for chunk in resp.stream(1 << 16):
                if cut is not None and sent + len(chunk) > cut:
                    self.wfile.write(chunk[: cut - sent])
                    self.wfile.flush()
                    self.close_connection = True
                    resp.release_conn()
                    return
                self.wfile.write(chunk)
                sent += len(chunk)
            resp.release_conn()

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    return Proxy


@contextmanager
def flaky_proxy(upstream: str) -> Iterator[tuple[str, Faults]]:
    """A proxy to `upstream` on 127.0.0.1: its address and its faults."""
    faults = Faults()
    with _serving(_proxy_handler(upstream, faults)) as server:
        yield f"127.0.0.1:{server.server_address[1]}", faults


@dataclass
class TokenIssuer:
    """Signs registry tokens (RS256, the certificate in x5c) for one user."""

    key: object
    cert_der: bytes
    cert_pem: Path
    user: str
    password: str
    service: str = "diskferry-test-registry"
    issuer: str = "diskferry-test-issuer"
    lifetime: int = 300
    issued: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, work: Path, user: str, password: str) -> TokenIssuer:
        """A fresh RSA key and a self-signed certificate, written for the registry."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "diskferry test tokens")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        pem = work / "token-cert.pem"
        pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(key, cert.public_bytes(serialization.Encoding.DER), pem, user, password)

    def token(self, scopes: list[str]) -> str:
        """A signed JWT granting every action asked in `scopes`."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": self.user,
            "aud": self.service,
            "iat": now,
            "nbf": now - 10,
            "exp": now + self.lifetime,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        header = {"alg": "RS256", "typ": "JWT", "x5c": [base64.b64encode(self.cert_der).decode()]}
        signed = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        self.issued.append(" ".join(scopes))
        return f"{signed}.{b64(signature)}"


def _token_handler(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    expected = "Basic " + base64.b64encode(f"{issuer.user}:{issuer.password}".encode()).decode()

    class Tokens(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            if self.headers.get("Authorization") != expected:
                body, status = b'{"details": "bad credentials"}', 401
            else:
                token = issuer.token(query.get("scope", []))
                body = json.dumps({"token": token, "expires_in": issuer.lifetime}).encode()
                status = 200
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Tokens


@contextmanager
def token_server(issuer: TokenIssuer) -> Iterator[str]:
    """Serve tokens at http://127.0.0.1:PORT/token; the realm URL."""
    with _serving(_token_handler(issuer)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
