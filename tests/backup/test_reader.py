"""Reading a disk into chunks: pieces walked once when few, and handed on without a copy."""

import threading

from diskferry.backup.reader import Piece, WalkOnce, store_pieces
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.progress import Progress


def _walker(n: int) -> tuple[list[int], WalkOnce]:
    walks: list[int] = []

    def walk():
        walks.append(1)
        for i in range(n):
            yield Piece(i * 10, 10, ((i * 10, 10),))

    return walks, WalkOnce(walk, limit=4)


def test_a_short_walk_is_replayed_without_walking_the_disk_again():
    walks, pieces = _walker(4)
    first = list(pieces())
    assert list(pieces()) == first and len(first) == 4
    assert len(walks) == 1


def test_a_long_walk_is_walked_again_each_time():
    walks, pieces = _walker(5)
    assert list(pieces()) == list(pieces())
    assert len(walks) == 2


def test_a_walk_left_half_way_is_not_remembered():
    walks, pieces = _walker(3)
    next(pieces())
    assert len(list(pieces())) == 3
    assert len(list(pieces())) == 3
    assert len(walks) == 2


class _Writer:
    """Takes chunks as PackWriter.add does, keeping each buffer it was given."""

    def __init__(self):
        self.given = []
        self.lock = threading.Lock()

    def add(self, plain):
        with self.lock:
            self.given.append(plain)
        return bytes(plain[:4])


def test_each_piece_reaches_the_writer_in_the_buffer_it_was_read_into(tmp_path):
    (tmp_path / "disk").write_bytes(b"abcd" * 1024 + bytes(4096) + b"efgh" * 1024)
    pieces = [Piece(i * 4096, 4096, ((i * 4096, 4096),)) for i in range(3)]
    writer = _Writer()
    with FileVolume(str(tmp_path / "disk")) as volume:
        stored = store_pieces(volume, iter(pieces), writer, Progress(), threads=2)
        entries = [e for e, _ in stored]
    assert [e.chunk for e in entries] == [b"abcd", None, b"efgh"]
    assert sorted(bytes(b[:4]) for b in writer.given) == [b"abcd", b"efgh"]
    assert all(type(b) is bytearray for b in writer.given)
