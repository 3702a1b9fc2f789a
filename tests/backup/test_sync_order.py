"""From the system calls: `repo init`, backups and a prune on a directory fsync every object
before it is renamed into place and its directory after, before anything naming it is written."""

import json
import os
import sys
from pathlib import Path

from backup_support import PASSWORD, MiB, make_disk, write_random
from strace_log import Op, read_ops, run_traced

from diskferry.backup.codec import MAX_STORED
from diskferry.backup.index import decode_index
from diskferry.backup.packs import pack_path
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import snapshot_path


def naming(url: str) -> dict[str, set[str]]:
    """What each object names: config the keys, an index its packs, a manifest the index
    objects holding its chunks, a tracker its snapshots."""
    with Repository.open(url, PASSWORD) as repo:
        names = {"config": {info.path for info in repo.store.list("keys/")}}
        holders: dict[bytes, set[str]] = {}
        for info in repo.store.list("index/"):
            entries = decode_index(
                info.path[len("index/") :], repo.store.get(info.path, limit=MAX_STORED), repo.codec
            )
            names[info.path] = {pack_path(e.pack) for e in entries}
            for e in entries:
                holders.setdefault(e.chunk_id, set()).add(info.path)
        for path in repo.snapshot_paths():
            chunks = {e.chunk for e in repo.load_snapshot(path).entries() if e.chunk is not None}
            names[path] = set().union(*(holders[chunk] for chunk in chunks))
        for info in repo.store.list("trackers/"):
            vm = info.path.split("/", 1)[1]
            tracker = repo.load_tracker(vm)
            assert tracker is not None
            names[info.path] = {
                snapshot_path(vm, disk, point.snapshot)
                for disk, chain in tracker.disks.items()
                for point in chain.checkpoints
            }
    return names


def order_problems(ops: list[Op], root: str, names: dict[str, set[str]]) -> list[str]:
    """Every way the calls break the durable order of writes, as sentences."""

    def relative(path: str) -> str:
        return os.path.relpath(path, root)

    def is_object(path: str) -> bool:
        return path.startswith(root + os.sep) and not any(
            part.startswith(".") for part in relative(path).split(os.sep)
        )

    def synced_after(path: str, moment: int) -> int | None:
        return next((s.end for s in syncs if s.path == path and s.start > moment), None)

    syncs = [op for op in ops if op.kind == "sync"]
    made = [op for op in ops if op.kind == "mkdir"]
    placed = [op for op in ops if op.kind == "place" and is_object(op.path)]
    problems = [
        f"{relative(op.path)} was written in place"
        for op in ops
        if op.kind == "open" and is_object(op.path)
    ]
    durable: dict[str, list[tuple[int, int]]] = {}
    for op in placed:
        name = relative(op.path)
        last_write = max(
            (w.end for w in ops if w.kind == "write" and w.path == op.source and w.end < op.start),
            default=-1,
        )
        if not any(
            s.path == op.source and last_write < s.start and s.end < op.start for s in syncs
        ):
            problems.append(f"{name} was renamed into place before its data was fsynced")
        folder = os.path.dirname(op.path)
        done = synced_after(folder, op.end)
        if done is None:
            problems.append(f"the directory of {name} was not fsynced after it was placed")
            continue
        for mkdir in made:
            if mkdir.end < op.start and (folder + os.sep).startswith(mkdir.path + os.sep):
                entry = synced_after(os.path.dirname(mkdir.path), mkdir.end)
                if entry is None:
                    problems.append(f"{mkdir.path}, made for {name}, was not fsynced in its parent")
                else:
                    done = max(done, entry)
        durable.setdefault(name, []).append((op.start, done))
    began = {op.path: op.start for op in ops if op.kind == "open"}
    for op in placed:
        namer, started = relative(op.path), began.get(op.source, op.start)
        for named in sorted(names.get(namer, set()) & durable.keys()):
            earlier = [done for at, done in durable[named] if at < started]
            if not earlier:
                problems.append(f"{namer} was written before {named}, which it names")
            elif earlier[-1] > started:
                problems.append(f"{namer} was written before {named}, which it names, was durable")
    new_index = [
        done for name, points in durable.items() if name.startswith("index/") for _, done in points
    ]
    for op in ops:
        if op.kind != "unlink" or not is_object(op.path):
            continue
        name = relative(op.path)
        if synced_after(os.path.dirname(op.path), op.end) is None:
            problems.append(f"the directory of {name} was not fsynced after it was deleted")
        if name.startswith(("packs/", "index/")) and any(done > op.start for done in new_index):
            problems.append(f"{name} was deleted before the index replacing it was durable")
    return problems


def counts(ops: list[Op], root: str, kind: str) -> dict[str, int]:
    """How many objects of each top folder the calls placed or deleted."""
    found: dict[str, int] = {}
    for op in ops:
        if op.kind == kind and op.path.startswith(root + os.sep):
            top = os.path.relpath(op.path, root).split(os.sep)[0]
            if not top.startswith("."):
                found[top] = found.get(top, 0) + 1
    return found


def test_objects_are_durable_before_anything_names_them(diskferry, tmp_path):
    diskferry.env.update(DISKFERRY_PASSWORD=PASSWORD, DISKFERRY_CACHE_DIR=str(tmp_path / "cli"))
    exe = str(Path(sys.executable).with_name("diskferry"))
    root = str(tmp_path / "repo")
    volume = make_disk(tmp_path / "disk.raw")
    backup = [exe, "backup", "--repo", root, "--vm", "vm", "--disk", f"d={volume}", "--json"]

    def traced(step: str, command: list[str]) -> tuple[list[Op], str]:
        trace = tmp_path / f"{step}.trace"
        out = run_traced(trace, command, diskferry.env)
        ops = read_ops(trace)
        assert order_problems(ops, root, naming(root)) == [], step
        return ops, out

    ops, _ = traced("init", [exe, "repo", "init", "--repo", root])
    assert counts(ops, root, "place") == {"keys": 1, "config": 1}
    ops, out = traced("full", [*backup, "--no-progress"])
    first = json.loads(out)["disks"][0]["snapshot"]
    placed = counts(ops, root, "place")
    assert placed["packs"] >= 1 and placed["index"] >= 1 and placed["locks"] >= 2
    assert placed["snapshots"] == 1 and placed["trackers"] == 1
    write_random(volume + ".cbt.qcow2", MiB, 3 * MiB)
    ops, out = traced("incremental", [*backup, "--no-progress"])
    assert json.loads(out)["disks"][0]["type"] == "incremental"
    assert counts(ops, root, "place")["snapshots"] == 1
    forget = diskferry("forget", "--repo", root, first)
    assert forget.code == 0, forget.stderr
    ops, _ = traced("prune", [exe, "prune", "--repo", root])
    deleted = counts(ops, root, "unlink")
    assert deleted["packs"] >= 1 and deleted["index"] >= 1
    assert counts(ops, root, "place")["index"] >= 1
