"""Prune: mark the chunks that manifests name, sweep the rest, repack mostly unused packs;
and the unused bytes that packs still hold."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from diskferry.backup.chunk_use import ChunkUse
from diskferry.backup.errors import RepositoryError
from diskferry.backup.index import IndexEntry, encode_index, index_path, new_index_id
from diskferry.backup.index_cache import IndexCache
from diskferry.backup.names import listing
from diskferry.backup.pack_writer import INDEX_BATCH
from diskferry.backup.packs import TARGET_PACK_SIZE, PackBuilder, pack_path
from diskferry.backup.repository import Repository
from diskferry.disk.sizes import format_size
from diskferry.objstore.errors import ObjectNotFoundError

REPACK_UNUSED_SHARE = 0.5


@dataclass
class PruneStats:
    """What a prune did."""

    packs_deleted: int = 0
    packs_repacked: int = 0
    packs_written: int = 0
    chunks_removed: int = 0
    bytes_freed: int = 0
    unused_bytes: int = 0  # left in packs kept because their unused share is under the threshold
    packs_with_unused: int = 0


@dataclass
class Unused:
    """Stored bytes of chunks no snapshot names, and how many packs hold them."""

    bytes: int = 0
    packs: int = 0


def unused_text(unused: Unused) -> str:
    """`1.5 MiB unused in 2 packs`, as check, stats and prune say it."""
    if not unused.bytes:
        return "no unused data in packs"
    packs = "pack" if unused.packs == 1 else "packs"
    return f"{format_size(unused.bytes)} unused in {unused.packs} {packs}"


def unused_space(repo: Repository) -> Unused:
    """The unused bytes the repository's packs hold (what `prune --repack-all` reclaims)."""
    with used_chunks(repo, "count unused space") as used:
        unused = Unused()
        for pack in repo.index.named_packs():
            dead = _dead(repo.index, used, pack)
            if dead:
                unused.bytes += dead
                unused.packs += 1
        return unused


def prune(
    repo: Repository,
    *,
    repack_share: float = REPACK_UNUSED_SHARE,
    pack_size: int = TARGET_PACK_SIZE,
    wait: float = 0.0,
    notify: Callable[[str], None] = lambda message: None,
    cancel: threading.Event | None = None,
) -> PruneStats:
    """Drop chunks no manifest names; repack packs whose unused share reaches `repack_share`
    (0: every pack with an unused chunk).

    New packs and index objects are written first, old index objects deleted next and
    old packs last, so a prune stopped at any moment leaves a repository that checks.
    """
    with repo.lock("exclusive", "prune", wait=wait, notify=notify, cancel=cancel):
        problems = repo.refresh_index()
        if problems:
            raise RepositoryError(f"cannot prune: {problems[0].message}", reason="CorruptObject")
        with used_chunks(repo, "prune") as used:
            return _sweep(repo, used, repack_share, pack_size)


def _sweep(repo: Repository, used: ChunkUse, repack_share: float, pack_size: int) -> PruneStats:
    """Delete and repack what `used` does not name, in the crash-safe order."""
    index = repo.index
    present = {info.path: info.size for info in listing(repo.store, "packs")}
    stats = PruneStats()
    keep: list[str] = []
    repack: list[str] = []
    obsolete: list[str] = []
    named = index.named_packs()
    rewrite = False
    for pack in named:
        entries = index.in_pack(pack)
        live = _live(used, entries)
        path = pack_path(pack)
        if path not in present:
            if live:
                raise RepositoryError(
                    f"cannot prune: {path} is missing and snapshots need it; "
                    "run 'diskferry repo check'",
                    reason="CorruptObject",
                )
            rewrite = True
            continue
        dead = sum(e.length for e in entries) - sum(e.length for e in live)
        if live and (dead == 0 or dead < repack_share * sum(e.length for e in entries)):
            keep.append(pack)
            if dead:
                stats.unused_bytes += dead
                stats.packs_with_unused += 1
            continue
        obsolete.append(path)
        stats.chunks_removed += len(entries) - len(live)
        stats.bytes_freed += present.pop(path)
        if live:
            repack.append(pack)
            stats.packs_repacked += 1
        else:
            stats.packs_deleted += 1
    indexed = {pack_path(p) for p in named}
    strays = [p for p in present if p not in indexed]
    if not obsolete and not strays and not rewrite:
        return stats
    for path in strays:
        stats.bytes_freed += present[path]
        stats.packs_deleted += 1
    if obsolete or rewrite:
        copied = _repack(
            repo, (e for p in repack for e in _live(used, index.in_pack(p))), pack_size, stats
        )
        old_indexes = index.index_names()
        kept = (e for pack in keep for e in index.in_pack(pack))
        _write_index(repo, itertools.chain(kept, copied))
        for name in old_indexes:
            repo.store.delete(index_path(name))
    for path in obsolete + strays:
        repo.store.delete(path)
    repo.refresh_index()
    return stats


