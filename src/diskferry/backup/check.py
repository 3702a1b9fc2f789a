"""Checking a repository: index against packs, manifests against the index, and the data itself.

A check reports every problem it finds and goes on: a name the repository never writes, and
a link or a special file, anywhere in its folders, is one problem among the others, skipped.
It holds a shared lock, as a forget or a backup does: a manifest or an index object gone
between its listing and its reading was forgotten (or dropped by a failed backup), and is
skipped, not reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from diskferry.backup.chunk_use import ChunkUse
from diskferry.backup.errors import CorruptObjectError, ForeignObjectError
from diskferry.backup.index import IndexEntry
from diskferry.backup.names import listing
from diskferry.backup.packs import pack_path, read_trailer
from diskferry.backup.prune import Unused, unused_space, unused_text
from diskferry.backup.repository import Repository
from diskferry.objstore.errors import ObjectNotFoundError

_READERS = 4
# bytes of a pack a check reading data reads at once, at most (but for one chunk longer)
READ_PIECE = 16 << 20
# the folders a check reads nothing from, listed for the names the repository never writes
_ONLY_LISTED = ("keys", "locks", "metadata")


@dataclass
class Problem:
    """One damaged or missing object and what is wrong with it."""

    object: str
    message: str


@dataclass
class CheckReport:
    """What a check found: problems, the snapshots they affect, and what it looked at."""

    read_data: bool
    problems: list[Problem] = field(default_factory=list)
    affected: dict[str, set[str]] = field(default_factory=dict)
    snapshots: int = 0
    packs: int = 0
    chunks: int = 0
    unused_packs: list[str] = field(default_factory=list)
    unused: Unused = field(default_factory=Unused)

    @property
    def ok(self) -> bool:
        """Whether nothing is damaged."""
        return not self.problems

    def add(self, obj: str, message: str) -> None:
        """Record a problem (safe from several threads: list.append is atomic)."""
        self.problems.append(Problem(obj, message))

    def add_foreign(self, error: ForeignObjectError) -> None:
        """Record a name the repository never writes, or a link or special file, as a problem."""
        self.add(error.objects[0], error.message)

    def summary(self) -> str:
        """One line saying what is damaged or foreign and which snapshots it affects."""
        if self.ok:
            return (
                f"no errors: {self.snapshots} snapshots, {self.packs} packs, {self.chunks} chunks; "
                f"{unused_text(self.unused)}"
            )
        wrong = ", ".join(sorted({p.object for p in self.problems}))
        snaps = ", ".join(sorted(self.affected)) or "none"
        return f"{len(self.problems)} problems: {wrong}; affected snapshots: {snaps}"

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "ok": self.ok,
            "readData": self.read_data,
            "snapshots": self.snapshots,
            "packs": self.packs,
            "chunks": self.chunks,
            "problems": [{"object": p.object, "message": p.message} for p in self.problems],
            "affectedSnapshots": {k: sorted(v) for k, v in sorted(self.affected.items())},
            "unusedPacks": self.unused_packs,
            "unusedBytes": self.unused.bytes,
            "packsWithUnused": self.unused.packs,
        }


def check(
    repo: Repository,
    read_data: bool = False,
    on_pack: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> CheckReport:
    """Check the repository; with `read_data`, open and verify every chunk too, first telling
    `on_total` the bytes of the packs it will read, then `on_pack` those of each pack read.

    The index is read from every index object of the repository now, each authenticated:
    what the local cache holds is no evidence.
    """
    report = CheckReport(read_data=read_data)
    with repo.index_read_now() as (checked, problems):
        for error in problems:
            report.add(error.objects[0] if error.objects else "index", error.message)
        _check(checked, report, on_pack, on_total)
    return report


def _check(
    repo: Repository,
    report: CheckReport,
    on_pack: Callable[[int], None] | None,
    on_total: Callable[[int], None] | None,
) -> None:
    """Check the repository over the index it holds, into `report`."""
    read_data = report.read_data
    index = repo.index
    for folder in _ONLY_LISTED:
        list(listing(repo.store, folder, report.add_foreign))
    present = {info.path: info.size for info in listing(repo.store, "packs", report.add_foreign)}
    indexed = index.pack_names()
    report.packs = len(indexed)
    report.chunks = index.totals()[0]
    bad_packs: dict[str, str] = {}
    bad_chunks: dict[bytes, str] = {}
    to_read = []
    for pack in indexed:
        path = pack_path(pack)
        entries = index.in_pack(pack)
        if path not in present:
            report.add(path, f"{path} is missing ({len(entries)} chunks)")
            bad_packs[pack] = path
        elif any(e.offset + e.length > present[path] for e in entries):
            report.add(path, f"{path} is shorter than its index says")
            bad_packs[pack] = path
        elif read_data:
            to_read.append((pack, present[path]))
    if on_total is not None:
        on_total(sum(size for _, size in to_read))
    with ThreadPoolExecutor(_READERS) as pool:
        jobs = [
            pool.submit(_read_pack, repo, pack, size, report, bad_chunks, on_pack)
            for pack, size in to_read
        ]
        try:
            for job in jobs:
                job.result()
        except BaseException:  # on_pack may stop the check: the packs not begun are not read
            for job in jobs:
                job.cancel()
            raise
    report.problems.sort(key=lambda p: p.object)
    known = set(index.named_packs())
    report.unused_packs = sorted(p for p in present if p.rsplit("/", 1)[1] not in known)
    for path in repo.snapshot_paths(foreign=report.add_foreign):
        if _check_snapshot(repo, path, bad_packs, bad_chunks, report):
            report.snapshots += 1
    for info in listing(repo.store, "trackers", report.add_foreign):
        try:
            repo.load_tracker(info.path.split("/", 1)[1])
        except CorruptObjectError as e:
            report.add(info.path, e.message)
    if report.ok:
        report.unused = unused_space(repo)


def _read_pack(
    repo: Repository,
    pack: str,
    size: int,
    report: CheckReport,
    bad_chunks: dict[bytes, str],
    on_pack: Callable[[int], None] | None,
) -> None:
    """Open and verify every indexed chunk of the pack, read a piece at a time, and its trailer
    (in a worker thread)."""
    path = pack_path(pack)
    entries = repo.index.in_pack(pack)
    try:
        listed = {t.chunk_id for t in read_trailer(repo.store, pack, repo.codec, size)}
        if not listed.issuperset(e.chunk_id for e in entries):
            report.add(path, f"the trailer of {path} does not list all its indexed chunks")
    except CorruptObjectError as e:
        report.add(path, e.message)
    bad = []
    for piece in _pieces(entries):
        start = piece[0].offset
        end = max(e.offset + e.length for e in piece)
        data = memoryview(repo.store.get_range(path, start, end - start))
        for e in piece:
            try:
                at = e.offset - start
                repo.codec.decode_chunk(e.chunk_id, data[at : at + e.length], path)
            except CorruptObjectError:
                bad.append(e.chunk_id)
    if bad:
        report.add(path, f"{path}: {len(bad)} of its {len(entries)} chunks are damaged")
        bad_chunks.update(dict.fromkeys(bad, path))
    if on_pack is not None:
        on_pack(size)


def _pieces(entries: list[IndexEntry]) -> Iterator[list[IndexEntry]]:
    """The entries in the order they lie, in runs that span READ_PIECE bytes of the pack at most
    (or one chunk, which a pack may hold longer)."""
    piece: list[IndexEntry] = []
    for e in sorted(entries, key=lambda e: e.offset):
        if piece and e.offset + e.length - piece[0].offset > READ_PIECE:
            yield piece
            piece = []
        piece.append(e)
    if piece:
        yield piece


def _check_snapshot(
    repo: Repository,
    path: str,
    bad_packs: dict[str, str],
    bad_chunks: dict[bytes, str],
    report: CheckReport,
) -> bool:
    """Check a manifest page by page, then the chunks it names against the index; False when it
    is gone (forgotten since it was listed)."""
    name = path.removeprefix("snapshots/")
    with ChunkUse(repo.cache_folder) as use:
        try:
            use.add(repo.load_snapshot(path).entries())
        except ObjectNotFoundError:
            return False
        except CorruptObjectError as e:
            report.add(path, e.message)
            report.affected.setdefault(name, set()).add(path)
            return True
        missing, past = _Fault("in no index"), _Fault("read past their end")
        for batch in use.batches():
            found = repo.index.locate_many([chunk for chunk, _ in batch])
            for chunk, end in batch:
                where = found.get(chunk)
                if where is None:
                    missing.add(chunk)
                elif end > where.plain_length:
                    past.add(chunk)
                elif where.pack in bad_packs:
                    report.affected.setdefault(name, set()).add(bad_packs[where.pack])
                elif chunk in bad_chunks:
                    report.affected.setdefault(name, set()).add(bad_chunks[chunk])
    for fault in (missing, past):
        if fault.count:
            report.add(
                path, f"{path} names {fault.count} chunk(s) {fault.what}, the first {fault.first}"
            )
            report.affected.setdefault(name, set()).add(path)
    return True


@dataclass
class _Fault:
    """Chunks a manifest names wrongly in one way: counted, not listed, so a report stays small."""

    what: str
    count: int = 0
    first: str = ""

    def add(self, chunk: bytes) -> None:
        self.count += 1
        self.first = self.first or chunk.hex()[:16]
