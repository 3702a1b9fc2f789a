"""The chunk index of a million chunks is looked up with flat memory, unlike a dict of it all."""

import json
import os
import subprocess
import sys

import pytest

from diskferry.backup.index import IndexEntry, encode_index, index_path, new_index_id

CHUNKS = 1_000_000
PER_INDEX = 100_000
BOUND = 100 << 20

PROBE = """
import json, os, sys
from diskferry.backup.codec import MAX_STORED
from diskferry.backup.index import decode_index
from diskferry.backup.repository import Repository


def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024


url, mode, probes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
repo = Repository.open(url, "pw")
# the peak so far is the key derivation's: count from here (5 resets the peak RSS)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
if mode == "cache":
    found = [repo.index.locate(bytes.fromhex(p)) for p in probes]
    found = [None if f is None else f.pack for f in found]
else:
    table = {}
    for info in repo.store.list("index/"):
        blob = repo.store.get(info.path, limit=MAX_STORED)
        for e in decode_index(info.path[6:], blob, repo.codec):
            table[e.chunk_id] = e
    found = [table[bytes.fromhex(p)].pack if bytes.fromhex(p) in table else None for p in probes]
print(json.dumps({"growth": status("VmHWM") - before, "found": found}))
"""


def probe(url, mode, probes, cache_dir):
    env = {**os.environ, "DISKFERRY_CACHE_DIR": str(cache_dir / mode)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, url, mode, json.dumps(probes)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.long
def test_million_chunk_index_lookups_stay_under_a_memory_bound(dir_url, new_repo, cache_dir):
    repo = new_repo(dir_url, password="pw")
    packs = [os.urandom(16).hex() for _ in range(CHUNKS // 4000)]
    probes, expected = [], []
    for start in range(0, CHUNKS, PER_INDEX):
        ids = os.urandom(32 * PER_INDEX)
        entries = [
            IndexEntry(ids[i * 32 : i * 32 + 32], packs[(start + i) // 4000], i * 7, 5000, 9000)
            for i in range(PER_INDEX)
        ]
        probes.append(entries[start // 1000].chunk_id.hex())
        expected.append(entries[start // 1000].pack)
        index_id = new_index_id()
        repo.store.put(index_path(index_id), encode_index(index_id, entries, repo.codec))
    probes.append(os.urandom(32).hex())
    expected.append(None)

    cached = probe(dir_url, "cache", probes, cache_dir)
    assert cached["found"] == expected
    assert cached["growth"] < BOUND
    whole = probe(dir_url, "dict", probes, cache_dir)
    assert whole["found"] == expected
    assert whole["growth"] > 2 * cached["growth"]
    assert whole["growth"] > BOUND
