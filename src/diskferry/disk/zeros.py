"""Fast all-zero detection, and the runs of non-zero data inside a block."""

_ZERO_BLOCK = bytes(1 << 20)
PIECE = 64 * 1024
PAGE = 4096


def is_zero(data: bytes | bytearray | memoryview) -> bool:
    """Whether every byte of `data` is zero."""
    view = memoryview(data).cast("B")
    step = len(_ZERO_BLOCK)
    for pos in range(0, len(view), step):
        piece = view[pos : pos + step]
        if piece != _ZERO_BLOCK[: len(piece)]:
            return False
    return True


def data_runs(data: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """(start, end) of the runs in `data` that are not zero, to 4 KiB at their edges."""
    view = memoryview(data).cast("B")
    runs: list[tuple[int, int]] = []
    for pos in range(0, len(view), PIECE):
        end = min(pos + PIECE, len(view))
        if view[pos:end] == _ZERO_BLOCK[: end - pos]:
            continue
        if runs and runs[-1][1] == pos:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((pos, end))
    return [_trim(view, start, end) for start, end in runs]


def _trim(view: memoryview, start: int, end: int) -> tuple[int, int]:
    zero_page = _ZERO_BLOCK[:PAGE]
    while start + PAGE < end and view[start : start + PAGE] == zero_page:
        start += PAGE
    while end - PAGE > start and end % PAGE == 0 and view[end - PAGE : end] == zero_page:
        end -= PAGE
    return start, end
