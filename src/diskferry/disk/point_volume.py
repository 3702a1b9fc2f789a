"""PointVolume: a backup point served over HTTPS, as KubeVirt serves a Pull
VirtualMachineBackup's volumes (and diskferry's backup-point worker serves its points): the
disk's bytes from its `data` endpoint (`?offset=&length=`), its extents from its `map`
endpoint (pages of the shared backup-map shape, `?offset=&length=&page_size=`), both behind
the export token.

The map of a full point says what reads as zeros; the map of an incremental one (`changes`)
says what changed since its checkpoint, and nothing of zeros: such a point read whole counts
every byte as data. Memory does not grow with the disk: the map is asked a page at a time.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from urllib.parse import urlencode

from urllib3.exceptions import HTTPError as Urllib3Error

from diskferry.base.retry import fault_text, pause
from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent
from diskferry.disk.extent_map import ExtentMapError, parse_page
from diskferry.disk.http import HttpSource, Response, TruncatedError
from diskferry.disk.volume import ExtentContext, Volume

TOKEN_HEADER = "x-kubevirt-export-token"
"""The header a point's (and an export's) token goes in, as KubeVirt names it."""
PAGE_SIZE = 512
"""Extents asked of the map in one request."""


class PointVolume(Volume):
    """A backup point's disk, read-only; safe from many threads (pooled connections).

    `data_url` and `map_url` are the volume's endpoints, `token` the point's, `ca_bundle` the
    CA its certificate comes from; `changes` says the map shows the runs changed since a
    checkpoint (an incremental point). A break in a read asks again for what is left of it."""

    readonly = True

    def __init__(
        self,
        data_url: str,
        map_url: str,
        token: str,
        *,
        ca_bundle: str | None = None,
        changes: bool = False,
        cancel: threading.Event | None = None,
        page_size: int = PAGE_SIZE,
        retries: int = 5,
        backoff: float = 0.5,
        timeout: float = 30.0,
    ) -> None:
        headers = {TOKEN_HEADER: token}
        self.data = HttpSource(data_url, ca_bundle, headers, retries, backoff, timeout)
        self.map = HttpSource(map_url, ca_bundle, headers, retries, backoff, timeout)
        self.changes = changes
        self.cancel = cancel
        self.page_size = page_size
        size, _ = self.data.head()
        if size is None:
            self.close()
            raise VolumeError(f"{self.data.shown_url}: the server sends no Content-Length")
        self._size = size

    @property
    def size(self) -> int:
        """The disk's size: the Content-Length of its whole `data`."""
        return self._size

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` from `offset` with one GET of `data`; a break asks for the rest."""
        view = memoryview(buf).cast("B")
        if offset + len(view) > self._size:
            raise VolumeError(f"read past the end of {self}")
        done = attempt = 0
        while done < len(view):
            at, left = offset + done, len(view) - done
            query = urlencode({"offset": at, "length": left})
            resp = self.data.request("GET", cancel=self.cancel, query=query)
            try:
                done += _read_body(resp, view[done:], str(self), at)
            except (Urllib3Error, http.client.HTTPException, OSError) as e:
                attempt += 1
                if attempt > self.data.retries:
                    raise TruncatedError(
                        f"{self}: the read at byte {at} broke and did not resume after "
                        f"{self.data.retries} retries: {fault_text(e)}"
                    ) from e
                why = f"the read of {self} broke at byte {at} ({fault_text(e)})"
                pause(attempt, self.data.backoff, why, self.cancel)

    def extents(
        self, context: ExtentContext = "zero", offset: int = 0, length: int | None = None
    ) -> Iterator[Extent]:
        """The map's extents over [offset, offset+length): with `dirty`, the runs changed since
        the point's checkpoint (all of a full point's); with `zero`, what reads as zeros (none
        known of an incremental point)."""
        if self.changes != (context == "dirty"):
            yield from super().extents(context, offset, length)
            return
        end = self._size if length is None else min(self._size, offset + length)
        at = offset
        while at < end:
            query = urlencode({"offset": at, "length": end - at, "page_size": self.page_size})
            answer = self.map.request("GET", stream=False, cancel=self.cancel, query=query)
            page, next_offset = parse_page(answer.data)
            for ext in page:
                if ext.start != at or ext.length == 0:
                    raise ExtentMapError(
                        f"{self.map.shown_url}: the map's extents do not follow on at {at}"
                    )
                stop = min(ext.end, end)
                yield Extent(at, stop - at, zero=ext.zero, dirty=bool(ext.dirty))
                at = stop
                if at >= end:
                    return
            if next_offset is None:
                break
            if next_offset != at:
                raise ExtentMapError(
                    f"{self.map.shown_url}: the map's next page starts at {next_offset}, "
                    f"not where its extents end ({at})"
                )
        if at < end:
            raise ExtentMapError(
                f"{self.map.shown_url}: the map ends at {at}, short of the disk's {end} bytes"
            )

    def close(self) -> None:
        """Close pooled connections."""
        self.data.close()
        self.map.close()

    def __str__(self) -> str:
        return self.data.shown_url


def _read_body(resp: Response, view: memoryview, shown: str, at: int) -> int:
    """Read `resp`'s body into `view`, which it must fill exactly; how much it read before a
    break (raised) or in all. The connection goes back to the pool only once read whole."""
    sent = resp.headers.get("Content-Length")
    if sent is not None and int(sent) != len(view):
        resp.close()
        raise VolumeError(f"{shown}: asked for {len(view)} bytes at {at}, the server sends {sent}")
    done = 0
    try:
        while done < len(view):
            n = resp.readinto(view[done:])
            if n == 0:
                raise http.client.IncompleteRead(b"", len(view) - done)
            done += n
    except BaseException:
        resp.close()
        raise
    resp.release_conn()
    return done
