"""Human output in sizes people read: `info` and `repo stats` say `64.0 MiB`, not bytes;
their --json keeps exact numbers."""

from __future__ import annotations

import json
from pathlib import Path


def test_info_shows_readable_sizes(diskferry, tmp_path: Path) -> None:
    image = tmp_path / "disk.raw"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
        f.write(b"\1" * (1 << 20))
    text = diskferry("info", image)
    assert text.code == 0, text.stderr
    assert "virtualSize: 64.0 MiB\n" in text.stdout
    assert "allocatedSize: 1.0 MiB\n" in text.stdout
    exact = json.loads(diskferry("info", image, "--json").stdout)
    assert exact["virtualSize"] == 64 << 20


def test_repo_stats_shows_readable_sizes(diskferry, tmp_path: Path) -> None:
    diskferry.env.update(DISKFERRY_PASSWORD="pw", DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    repo = str(tmp_path / "repo")
    assert diskferry("repo", "init", "--repo", repo, "--chunk-size", "1M").code == 0
    text = diskferry("repo", "stats", "--repo", repo).stdout
    assert "chunkSize: 1.0 MiB\n" in text and "packBytes: 0 B\n" in text
    assert "unusedBytes: 0 B\n" in text
    assert json.loads(diskferry("repo", "stats", "--repo", repo, "--json").stdout)["chunkSize"] == (
        1 << 20
    )


def _keys(value: object) -> list[str]:
    """Every key of a JSON value, nested ones too."""
    if isinstance(value, dict):
        return [k for k, v in value.items() for k in [k, *_keys(v)]]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def test_json_keys_are_camel_case(diskferry, tmp_path: Path) -> None:
    diskferry.env.update(DISKFERRY_PASSWORD="pw", DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    image = tmp_path / "disk.raw"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    repo = str(tmp_path / "repo")
    commands = [
        ("repo", "init", "--repo", repo),
        ("info", image),
        ("cbt", "enable", image),
        ("cbt", "status", image),
        ("backup", "--repo", repo, "--vm", "vm", f"--disk=root={image}"),
        ("snapshots", "--repo", repo),
        ("repo", "stats", "--repo", repo),
        ("repo", "check", "--repo", repo),
        ("repo", "key", "list", "--repo", repo),
        ("forget", "--repo", repo, "--keep-last", "1"),
        ("prune", "--repo", repo),
        ("import", image, tmp_path / "copy.raw"),
    ]
    for command in commands:
        r = diskferry(*command, "--json")
        assert r.code == 0, (command, r.stderr)
        snake = [k for k in _keys(json.loads(r.stdout)) if "_" in k]
        assert not snake, (command, snake)
