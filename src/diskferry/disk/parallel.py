"""ordered_map: a function over items in threads, results in order, a bounded number in flight."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from diskferry.disk.errors import check_cancel

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    threads: int,
    cancel: threading.Event | None = None,
) -> Iterator[R]:
    """`fn(item)` for each item, run by `threads` threads, at most 2 x `threads` in flight.

    An exception of any call, or `cancel` being set, stops the rest and is raised.
    """
    pool = ThreadPoolExecutor(threads, thread_name_prefix="ordered-map")
    pending: deque[Future[R]] = deque()

    def next_result() -> R:
        check_cancel(cancel)
        return pending.popleft().result()

    try:
        for item in items:
            check_cancel(cancel)
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * threads:
                yield next_result()
        while pending:
            yield next_result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
