"""PackWriter: new chunks compressed and sealed in worker threads, packed, uploaded, indexed."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from diskferry.backup.codec import Codec
from diskferry.backup.errors import LockLostError
from diskferry.backup.index import IndexEntry, encode_index, index_path, new_index_id
from diskferry.backup.index_cache import IndexCache
from diskferry.backup.packs import TARGET_PACK_SIZE, PackBuilder, pack_path
from diskferry.base.cpus import usable_cpus
from diskferry.objstore.store import ObjectStore

INDEX_BATCH = 65536
# bytes of chunks a writer holds at most: waiting to be sealed, sealed into packs, uploading
MEMORY = 64 << 20


@dataclass
class WriterStats:
    """What a writer stored: chunks and plaintext bytes new to the repository, bytes uploaded."""

    chunks_new: int = 0
    bytes_new: int = 0
    bytes_uploaded: int = 0


class PackWriter:
    """Accepts chunks from several threads; the chunks it holds stay within `memory` bytes.

    `add` waits while the writer holds `memory` bytes of chunks, except that the pack being
    filled never waits for room (so `memory` below a pack and a chunk still works, one
    pack at a time). Chunks are sealed by one thread per usable CPU unless `workers` says
    otherwise, and `uploads` packs go up at once. Use as a context manager: leaving it
    normally calls `finish()`, leaving on an error calls `abort()`, which deletes the
    packs it uploaded but did not index.
    """

    def __init__(
        self,
        store: ObjectStore,
        codec: Codec,
        cache: IndexCache,
        *,
        workers: int | None = None,
        uploads: int = 4,
        memory: int = MEMORY,
        pack_size: int = TARGET_PACK_SIZE,
        index_batch: int = INDEX_BATCH,
    ) -> None:
        self._store = store
        self._codec = codec
        self._cache = cache
        self._pack_size = pack_size
        self._index_batch = index_batch
        self._memory = memory
        self._held = 0
        self._encoders = ThreadPoolExecutor(
            workers or usable_cpus(), thread_name_prefix="pack-encode"
        )
        self._uploaders = ThreadPoolExecutor(uploads, thread_name_prefix="pack-upload")
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._index_lock = threading.Lock()
        self._pending: set[bytes] = set()
        self._builder = PackBuilder()
        self._futures: set[Future[None]] = set()
        self._unindexed: list[IndexEntry] = []
        self._unindexed_packs: set[str] = set()
        self._error: BaseException | None = None
        self._closed = False
        self.stats = WriterStats()

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.abort()
        elif not self._closed:
            self.finish()

    def add(self, plain: bytes | bytearray) -> bytes:
        """Store a chunk unless the repository has it already; its id.

        The writer holds on to `plain` until the chunk is sealed: the caller must not change it.
        """
        return self.add_many([plain])[0]

    def add_many(self, plains: Sequence[bytes | bytearray]) -> list[bytes]:
        """Store each chunk the repository lacks, looked up together; their ids, in order.

        The writer holds on to each buffer until its chunk is sealed: the caller must not
        change them.
        """
        self._raise_failure()
        chunk_ids = [self._codec.chunk_id(plain) for plain in plains]
        with self._lock:
            asked = [c for c in chunk_ids if c not in self._pending]
        known = self._cache.known(asked) if asked else set()
        for chunk_id, plain in zip(chunk_ids, plains, strict=True):
            if chunk_id in known:
                continue
            with self._lock:
                if chunk_id in self._pending:
                    continue
                self._pending.add(chunk_id)
            self._take(len(plain))
            self._track(self._encoders.submit(self._encode, chunk_id, plain))
        return chunk_ids

    def _take(self, n: int) -> None:
        """Wait for room for `n` more bytes; the pack being filled alone never waits."""
        with self._room:
            while self._held > self._builder.size and self._held + n > self._memory:
                self._raise_failure()
                self._room.wait()
            self._raise_failure()
            self._held += n

    def _give_back(self, n: int) -> None:
        with self._room:
            self._held -= n
            self._room.notify_all()

    def _track(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.add(future)

        def done(f: Future[None]) -> None:
            with self._room:
                self._futures.discard(f)
                if not f.cancelled() and f.exception() is not None and self._error is None:
                    self._error = f.exception()
                    self._room.notify_all()

        future.add_done_callback(done)

    def _encode(self, chunk_id: bytes, plain: bytes | bytearray) -> None:
        blob = self._codec.encode_chunk(chunk_id, plain)
        full = None
        with self._room:
            self._held += len(blob) - len(plain)
            self._room.notify_all()
            self._builder.add(chunk_id, blob, len(plain))
            self.stats.chunks_new += 1
            self.stats.bytes_new += len(plain)
            if self._builder.size >= self._pack_size:
                full, self._builder = self._builder, PackBuilder()
        if full is not None:
            self._submit_upload(full)

    def _submit_upload(self, builder: PackBuilder) -> None:
        self._track(self._uploaders.submit(self._upload, builder))

    def _upload(self, builder: PackBuilder) -> None:
        parts = builder.build(self._codec)
        with self._lock:
            self._unindexed_packs.add(builder.pack_id)
        self._store.put_parts(pack_path(builder.pack_id), parts)
        uploaded = sum(map(len, parts))
        del parts
        self._give_back(builder.size)
        batch = None
        with self._lock:
            self.stats.bytes_uploaded += uploaded
            self._unindexed.extend(
                IndexEntry(e.chunk_id, builder.pack_id, e.offset, e.length, e.plain_length)
                for e in builder.entries
            )
            if len(self._unindexed) >= self._index_batch:
                batch, self._unindexed = self._unindexed, []
        if batch:
            self._write_index(batch)

    def _write_index(self, entries: list[IndexEntry]) -> None:
        with self._index_lock:
            index_id = new_index_id()
            blob = encode_index(index_id, entries, self._codec)
            self._store.put(index_path(index_id), blob)
            self.stats.bytes_uploaded += len(blob)
            self._cache.add(index_id, entries)
            with self._lock:
                self._unindexed_packs.difference_update(e.pack for e in entries)
                self._pending.difference_update(e.chunk_id for e in entries)

    def _drain(self) -> None:
        while True:
            with self._lock:
                running = list(self._futures)
            if not running:
                return
            wait(running)

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise RuntimeError("the pack writer is closed")

    def finish(self) -> WriterStats:
        """Upload what is left, write the index for it, and return the stats."""
        try:
            self._drain()
            self._raise_failure()
            with self._lock:
                last, self._builder = self._builder, PackBuilder()
            if last.entries:
                self._submit_upload(last)
                self._drain()
                self._raise_failure()
            if self._unindexed:
                batch, self._unindexed = self._unindexed, []
                self._write_index(batch)
        except BaseException:
            self.abort()
            raise
        self._shutdown()
        return self.stats

    def abort(self) -> None:
        """Stop, and delete the packs uploaded but not yet named by an index.

        With the repository's lock lost they stay, unnamed, as a killed writer's would.
        """
        if self._closed:
            return
        with self._room:
            self._error = self._error or RuntimeError("aborted")
            self._room.notify_all()
        self._encoders.shutdown(wait=True, cancel_futures=True)
        self._uploaders.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(LockLostError):  # the repository is no longer this writer's
            for pack in sorted(self._unindexed_packs):
                self._store.delete(pack_path(pack))
        self._unindexed_packs.clear()
        self._closed = True

    def _shutdown(self) -> None:
        self._encoders.shutdown()
        self._uploaders.shutdown()
        self._closed = True
