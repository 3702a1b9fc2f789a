"""How the chunk index grows: cache fill, lookups and peak memory with 10^5 to 10^7 chunks.

The repository holds index objects of synthetic entries and nothing else (no packs, no
data). Each measured step runs in a process of its own and reports its own peak RSS
(VmHWM): filling the local index cache from the index objects, as the first command on a
machine does, and then lookups of chunks that are there (`Repository.locate_chunks`, as a
restore asks) and of a mix of present and absent ones (`IndexCache.has`, as a backup asks).
The peer keeps the whole index in a dict, as a tool that loads its index into memory does.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.measure import Run, run_process
from benchmarks.plot import Panel, Plot, Series
from benchmarks.table import Table, mib
from diskferry.backup.config import KdfParams
from diskferry.backup.index import IndexEntry, decode_index, encode_index, index_path, new_index_id
from diskferry.backup.packs import TARGET_PACK_SIZE
from diskferry.backup.repository import Repository

PASSWORD = "bench-index-password"
# a key derivation of 1 MiB, so that the peak RSS is the index's and not scrypt's 64 MiB
LIGHT_KDF = KdfParams(n=1 << 10)
PER_INDEX = 100_000
CHUNK = 1 << 20
STORED = CHUNK // 2
PER_PACK = TARGET_PACK_SIZE // STORED
_SEED = 20261203


def _ids(start: int, count: int) -> bytes:
    """The ids of chunks `start`.. of the synthetic index, 32 bytes each."""
    return random.Random(_SEED + start).randbytes(32 * count)


def _entries(start: int, count: int) -> list[IndexEntry]:
    """Index entries of chunks `start`..: 1 MiB chunks stored in 512 KiB, packs of 16 MiB."""
    ids = _ids(start, count)
    return [
        IndexEntry(
            ids[i * 32 : i * 32 + 32],
            f"{(start + i) // PER_PACK:032x}",
            (start + i) % PER_PACK * STORED,
            STORED,
            CHUNK,
        )
        for i in range(count)
    ]


@dataclass
class SyntheticIndex:
    """A repository whose index names `chunks` synthetic chunks, grown by `grow`."""

    root: Path
    url: str = ""
    objects: list[tuple[int, int]] = field(default_factory=list)  # (first chunk, count)

    def __post_init__(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.url = str(self.root / "repo")
        Repository.init(self.url, PASSWORD, kdf=LIGHT_KDF).close()

    @property
    def chunks(self) -> int:
        """How many chunks the index names."""
        return sum(count for _, count in self.objects)

    def grow(self, chunks: int) -> None:
        """Write index objects of PER_INDEX new entries (the last fewer) up to `chunks`."""
        with Repository.open(self.url, PASSWORD) as repo:
            while self.chunks < chunks:
                start = self.chunks
                count = min(PER_INDEX, chunks - start)
                index_id = new_index_id()
                blob = encode_index(index_id, _entries(start, count), repo.codec)
                repo.store.put(index_path(index_id), blob)
                self.objects.append((start, count))

    def write_probes(self, path: Path, lookups: int) -> int:
        """`lookups` ids to `path`: half of them indexed, spread over every index object, the
        others not indexed; how many are indexed."""
        rng = random.Random(_SEED - 1)
        present = []
        per_object = max(1, lookups // 2 // len(self.objects))
        for start, count in self.objects:
            ids = _ids(start, count)
            for i in rng.sample(range(count), min(per_object, count)):
                present.append(ids[i * 32 : i * 32 + 32])
        absent = rng.randbytes(32 * (lookups - len(present)))
        path.write_bytes(b"".join(present) + absent)
        return len(present)


def _peak() -> int:
    """This process's peak RSS in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def _fill(url: str, cache: str) -> dict:
    with Repository.open(url, PASSWORD, cache_root=Path(cache)) as repo:
        return {"chunks": repo.index.totals()[0]}


def _lookups(url: str, cache: str, probes: str, present: str) -> dict:
    """Time `has` over every probe, then `locate_chunks` over the indexed ones, in the cache."""
    ids = Path(probes).read_bytes()
    wanted = [ids[i : i + 32] for i in range(0, len(ids), 32)]
    indexed = wanted[: int(present)]
    with Repository.open(url, PASSWORD, cache_root=Path(cache)) as repo:
        index = repo.index
        start = time.perf_counter()
        found = sum(index.has(chunk_id) for chunk_id in wanted)
        has = time.perf_counter() - start
        start = time.perf_counter()
        located = repo.locate_chunks(indexed)
        locate = time.perf_counter() - start
    return {"found": found, "located": len(located), "has": has, "locate": locate}


def _whole(url: str, probes: str, present: str) -> dict:
    """The same lookups in a dict of every index entry, read from the index objects."""
    ids = Path(probes).read_bytes()
    wanted = [ids[i : i + 32] for i in range(0, len(ids), 32)]
    with Repository.open(url, PASSWORD) as repo:
        start = time.perf_counter()
        table: dict[bytes, IndexEntry] = {}
        for info in repo.store.list("index/"):
            name = info.path.rsplit("/", 1)[1]
            table.update(
                (e.chunk_id, e) for e in decode_index(name, repo.store.get(info.path), repo.codec)
            )
        load = time.perf_counter() - start
        start = time.perf_counter()
        found = sum(chunk_id in table for chunk_id in wanted)
        has = time.perf_counter() - start
        start = time.perf_counter()
        located = {chunk_id: table[chunk_id] for chunk_id in wanted[: int(present)]}
        locate = time.perf_counter() - start
    return {"found": found, "located": len(located), "has": has, "locate": locate, "load": load}


