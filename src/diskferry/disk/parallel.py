"""parallel_map: a function over items in threads, a bounded number in flight, cancel honoured."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from diskferry.base.errors import check_cancel

T = TypeVar("T")
R = TypeVar("R")


def parallel_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    threads: int,
    cancel: threading.Event | None = None,
    ordered: bool = True,
) -> Iterator[R]:
    """`fn(item)` for each item, run by `threads` threads, at most 2 x `threads` in flight.

    Results come in the order of the items, or as they finish where `ordered` is false.
    An exception of any call, or `cancel` being set, stops the rest and is raised.
    """
    pool = ThreadPoolExecutor(threads, thread_name_prefix="parallel-map")
    pending: deque[Future[R]] = deque()

    def next_result() -> R:
        check_cancel(cancel)
        if ordered:
            return pending.popleft().result()
        wait(pending, return_when=FIRST_COMPLETED)
        finished = next(f for f in pending if f.done())
        pending.remove(finished)
        return finished.result()

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
