"""The resuming HTTP(S) reader and HttpVolume, against nginx and a faulty server."""

from __future__ import annotations

import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from diskferry.base.errors import CancelledError
from diskferry.disk.http import (
    HttpError,
    HttpSource,
    RangeNotSupportedError,
    SourceChangedError,
    TlsError,
    TruncatedError,
)
from diskferry.disk.http_volume import HttpVolume

BODY = random.Random(3).randbytes(3 << 20)


@pytest.fixture(params=[False, True], ids=["pooled", "owned"])
def owned(request) -> bool:
    """Whether bodies are read on connections of the source's own (`http_owned`)."""
    return request.param


@pytest.fixture
def body(tmp_path):
    path = tmp_path / "body.bin"
    path.write_bytes(BODY)
    return path


def read_all(reader, n: int = 100_000) -> bytes:
    out = bytearray()
    while chunk := reader.read(n):
        out += chunk
    reader.close()
    return bytes(out)


def test_head_and_volume_reads_over_nginx(nginx, body):
    source = HttpSource(nginx.publish(body, "volume.bin"))
    assert source.head() == (len(BODY), True)
    with HttpVolume(source) as vol:
        assert vol.size == len(BODY)
        offsets = [0, 1, 65536, len(BODY) - 5000, 1234567]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda o: vol.read(o, 5000), offsets * 4))
        assert got == [BODY[o : o + 5000] for o in offsets * 4]


def test_volume_refuses_a_server_without_range(faulty, body):
    with pytest.raises(RangeNotSupportedError, match="does not accept Range"):
        HttpVolume(HttpSource(faulty.add("body", body, ranges=False)))


def test_reader_resumes_after_each_drop(faulty, body, owned):
    url = faulty.add("body", body, drop_after=700_000, drops=3)
    reader = HttpSource(url, backoff=0.01, owned=owned).open_stream()
    assert read_all(reader) == BODY
    assert reader.resumes == 3
    assert [h.get("Range") for h in faulty.seen("body")] == [
        None,
        "bytes=700000-",
        "bytes=1400000-",
        "bytes=2100000-",
    ]


def test_reader_resumes_only_the_same_version(faulty, body, owned):
    url = faulty.add("body", body, drop_after=500_000, changing=True)
    with pytest.raises(SourceChangedError, match="resource changed during the transfer"):
        read_all(HttpSource(url, backoff=0.01, owned=owned).open_stream())
    assert [h.get("If-Range") for h in faulty.seen("body")] == [None, '"v1"']


def test_reader_refuses_a_range_it_did_not_ask_for(faulty, body, owned):
    url = faulty.add("body", body, drop_after=1000, range_offset=10)
    with pytest.raises(HttpError, match="asked for bytes from 1000, the server sent"):
        read_all(HttpSource(url, backoff=0.01, owned=owned).open_stream())


def test_reader_of_a_bounded_range(faulty, body, owned):
    url = faulty.add("body", body, drop_after=1000)
    reader = HttpSource(url, backoff=0.01, owned=owned).open_stream(5000, end=9000)
    assert read_all(reader) == BODY[5000:9000]
    assert [h.get("Range") for h in faulty.seen("body")] == ["bytes=5000-8999", "bytes=6000-8999"]


def test_reader_gives_up_when_resuming_brings_nothing(faulty, body, owned):
    url = faulty.add("body", body, drop_after=0, drops=100)
    reader = HttpSource(url, retries=2, backoff=0.01, owned=owned).open_stream()
    with pytest.raises(TruncatedError, match="did not resume after 2 retries"):
        read_all(reader)


def test_cancel_during_backoff(faulty, body, owned):
    url = faulty.add("body", body, drop_after=1000, drops=100)
    cancel = threading.Event()
    reader = HttpSource(url, backoff=60, owned=owned).open_stream(cancel=cancel)
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(CancelledError):
        read_all(reader)


def test_error_statuses_are_not_retried(faulty, owned):
    url = faulty.add("gone", status=410)
    with pytest.raises(HttpError) as e:
        HttpSource(url, backoff=10, owned=owned).open_stream()
    assert e.value.status == 410
    assert len(faulty.seen("gone")) == 1


def test_tls_verification(faulty_tls, tls, body, owned):
    url = faulty_tls.add("body", body)
    assert read_all(HttpSource(url, ca_bundle=str(tls.ca), owned=owned).open_stream()) == BODY
    with pytest.raises(TlsError, match="TLS verification failed"):
        HttpSource(url, owned=owned).open_stream()


def test_connection_refused_is_an_http_error(owned):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = HttpSource(
        f"http://127.0.0.1:{port}/x?token=secret", retries=1, backoff=0.01, owned=owned
    )
    with pytest.raises(HttpError, match=f"^http://127.0.0.1:{port}/x: cannot connect") as e:
        source.open_stream()
    assert "secret" not in e.value.message


def test_volume_of_a_known_size_asks_no_head_and_reads_one_version(faulty, body):
    url = faulty.add("body", body, changing=True)
    with HttpVolume(HttpSource(url), size=len(BODY), validator='"v1"') as vol:
        assert vol.read(1000, 5000) == BODY[1000:6000]
        with pytest.raises(SourceChangedError, match="cannot be read at byte 7000"):
            vol.read(7000, 5000)
    assert [method for method, *_ in faulty.requests] == ["GET", "GET"]
    assert [h.get("If-Range") for h in faulty.seen("body")] == ['"v1"', '"v1"']


def test_an_owned_read_that_redirects_is_asked_again_the_pooled_way(faulty, body):
    target = faulty.add("body", body)
    url = faulty.add("moved", redirect=target)
    reader = HttpSource(url, owned=True).open_stream(1000, end=9000)
    assert read_all(reader) == BODY[1000:9000]
    assert len(faulty.seen("moved")) == 2
    assert [h.get("Range") for h in faulty.seen("body")] == ["bytes=1000-8999"]


class _KeepAliveServer:
    """Answers GETs with BODY[:ANSWER] over HTTP/1.1 on 127.0.0.1, kept alive or, with
    `close_after`, each connection closed after that many answers without saying so."""

    ANSWER = 1000

    def __init__(self, close_after: int | None) -> None:
        self.close_after = close_after
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/x"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self._sock.accept()
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as requests:
            answered = 0
            while self.close_after is None or answered < self.close_after:
                while (line := requests.readline()) not in (b"\r\n", b""):
                    pass
                if not line:
                    return
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {self.ANSWER}\r\n\r\n"
                conn.sendall(head.encode() + BODY[: self.ANSWER])
                answered += 1


@pytest.mark.parametrize(("close_after", "connections"), [(None, 1), (1, 3)])
def test_owned_connections_are_kept_alive_and_replaced_when_the_server_closed_them(
    close_after, connections
):
    server = _KeepAliveServer(close_after)
    source = HttpSource(server.url, owned=True, retries=0)
    for _ in range(3):
        assert read_all(source.open_stream()) == BODY[: server.ANSWER]
    source.close()
    assert server.connections == connections
