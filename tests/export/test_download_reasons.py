"""`export download` says what the export server or the proxy said when it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from export_support import TOKEN, write_routes
from server_support import Running

PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports"


def _download(url: str, ca: Path, target: Path, *args: str) -> str:
    """The error line of a download that must fail."""
    argv = [sys.executable, "-m", "diskferry.cli.main", "export", "download", url, str(target)]
    p = subprocess.run(
        [*argv, "--ca-bundle", str(ca), "--retries", "0", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1, p.stderr
    [line] = [ln for ln in p.stderr.splitlines() if ln.startswith("diskferry: error: ")]
    assert not target.exists()
    return line


def test_a_wrong_token_says_bad_token(export: Running, tmp_path: Path) -> None:
    token = tmp_path / "wrong"
    token.write_text("not-the-token\n")
    url = export.url + "/volumes/disk/disk.img"
    line = _download(url, export.ca, tmp_path / "out.img", "--token-file", str(token))
    assert "HTTP 401" in line and "BadToken" in line
    assert "give the export's token" not in line


def test_a_missing_token_says_so(export: Running, tmp_path: Path) -> None:
    line = _download(export.url + "/volumes/disk/disk.img", export.ca, tmp_path / "out.img")
    assert "MissingToken" in line


def test_an_unknown_volume_names_it(export: Running, tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text(TOKEN)
    url = export.url + "/volumes/nosuch/disk.img"
    line = _download(url, export.ca, tmp_path / "out.img", "--token-file", str(token))
    assert "UnknownVolume" in line and "'nosuch'" in line
    assert "check the URL" not in line


def test_the_proxy_says_which_export_it_lacks_and_which_is_not_ready(
    export: Running, proxy_factory, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    route = {"namespace": "default", "url": export.url, "caFile": str(export.ca)}
    write_routes(routes, [{**route, "name": "vm1", "ready": False}])
    proxy = proxy_factory(routes)
    token = tmp_path / "t"
    token.write_text(TOKEN)
    unknown = f"{proxy.url}{PREFIX}/zzz/volumes/disk/disk.img"
    line = _download(unknown, proxy.ca, tmp_path / "a.img", "--token-file", str(token))
    assert "UnknownExport: no export default/zzz" in line
    waiting = f"{proxy.url}{PREFIX}/vm1/volumes/disk/disk.img"
    line = _download(waiting, proxy.ca, tmp_path / "b.img", "--token-file", str(token))
    assert "HTTP 503" in line and "ExportNotReady: default/vm1 is not ready" in line
