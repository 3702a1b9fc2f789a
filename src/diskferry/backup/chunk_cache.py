"""ChunkCache: each chunk read once while it is among the last few used, whichever thread asks."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future


class ChunkCache:
    """Keeps the `capacity` chunks used last; threads asking for one being read wait for it."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._items: OrderedDict[bytes, Future[bytes]] = OrderedDict()
        self.reads = 0

    def get(self, chunk_id: bytes, read: Callable[[], bytes]) -> bytes:
        """The chunk's plaintext, taken from the cache or got from `read()` now."""
        with self._lock:
            future = self._items.get(chunk_id)
            owner = future is None
            if future is None:
                future = self._items[chunk_id] = Future()
                self.reads += 1
                while len(self._items) > self._capacity:
                    self._items.popitem(last=False)
            else:
                self._items.move_to_end(chunk_id)
        if owner:
            try:
                future.set_result(read())
            except BaseException as e:
                future.set_exception(e)
                with self._lock:
                    if self._items.get(chunk_id) is future:
                        del self._items[chunk_id]
        return future.result()
