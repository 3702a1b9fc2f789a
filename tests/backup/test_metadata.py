"""Backup metadata objects: stored sealed under their names, listed by name, on a directory and
on S3."""

from __future__ import annotations

from diskferry.backup.metadata import delete_metadata, list_metadata, load_metadata, save_metadata


def test_metadata_are_listed_by_name(repo_url, new_repo):
    repo = new_repo(repo_url)
    assert list_metadata(repo) == []
    save_metadata(repo, "ns.b2", {"n": 2})
    save_metadata(repo, "ns.b1", {"n": 1})
    assert list_metadata(repo) == ["ns.b1", "ns.b2"]
    delete_metadata(repo, "ns.b2")
    assert list_metadata(repo) == ["ns.b1"]
    assert load_metadata(repo, "ns.b1") == {"n": 1}
