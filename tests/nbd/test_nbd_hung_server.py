"""NBD requests to a server that never answers: a deadline per request, and cancel."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from nbd_helpers import Server

from diskferry.base.errors import CancelledError
from diskferry.nbd import open_volume
from diskferry.nbd.client import NbdClient
from diskferry.nbd.errors import NbdConnectionError
from diskferry.nbd.volume import NbdVolume

JOIN = 30.0


@pytest.fixture
def hung(nbdkit: Callable[..., Server], tmp_path: Path) -> tuple[Server, Path]:
    """nbdkit whose reads take an hour, logging each request as it arrives; and the log."""
    log = tmp_path / "requests.log"
    server = nbdkit("memory", "4M", f"logfile={log}", "delay-read=3600", filters=("log", "delay"))
    return server, log


def _wait_for_log(log: Path, text: str, count: int = 1) -> None:
    """Wait until the server has logged `text` `count` times."""
    deadline = time.monotonic() + JOIN
    while log.read_text().count(text) < count:
        assert time.monotonic() < deadline, f"the server did not log {text!r} {count} times"
        time.sleep(0.01)


def test_a_request_past_its_deadline_fails_naming_server_and_command(
    hung: tuple[Server, Path],
) -> None:
    server, _ = hung
    with open_volume(server.url, request_timeout=1.0) as volume:
        with pytest.raises(NbdConnectionError) as caught:
            volume.read(4096, 512)
        message = str(caught.value)
        assert "NBD read of 512 bytes at offset 4096" in message
        assert server.url in message
        assert "no answer in 1 s" in message
        with pytest.raises(NbdConnectionError):
            volume.read(0, 512)


def test_cancel_wakes_every_waiter_at_once(hung: tuple[Server, Path]) -> None:
    server, log = hung
    cancel = threading.Event()
    client = NbdClient.connect(server.url, max_in_flight=2, cancel=cancel)
    assert _threads_of(server.url)
    errors: list[BaseException] = []

    def read(offset: int) -> None:
        try:
            client.read(offset, 4096)
        except BaseException as e:
            errors.append(e)

    # two reads in flight, a third waiting for a slot
    threads = [threading.Thread(target=read, args=(i * 4096,)) for i in range(3)]
    for thread in threads:
        thread.start()
    _wait_for_log(log, " Read id=", 2)
    cancel.set()
    for thread in threads:
        thread.join(JOIN)
        assert not thread.is_alive()
    assert len(errors) == 3
    assert all(isinstance(e, CancelledError) for e in errors), errors
    with pytest.raises(CancelledError):
        client.read(0, 512)
    client.close()
    assert not _threads_of(server.url)  # torn down


def test_cancel_reaches_a_volume_read(hung: tuple[Server, Path]) -> None:
    server, log = hung
    cancel = threading.Event()
    volume = NbdVolume.open(server.url, cancel=cancel)
    caught: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(caught, lambda: volume.read(0, 65536)))
    reader.start()
    _wait_for_log(log, " Read id=")
    cancel.set()
    reader.join(JOIN)
    assert not reader.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], CancelledError)
    volume.close()


def _threads_of(url: str) -> list[threading.Thread]:
    """The threads a client of `url` runs."""
    return [t for t in threading.enumerate() if url in t.name]


def _catch(into: list[BaseException], action: Callable[[], object]) -> None:
    try:
        action()
    except BaseException as e:
        into.append(e)