def _live(used: ChunkUse, entries: list[IndexEntry]) -> list[IndexEntry]:
    """The entries of chunks that some manifest names."""
    named = used.among([e.chunk_id for e in entries])
    return [e for e in entries if e.chunk_id in named]


def _dead(index: IndexCache, used: ChunkUse, pack: str) -> int:
    """Stored bytes of the pack's chunks that no manifest names."""
    entries = index.in_pack(pack)
    return sum(e.length for e in entries) - sum(e.length for e in _live(used, entries))


def used_chunks(repo: Repository, doing: str) -> ChunkUse:
    """The chunks some manifest names; RepositoryError (`cannot DOING: ...`) if one of them is
    in no index. A manifest gone since it was listed (forgotten) names none."""
    used = ChunkUse(repo.cache_folder)
    try:
        for path in repo.snapshot_paths():
            with contextlib.suppress(ObjectNotFoundError):
                used.add(repo.load_snapshot(path).entries())
        for batch in used.batches():
            found = repo.index.locate_many([chunk for chunk, _ in batch])
            missing = [chunk for chunk, _ in batch if chunk not in found]
            if missing:
                raise RepositoryError(
                    f"cannot {doing}: a snapshot names chunk {missing[0].hex()[:16]}, which is in "
                    "no index; run 'diskferry repo check' to see which",
                    reason="CorruptObject",
                )
    except BaseException:
        used.close()
        raise
    return used


def _repack(
    repo: Repository, entries: Iterable[IndexEntry], pack_size: int, stats: PruneStats
) -> Iterator[IndexEntry]:
    """Copy the chunks into new packs (verifying each); their new index entries once uploaded."""
    builder = PackBuilder()
    for e in entries:
        path = pack_path(e.pack)
        blob = repo.store.get_range(path, e.offset, e.length)
        repo.codec.decode_chunk(e.chunk_id, blob, path)
        builder.add(e.chunk_id, blob, e.plain_length)
        if builder.size >= pack_size:
            yield from _upload(repo, builder, stats)
            builder = PackBuilder()
    if builder.entries:
        yield from _upload(repo, builder, stats)


def _upload(repo: Repository, builder: PackBuilder, stats: PruneStats) -> list[IndexEntry]:
    parts = builder.build(repo.codec)
    repo.store.put_parts(pack_path(builder.pack_id), parts)
    stats.packs_written += 1
    stats.bytes_freed -= sum(map(len, parts))
    return [
        IndexEntry(e.chunk_id, builder.pack_id, e.offset, e.length, e.plain_length)
        for e in builder.entries
    ]


def _write_index(repo: Repository, entries: Iterable[IndexEntry]) -> None:
    """Index objects for `entries`, a bounded batch at a time."""
    it = iter(entries)
    while batch := list(itertools.islice(it, INDEX_BATCH)):
        index_id = new_index_id()
        repo.store.put(index_path(index_id), encode_index(index_id, batch, repo.codec))
