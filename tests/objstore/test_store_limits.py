"""A whole read takes a limit: an object longer than it is refused, naming it, before any of it
is read, on a directory (whatever its size, a sparse file costs nothing) and on S3."""

import os

import pytest
from fuzzing import memory_bound

from diskferry.objstore.errors import ObjectNotFoundError, ObjectTooLargeError
from diskferry.objstore.store import ObjectStore

MiB = 1 << 20
LIMIT = 4096


@pytest.mark.parametrize("size", [0, 1, LIMIT])
def test_an_object_within_the_limit_is_read_whole(store_url, size):
    store = ObjectStore(store_url)
    data = os.urandom(size)
    store.put("objects/one", data)
    assert store.get("objects/one", limit=LIMIT) == data
    assert store.get("objects/one", limit=size) == data


@pytest.mark.parametrize("size", [LIMIT + 1, 16 * MiB])
def test_an_object_past_the_limit_is_refused_without_being_read(store_url, size):
    store = ObjectStore(store_url)
    store.put("objects/big", bytes(size))
    with memory_bound(MiB), pytest.raises(ObjectTooLargeError) as refused:
        store.get("objects/big", limit=LIMIT)
    assert (refused.value.path, refused.value.size, refused.value.limit) == (
        "objects/big",
        size,
        LIMIT,
    )
    assert refused.value.message == (
        f"{store_url}: objects/big is {size} bytes long, more than the {LIMIT} bytes it may be; "
        "it was not read"
    )


def test_a_huge_sparse_file_is_refused_without_being_read(tmp_path):
    store = ObjectStore(str(tmp_path / "store"))
    os.mkdir(tmp_path / "store" / "index")
    with open(tmp_path / "store" / "index" / "huge", "wb") as f:
        f.truncate(256 * MiB)
    with memory_bound(MiB), pytest.raises(ObjectTooLargeError, match="268435456 bytes long"):
        store.get("index/huge", limit=64 * MiB)


def test_a_missing_object_is_not_found_whatever_the_limit(store_url):
    with pytest.raises(ObjectNotFoundError, match="nothing/here does not exist"):
        ObjectStore(store_url).get("nothing/here", limit=LIMIT)
