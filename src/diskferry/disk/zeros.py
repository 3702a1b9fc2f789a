"""Fast all-zero detection, and the runs of non-zero data inside a block."""

_ZERO_BLOCK = bytes(1 << 20)
PIECE = 64 * 1024
PAGE = 4096


def _zero_piece(piece: memoryview) -> bool:
    """Whether a piece of at most 1 MiB is all zeros.

    bytes.startswith compares with memcmp; comparing memoryviews goes byte by byte.
    """
    return _ZERO_BLOCK.startswith(piece)


def is_zero(data: bytes | bytearray | memoryview) -> bool:
    """Whether every byte of `data` is zero."""
    view = memoryview(data).cast("B")
    step = len(_ZERO_BLOCK)
    return all(_zero_piece(view[pos : pos + step]) for pos in range(0, len(view), step))


def data_runs(data: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """(start, end) of the runs in `data` that are not zero, to 4 KiB at their edges."""
    view = memoryview(data).cast("B")
    runs: list[tuple[int, int]] = []
    for pos in range(0, len(view), PIECE):
        end = min(pos + PIECE, len(view))
        if _zero_piece(view[pos:end]):
            continue
        if runs and runs[-1][1] == pos:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((pos, end))
    return [_trim(view, start, end) for start, end in runs]


def _trim(view: memoryview, start: int, end: int) -> tuple[int, int]:
    while start + PAGE < end and _zero_piece(view[start : start + PAGE]):
        start += PAGE
    while end - PAGE > start and end % PAGE == 0 and _zero_piece(view[end - PAGE : end]):
        end -= PAGE
    return start, end
