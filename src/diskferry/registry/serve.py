"""`image serve`: the distribution API, read and write, over OCI layouts (one per repository)."""

from __future__ import annotations

import base64
import hmac
import json
import re
import secrets
import time
import uuid
from pathlib import Path

from aiohttp import web

from diskferry.registry.digests import DIGEST_FORMAT, hasher
from diskferry.registry.errors import DigestMismatchError
from diskferry.registry.images import OCI_INDEX, OCI_MANIFEST
from diskferry.registry.layout import Layout, LayoutBlobWriter

_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_TOKEN_LIFETIME = 300
_CHUNK = 1 << 16


def _error(status: int, code: str, message: str) -> web.Response:
    body = {"errors": [{"code": code, "message": message}]}
    return web.json_response(body, status=status)


class RegistryServer:
    """Repositories as OCI layouts under `root`; a token (when given) guards every request."""

    def __init__(self, root: Path, token: str | None = None) -> None:
        self.root = root
        self.token = token
        self._sessions: dict[str, float] = {}
        self._uploads: dict[str, LayoutBlobWriter] = {}

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[self._auth], client_max_size=1 << 22)
        app.router.add_get("/token", self.issue_token)
        app.router.add_get("/v2/", self.ping)
        repo = "/v2/{name:[a-z0-9._/-]+}"
        app.router.add_route("GET", repo + "/manifests/{ref}", self.get_manifest)
        app.router.add_route("HEAD", repo + "/manifests/{ref}", self.get_manifest)
        app.router.add_put(repo + "/manifests/{ref}", self.put_manifest)
        app.router.add_route("GET", repo + "/blobs/{digest}", self.get_blob)
        app.router.add_route("HEAD", repo + "/blobs/{digest}", self.get_blob)
        app.router.add_post(repo + "/blobs/uploads/", self.start_upload)
        app.router.add_patch(repo + "/blobs/uploads/{id}", self.patch_upload)
        app.router.add_put(repo + "/blobs/uploads/{id}", self.finish_upload)
        app.router.add_get(repo + "/tags/list", self.tags)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler) -> web.StreamResponse:
        if self.token is None or request.path == "/token" or self._authorised(request):
            return await handler(request)
        realm = f"{request.scheme}://{request.host}/token"
        resp = _error(401, "UNAUTHORIZED", "authentication required")
        resp.headers["WWW-Authenticate"] = f'Bearer realm="{realm}",service="diskferry"'
        return resp

    def _authorised(self, request: web.Request) -> bool:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not value:
            return False
        assert self.token is not None
        if hmac.compare_digest(value.encode(), self.token.encode()):
            return True
        expires = self._sessions.get(value)
        return expires is not None and expires > time.monotonic()

    async def issue_token(self, request: web.Request) -> web.Response:
        """A session token for Basic credentials whose password is the server's token."""
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        try:
            password = base64.b64decode(value).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            password = ""
        token = self.token or ""
        if scheme.lower() != "basic" or not hmac.compare_digest(password.encode(), token.encode()):
            return _error(401, "UNAUTHORIZED", "the credentials are not valid")
        session = secrets.token_urlsafe(32)
        self._sessions[session] = time.monotonic() + _TOKEN_LIFETIME
        return web.json_response({"token": session, "expires_in": _TOKEN_LIFETIME})

    async def ping(self, request: web.Request) -> web.Response:
        """The API version check."""
        return web.json_response({})

    def _layout(self, request: web.Request, create: bool = False) -> Layout | None:
        name = request.match_info["name"]
        if not _NAME.match(name) or ".." in name:
            raise web.HTTPBadRequest(text="bad repository name")
        folder = self.root / name
        if create:
            return Layout.create(folder)
        return Layout(folder) if (folder / "oci-layout").is_file() else None

    async def get_manifest(self, request: web.Request) -> web.StreamResponse:
        """A manifest by tag or digest."""
        layout = self._layout(request)
        ref = request.match_info["ref"]
        digest = ref if DIGEST_FORMAT.match(ref) else None
        if layout is not None and digest is None:
            for entry in layout.index().get("manifests", []):
                if (entry.get("annotations") or {}).get("org.opencontainers.image.ref.name") == ref:
                    digest = entry["digest"]
        if layout is None or digest is None or not layout.blob_path(digest).is_file():
            return _error(404, "MANIFEST_UNKNOWN", "manifest unknown")
        body = layout.blob_path(digest).read_bytes()
        media_type = json.loads(body).get("mediaType") or OCI_MANIFEST
        headers = {"Docker-Content-Digest": digest, "Content-Type": media_type}
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(len(body))})
        return web.Response(body=body, headers=headers)

    async def put_manifest(self, request: web.Request) -> web.Response:
        """Store a manifest; a tag points at it."""
        layout = self._layout(request, create=True)
        body = await request.read()
        media_type = request.content_type or OCI_MANIFEST
        if media_type not in (OCI_MANIFEST, OCI_INDEX) and "json" not in media_type:
            return _error(400, "MANIFEST_INVALID", f"unsupported media type {media_type}")
        ref = request.match_info["ref"]
        if DIGEST_FORMAT.match(ref):
            writer = LayoutBlobWriter(layout)
            writer.write(body)
            try:
                writer.finish(ref)
            except DigestMismatchError:
                return _error(400, "DIGEST_INVALID", "the manifest does not match the digest")
            digest = ref
        else:
            digest = layout.destination(ref).put_manifest(body, media_type)
        location = f"/v2/{request.match_info['name']}/manifests/{digest}"
        return web.Response(
            status=201, headers={"Location": location, "Docker-Content-Digest": digest}
        )

    async def get_blob(self, request: web.Request) -> web.StreamResponse:
        """A blob, with Range."""
        layout = self._layout(request)
        digest = request.match_info["digest"]
        if layout is None or not DIGEST_FORMAT.match(digest):
            return _error(404, "BLOB_UNKNOWN", "blob unknown")
        path = layout.blob_path(digest)
        if not path.is_file():
            return _error(404, "BLOB_UNKNOWN", "blob unknown")
        return web.FileResponse(path, headers={"Docker-Content-Digest": digest})

    async def start_upload(self, request: web.Request) -> web.Response:
        """Begin an upload (a monolithic one when the digest is given now)."""
        layout = self._layout(request, create=True)
        writer = LayoutBlobWriter(layout)
        upload = uuid.uuid4().hex
        self._uploads[upload] = writer
        location = f"/v2/{request.match_info['name']}/blobs/uploads/{upload}"
        if "digest" in request.query:
            await self._take(request, writer)
            return self._commit(request, upload, request.query["digest"])
        return web.Response(status=202, headers={"Location": location, "Range": "0-0"})

    async def _take(self, request: web.Request, writer: LayoutBlobWriter) -> None:
        async for chunk in request.content.iter_chunked(_CHUNK):
            writer.write(chunk)

    def _writer(self, request: web.Request) -> LayoutBlobWriter:
        writer = self._uploads.get(request.match_info["id"])
        if writer is None:
            raise web.HTTPNotFound(
                text=json.dumps({"errors": [{"code": "BLOB_UPLOAD_UNKNOWN", "message": "?"}]})
            )
        return writer

    async def patch_upload(self, request: web.Request) -> web.Response:
        """Take a chunk."""
        writer = self._writer(request)
        await self._take(request, writer)
        size = writer.size
        return web.Response(
            status=202,
            headers={"Location": request.path, "Range": f"0-{max(size - 1, 0)}"},
        )

    async def finish_upload(self, request: web.Request) -> web.Response:
        """Take the last bytes and commit the blob under its digest."""
        writer = self._writer(request)
        await self._take(request, writer)
        return self._commit(request, request.match_info["id"], request.query.get("digest", ""))

    def _commit(self, request: web.Request, upload: str, digest: str) -> web.Response:
        writer = self._uploads.pop(upload)
        if not DIGEST_FORMAT.match(digest) or hasher(digest).name != "sha256":
            writer.cancel()
            return _error(400, "DIGEST_INVALID", "a sha256 digest is required")
        try:
            writer.finish(digest)
        except DigestMismatchError:
            return _error(400, "DIGEST_INVALID", "the content does not match the digest")
        location = f"/v2/{request.match_info['name']}/blobs/{digest}"
        return web.Response(
            status=201, headers={"Location": location, "Docker-Content-Digest": digest}
        )

    async def tags(self, request: web.Request) -> web.Response:
        """The tags of a repository."""
        layout = self._layout(request)
        if layout is None:
            return _error(404, "NAME_UNKNOWN", "repository name not known to registry")
        names = [
            (e.get("annotations") or {}).get("org.opencontainers.image.ref.name")
            for e in layout.index().get("manifests", [])
        ]
        return web.json_response(
            {"name": request.match_info["name"], "tags": sorted(n for n in names if n)}
        )
