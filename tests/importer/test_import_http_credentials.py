"""An HTTP(S) source URL's user:password@ goes to the server as Basic auth, as curl and CDI
send it, and nowhere else: not in the URL asked for, not in messages or results."""

from __future__ import annotations

import base64
import json

PASSWORD = "pa:ss@w0rd"
USER = "alice"
# the password percent-encoded in the URL, as a URL must carry ':' and '@'
USERINFO = f"{USER}:pa%3Ass%40w0rd"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def _with_credentials(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{USERINFO}@{rest}"


def test_credentials_in_the_url_are_sent_as_basic_auth(diskferry, images, faulty, tmp_path):
    url = faulty.add("disk", images.get("raw"))
    result = diskferry("import", _with_credentials(url), tmp_path / "disk.raw", "--json")
    assert result.code == 0, result.stderr
    assert images.same(images.reference, tmp_path / "disk.raw")
    seen = faulty.seen("disk")
    # the stream's request and every ranged read of the source
    assert len(seen) > 1
    assert all(h.get("Authorization") == BASIC for h in seen)
    assert PASSWORD not in result.stdout + result.stderr
    assert "pa%3Ass" not in result.stdout + result.stderr
    assert json.loads(result.stdout)["sourceFormat"] == "raw"


def test_a_header_given_wins_over_the_url_s_credentials(diskferry, images, faulty, tmp_path):
    url = faulty.add("disk", images.get("qcow2", "gzip"))
    options = ["--header", "Authorization: Bearer given", "--json"]
    result = diskferry("import", _with_credentials(url), tmp_path / "disk.raw", *options)
    assert result.code == 0, result.stderr
    assert {h.get("Authorization") for h in faulty.seen("disk")} == {"Bearer given"}


def test_a_refused_source_names_it_without_credentials(refuse, faulty):
    url = faulty.add("secret", status=401)
    error = refuse(_with_credentials(url))
    assert error == f"{url}: server answered HTTP 401 Unauthorized: broken on purpose"
    assert faulty.seen("secret")
    assert all(h.get("Authorization") == BASIC for h in faulty.seen("secret"))
