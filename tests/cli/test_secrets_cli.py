"""Credentials in URLs never reach a message, and a token on the command line is warned of."""

from __future__ import annotations

from pathlib import Path

from diskferry.serving.certs import create_ca

SECRET = "pa55-s3cr3t"


def _with_credentials(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://user:{SECRET}@{rest}"


def test_a_failed_import_names_the_url_without_its_credentials(
    diskferry, faulty, tmp_path: Path
) -> None:
    url = f"{faulty.url}/missing.img"
    result = diskferry("import", _with_credentials(url), tmp_path / "out.raw", "--no-progress")
    assert result.code == 1
    assert result.error == f"{url}: server answered HTTP 404 Not Found"
    assert SECRET not in result.stderr + result.stdout


def test_a_failed_download_names_the_url_without_its_credentials(
    diskferry, faulty, tmp_path: Path
) -> None:
    url = f"{faulty.url}/volumes/disk/disk.img"
    token = tmp_path / "token"
    token.write_text("t\n")
    args = ("export", "download", _with_credentials(url), tmp_path / "out.img")
    result = diskferry(*args, "--token-file", token, "--no-progress")
    assert result.code == 1
    assert result.error.startswith(f"{url}: server answered HTTP 404 Not Found: check the URL")
    assert SECRET not in result.stderr + result.stdout
    assert len(result.stderr.splitlines()) == 1, "a token from a file is not warned of"


def test_an_nbd_url_with_credentials(diskferry, tmp_path: Path) -> None:
    create_ca(tmp_path / "ca")
    token = tmp_path / "token"
    token.write_text("t\n")
    url = f"nbd://user:{SECRET}@127.0.0.1:1/disk?bogus=1"
    result = diskferry(
        "export", "serve", "--name", "e", "--volume", f"d={url}",
        "--token-file", token, "--cert-dir", tmp_path / "ca", "--port", "0",
    )  # fmt: skip
    assert result.code == 1
    assert result.error == (
        "NBD URL 'nbd://127.0.0.1:1/disk?bogus=1' has an unknown parameter 'bogus'"
    )
    assert SECRET not in result.stderr + result.stdout