_STEPS = {"fill": _fill, "lookups": _lookups, "whole": _whole}


def _step(workdir: Path, name: str, *args: str) -> tuple[Run, dict]:
    """Run one step in a process of its own: its time and own peak RSS, and what it printed."""
    out = workdir / f"{name}.json"
    with open(out, "w") as f:
        run = run_process([sys.executable, "-m", "benchmarks.growth_index", name, *args], stdout=f)
    result = json.loads(out.read_text())
    return Run(run.seconds, result["peak"]), result


def _us(seconds: list[float], count: int) -> str:
    return f"{statistics.median(seconds) / count * 1e6:.1f}"


def measure(
    workdir: Path, rounds: int, sizes: list[int], lookups: int, whole_max: int
) -> tuple[Table, Plot]:
    """For each number of chunks: the cache filled once, then lookups in it and in a dict of
    the whole index (up to `whole_max` chunks), alternating, `rounds` times."""
    index = SyntheticIndex((workdir / "growth-index").resolve())
    probes = index.root / "probes.bin"
    table = Table(
        "growth: repository index against the number of chunks",
        [
            "chunks",
            "index objects",
            "cache fill (s, one run)",
            "cache fill peak RSS",
            "cache file",
            "lookups",
            "has (µs each)",
            "locate_chunks (µs each)",
            "lookup process peak RSS",
            "whole index in a dict: load (s)",
            "dict: has (µs each)",
            "dict process peak RSS",
        ],
    )
    points: dict[str, list[tuple[int, float]]] = {}
    for chunks in sizes:
        index.grow(chunks)
        cache = index.root / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        fill, filled = _step(index.root, "fill", index.url, str(cache))
        if filled["chunks"] != chunks:
            raise RuntimeError(f"the index cache holds {filled['chunks']} chunks, not {chunks}")
        present = index.write_probes(probes, lookups)
        args = (index.url, str(cache), str(probes), str(present))
        ours: list[tuple[Run, dict]] = []
        whole: list[tuple[Run, dict]] = []
        for _ in range(rounds):
            ours.append(_step(index.root, "lookups", *args))
            if chunks <= whole_max:
                whole.append(_step(index.root, "whole", index.url, str(probes), str(present)))
        for _, result in ours + whole:
            if (result["found"], result["located"]) != (present, present):
                raise RuntimeError(f"lookups found {result}, {present} indexed")
        cache_bytes = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
        ours_peak = statistics.median(run.peak_rss for run, _ in ours)
        row = [
            f"{chunks:,}",
            f"{len(index.objects):,}",
            f"{fill.seconds:.1f}",
            mib(fill.peak_rss),
            mib(cache_bytes),
            f"{lookups:,} ({present:,} indexed)",
            _us([r["has"] for _, r in ours], lookups),
            _us([r["locate"] for _, r in ours], present),
            mib(ours_peak),
        ]
        points.setdefault("cache fill", []).append((chunks, fill.peak_rss / 2**20))
        points.setdefault("lookups in the cache", []).append((chunks, ours_peak / 2**20))
        points.setdefault("has", []).append(
            (chunks, statistics.median(r["has"] for _, r in ours) / lookups * 1e6)
        )
        points.setdefault("locate_chunks", []).append(
            (chunks, statistics.median(r["locate"] for _, r in ours) / present * 1e6)
        )
        if whole:
            whole_peak = statistics.median(run.peak_rss for run, _ in whole)
            load = statistics.median(r["load"] for _, r in whole)
            row += [f"{load:.1f}", _us([r["has"] for _, r in whole], lookups), mib(whole_peak)]
            points.setdefault("whole index in a dict", []).append((chunks, whole_peak / 2**20))
        else:
            row += ["not run (memory)"] * 3
        table.rows.append(row)
    table.notes.append(
        f"Medians of {rounds} round(s) but the cache fill, timed once a size from an empty cache; "
        f"1 MiB chunks stored in 512 KiB, {PER_INDEX:,} entries an index object; peak RSS is each "
        f"process's own VmHWM; the dict peer runs up to {whole_max:,} chunks."
    )
    shutil.rmtree(index.root)
    memory = Panel("peak RSS (MiB)", logy=True)
    memory.series = [
        Series.of(name, points[name])
        for name in ("cache fill", "lookups in the cache", "whole index in a dict")
        if name in points
    ]
    speed = Panel("lookup time (µs per chunk id)")
    speed.series = [
        Series.of("IndexCache.has", points["has"]),
        Series.of("Repository.locate_chunks", points["locate_chunks"]),
    ]
    plot = Plot(
        "Repository index: memory and lookup time against its size",
        "chunks in the index",
        [memory, speed],
        logx=True,
    )
    return table, plot


def main() -> None:
    """Run one step (fill, lookups or whole) and print its result with its peak RSS."""
    name, *args = sys.argv[1:]
    result = _STEPS[name](*args)
    print(json.dumps({**result, "peak": _peak()}))


if __name__ == "__main__":
    main()
