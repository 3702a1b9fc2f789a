"""Repository: opening a backup repository, and reading and writing its objects."""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from diskferry.backup.bounds import read_whole
from diskferry.backup.codec import MAX_STORED, Codec
from diskferry.backup.config import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, KdfParams, RepoConfig
from diskferry.backup.config_seal import decode_config, encode_config, verify_config
from diskferry.backup.errors import (
    CorruptObjectError,
    NotEmptyError,
    PasswordError,
    RepositoryError,
    RepositoryExistsError,
    SnapshotNotFoundError,
)
from diskferry.backup.index import IndexEntry
from diskferry.backup.index_cache import IndexCache, cache_folder
from diskferry.backup.keys import new_keys, wrap_keys
from diskferry.backup.locks import LEASE_SECONDS, Lock, LockGuard, LockKind, acquire
from diskferry.backup.names import OnForeign, listing
from diskferry.backup.opening import read_config, unlock
from diskferry.backup.pack_writer import PackWriter
from diskferry.backup.packs import pack_path
from diskferry.backup.seen_encrypted import remember_encrypted
from diskferry.backup.snapshots import (
    Manifest,
    ManifestWriter,
    SnapshotInfo,
    check_name,
    decode_info,
    lead_length,
)
from diskferry.backup.trackers import Tracker, decode_tracker, encode_tracker, tracker_path
from diskferry.objstore.errors import ObjectNotFoundError
from diskferry.objstore.store import ObjectStore, S3Options

_READERS = 8
_INFO_READ = 16 * 1024


