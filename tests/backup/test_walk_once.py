"""WalkOnce: a disk's pieces are asked of it once when they are few, again when they are many."""

from diskferry.backup.reader import Piece, WalkOnce


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
