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

    def add_many(self, plains):
        with self.lock:
            self.given.extend(plains)
        return [bytes(plain[:4]) for plain in plains]


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


class _CountingVolume(FileVolume):
    """A file whose batched reads are counted, each batch's sizes kept."""

    def __init__(self, path):
        super().__init__(path)
        self.batches = []
        self.lock = threading.Lock()

    def read_into_many(self, pieces):
        with self.lock:
            self.batches.append([len(buf) for _, buf in pieces])
        super().read_into_many(pieces)


def test_small_pieces_are_read_a_batch_at_a_time_and_large_ones_alone(tmp_path):
    kib = 1024
    data = bytes(range(256)) * (64 * kib)  # 16 MiB
    (tmp_path / "disk").write_bytes(data)
    small = [Piece(i * 128 * kib, 64 * kib, ((i * 128 * kib, 64 * kib),)) for i in range(40)]
    large = Piece(8 << 20, 4 << 20, ((8 << 20, 1 << 20), (10 << 20, 1 << 20)))
    writer = _Writer()
    with _CountingVolume(str(tmp_path / "disk")) as volume:
        stored = list(store_pieces(volume, iter([*small, large]), writer, Progress(), threads=3))
    assert [entry.offset for entry, _ in stored] == [p.start for p in [*small, large]]
    assert sum(n for _, n in stored) == 40 * 64 * kib + 2 * (1 << 20)
    assert sorted(map(len, volume.batches)) == [2, 8, 16, 16]  # 16 small pieces per MiB
    assert [1 << 20, 1 << 20] in volume.batches
    assert [bytes(b) for b in writer.given[:1]] == [data[: 64 * kib]]