class Repository:
    """An open repository: its store, config and keys, and a local cache of its index.

    Every operation on `store` first checks the locks taken through `lock`: once one of
    them is lost, each raises LockLostError, so the work in progress stops there. Locks
    are leased for `lease` seconds.
    """

    def __init__(
        self,
        store: ObjectStore,
        config: RepoConfig,
        codec: Codec,
        cache_root: Path | None = None,
        *,
        lease: float = LEASE_SECONDS,
        key_path: str | None = None,
    ) -> None:
        self.lease = lease
        self.key_path = key_path  # the key file the password opened
        self._locks = LockGuard()
        self._lock_store = store
        self.store = store.guarded(self._locks.check)
        self.config = config
        self.codec = codec
        self._cache_root = cache_root
        self._cache: IndexCache | None = None

    @property
    def id(self) -> str:
        """The repository id."""
        return self.config.id

    @property
    def url(self) -> str:
        """Where the repository lives."""
        return self.store.url

    @classmethod
    def init(
        cls,
        url: str,
        password: str | None,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_incrementals: int = 0,
        encrypted: bool = True,
        kdf: KdfParams | None = None,
        s3: S3Options | None = None,
        cache_root: Path | None = None,
    ) -> Repository:
        """Make a new repository at `url`, which must not exist or be empty; keys first,
        `config` last marks it complete.

        What can fail before a write (a bad option, a missing password, the key's derivation
        stopped) fails before the folder is made: a failed init leaves nothing behind.
        """
        _refuse_taken(url, s3)
        if encrypted and not password:
            raise PasswordError(
                "a password is needed: set DISKFERRY_PASSWORD or give --password-file "
                "(or ask for --no-encryption)"
            )
        if not 0 < chunk_size <= MAX_CHUNK_SIZE:
            raise RepositoryError(
                f"chunk size {chunk_size} is out of range: give 1 to {MAX_CHUNK_SIZE} bytes",
                reason="BadChunkSize",
            )
        config = RepoConfig(
            id=os.urandom(16).hex(),
            chunk_size=chunk_size,
            cipher="aes-256-gcm" if encrypted else "none",
            kdf=kdf or KdfParams(),
            max_incrementals=max_incrementals,
        )
        keys = new_keys(encrypted)
        wrapped = wrap_keys(keys, password, config.kdf)
        store = ObjectStore(url, s3)
        key_path = f"keys/{os.urandom(16).hex()}"
        store.put(key_path, wrapped)
        store.put("config", encode_config(config, keys))
        if encrypted:
            remember_encrypted(config.id, cache_root)
        return cls(store, config, Codec(keys), cache_root, key_path=key_path)

    @classmethod
    def open(
        cls,
        url: str,
        password: str | None,
        *,
        s3: S3Options | None = None,
        cache_root: Path | None = None,
        lease: float = LEASE_SECONDS,
    ) -> Repository:
        """Open the repository at `url` with `password`; its locks are leased for `lease` s.

        The config must carry the MAC the keys make; a repository is never taken as plaintext
        when a password is given, nor when this host opened it encrypted before.
        """
        store, raw = read_config(url, s3)
        stored = decode_config(raw, url)
        config = stored.config
        unlocked = unlock(store, config, password, cache_root)
        verify_config(stored, unlocked.keys, url)
        if config.encrypted:
            remember_encrypted(config.id, cache_root)
        return cls(
            store, config, Codec(unlocked.keys), cache_root, lease=lease, key_path=unlocked.path
        )

    def close(self) -> None:
        """Close the index cache."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def index(self) -> IndexCache:
        """The index cache, refreshed from the repository the first time it is used."""
        if self._cache is None:
            self._cache = IndexCache(self.cache_folder / "index.sqlite")
            self._cache.refresh(self.store, self.codec)
        return self._cache

    @contextlib.contextmanager
    def index_read_now(self) -> Iterator[tuple[Repository, list[CorruptObjectError]]]:
        """This repository over an index read from its index objects now, each authenticated,
        into a database of its own that is dropped on exit (the local cache is neither trusted
        nor changed); and the errors of the index objects that did not open, and of the names
        under `index/` it never writes (skipped)."""
        with tempfile.TemporaryDirectory(prefix="index-", dir=self.cache_folder) as folder:
            fresh = IndexCache(Path(folder) / "index.sqlite")
            view = copy.copy(self)
            view._cache = fresh
            try:
                yield view, fresh.refresh(self.store, self.codec, foreign_too=True)
            finally:
                fresh.close()

    def refresh_index(self) -> list[CorruptObjectError]:
        """Load index objects written since the cache last looked; the ones that did not open."""
        return self.index.refresh(self.store, self.codec)

    def pack_writer(self, **options: Any) -> PackWriter:
        """A writer for new chunks (see PackWriter for the options)."""
        return PackWriter(self.store, self.codec, self.index, **options)

    def locate_chunks(self, chunk_ids: Collection[bytes]) -> dict[bytes, IndexEntry]:
        """Where each chunk is stored, the index refreshed once if it misses some.

        A chunk the refreshed index still does not name is a damaged repository: the error
        names the first index object that did not open, if one did not.
        """
        wanted = list(chunk_ids)
        found = self.index.locate_many(wanted)
        unread: list[CorruptObjectError] = []
        if len(found) < len(set(wanted)):
            unread = self.refresh_index()
            found = self.index.locate_many(wanted)
        missing = next((c for c in wanted if c not in found), None)
        if missing is not None:
            why = f" ({unread[0].message})" if unread else ""
            raise CorruptObjectError(
                f"chunk {missing.hex()[:16]} is not in the index of {self.url}{why}: "
                "run 'diskferry repo check'",
                objects=unread[0].objects if unread else (),
            )
        return found

    def read_chunk(self, chunk_id: bytes) -> bytes:
        """A chunk's plaintext, verified against its id."""
        return self.read_located(self.locate_chunks((chunk_id,))[chunk_id])

    def read_located(self, where: IndexEntry) -> bytes:
        """The plaintext of the chunk stored where the index says, verified against its id."""
        path = pack_path(where.pack)
        try:
            blob = self.store.get_range(path, where.offset, where.length)
        except ObjectNotFoundError:
            raise CorruptObjectError(
                f"{path} is missing from {self.url}: run 'diskferry repo check'", objects=(path,)
            ) from None
        return self.codec.decode_chunk(where.chunk_id, blob, path)

    @property
    def cache_folder(self) -> Path:
        """The local folder of this repository's caches and spool files."""
        return cache_folder(self.id, self._cache_root)

    def new_snapshot(self, path: str, **options: Any) -> ManifestWriter:
        """A writer of the manifest to be stored at `path`, spooled locally until it is saved."""
        return ManifestWriter(path, self.codec, self.cache_folder, **options)

    def save_snapshot(self, writer: ManifestWriter, info: SnapshotInfo) -> None:
        """Store the written manifest with its description (after the chunks and index it names)."""
        with writer.finish(info) as stored:
            self.store.put_file(info.path, stored)

    def load_snapshot(self, path: str) -> Manifest:
        """The manifest stored at `path`: its description and page table; entries on demand.

        CorruptObjectError, before any page is read, when its pages do not end where the
        object does (a manifest cut short, or with bytes after it).
        """
        manifest = Manifest(
            path,
            self._read_lead(path, table=True),
            self.codec,
            lambda start, length: self.store.get_range(path, start, length),
        )
        stored = self.store.head(path)
        if stored is None:
            raise ObjectNotFoundError(f"{self.url}: {path} does not exist")
        if stored.size != manifest.stored_length:
            raise CorruptObjectError(
                f"{path} is malformed (its pages end at byte {manifest.stored_length}, the "
                f"object at byte {stored.size})",
                objects=(path,),
            )
        return manifest

    def load_snapshot_info(self, path: str) -> SnapshotInfo:
        """The description of the manifest at `path`, read from the start of the object."""
        return decode_info(path, self._read_lead(path, table=False), self.codec)

    def _read_lead(self, path: str, *, table: bool) -> bytes:
        """The first bytes of a manifest, as many as its description (and page table) take."""
        want = _INFO_READ
        while True:
            start = self.store.get_start(path, want)
            need = lead_length(path, start, table=table)
            if need <= len(start):
                return start
            if len(start) < want:
                raise CorruptObjectError(f"{path} is truncated", objects=(path,))
            want = need

    def snapshot_paths(self, vm: str | None = None, foreign: OnForeign | None = None) -> list[str]:
        """The object paths of the manifests, of one VM or all (see names.listing for
        `foreign`)."""
        folder = f"snapshots/{check_name('VM', vm)}" if vm else "snapshots"
        return [info.path for info in listing(self.store, folder, foreign)]

    def find_snapshot(self, snapshot_id: str) -> str:
        """The path of the manifest with this id; SnapshotNotFoundError if none."""
        for path in self.snapshot_paths():
            if path.rsplit("/", 1)[1] == snapshot_id:
                return path
        raise SnapshotNotFoundError(f"no snapshot {snapshot_id} in {self.url}")

    def list_snapshots(self, vm: str | None = None) -> list[SnapshotInfo]:
        """The snapshots' descriptions, oldest first."""
        paths = self.snapshot_paths(vm)

        with ThreadPoolExecutor(_READERS) as pool:
            found = list(pool.map(self.load_snapshot_info, paths))
        return sorted(found, key=lambda s: (s.finished, s.started, s.id))

    def load_tracker(self, vm: str) -> Tracker | None:
        """The VM's tracker, or None when it has none."""
        try:
            blob = read_whole(self.store, tracker_path(vm), MAX_STORED)
        except ObjectNotFoundError:
            return None
        return decode_tracker(vm, blob, self.codec)

    def save_tracker(self, tracker: Tracker) -> None:
        """Replace the VM's tracker whole (after the snapshots it names)."""
        self.store.put(tracker_path(tracker.vm), encode_tracker(tracker, self.codec))

    def lock(
        self,
        kind: LockKind,
        purpose: str,
        *,
        vm: str | None = None,
        wait: float = 0.0,
        notify: Callable[[str], None] = lambda message: None,
        cancel: threading.Event | None = None,
    ) -> Lock:
        """Take a lock on the repository (see locks.acquire), then catch up with its index.

        A prune may have run since the index cache last looked; under the lock it cannot.
        """
        lock = acquire(
            self._lock_store,
            kind,
            purpose,
            vm=vm,
            wait=wait,
            notify=notify,
            cancel=cancel,
            lease=self.lease,
            guard=self._locks,
        )
        if self._cache is not None:
            try:
                self._cache.refresh(self.store, self.codec)
            except BaseException:
                lock.release()
                raise
        return lock

    def forget(self, snapshot_ids: list[str]) -> list[str]:
        """Delete these snapshots' manifests (their chunks go at the next prune); their paths."""
        paths = [self.find_snapshot(snapshot_id) for snapshot_id in snapshot_ids]
        for path in paths:
            self.store.delete(path)
        return paths

    def stats(self) -> dict[str, Any]:
        """Counts and sizes of what the repository holds."""
        chunks, plain, stored = self.index.totals()
        packs = [info.size for info in listing(self.store, "packs")]
        snapshots = self.list_snapshots()
        return {
            "repository": self.id,
            "encrypted": self.config.encrypted,
            "chunkSize": self.config.chunk_size,
            "snapshots": len(snapshots),
            "vms": len({s.vm for s in snapshots}),
            "disks": len({(s.vm, s.disk) for s in snapshots}),
            "diskBytes": sum(s.disk_size for s in snapshots),
            "chunks": chunks,
            "chunkBytes": plain,
            "storedChunkBytes": stored,
            "packs": len(packs),
            "packBytes": sum(packs),
            "indexObjects": len(self.index.index_names()),
        }


def _refuse_taken(url: str, s3: S3Options | None) -> None:
    """Refuse to make a repository where one is, or where anything else is; a folder that is
    not there is not made."""
    try:
        store = ObjectStore(url, s3, create=False)
    except ObjectNotFoundError:
        return
    if store.exists("config"):
        raise RepositoryExistsError(f"a repository already exists at {url}")
    if not store.empty():
        raise NotEmptyError(
            f"{url} is not empty and holds no repository: give a new or empty directory "
            "(or S3 prefix), or move away what it holds"
        )
