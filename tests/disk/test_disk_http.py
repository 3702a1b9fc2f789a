"""The resuming HTTP(S) reader and HttpVolume, against nginx and a faulty server."""

from __future__ import annotations

import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from diskferry.disk.errors import CancelledError
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


def test_reader_resumes_after_each_drop(faulty, body):
    url = faulty.add("body", body, drop_after=700_000, drops=3)
    reader = HttpSource(url, backoff=0.01).open_stream()
    assert read_all(reader) == BODY
    assert reader.resumes == 3
    assert [h.get("Range") for h in faulty.seen("body")] == [
        None,
        "bytes=700000-",
        "bytes=1400000-",
        "bytes=2100000-",
    ]


def test_reader_resumes_only_the_same_version(faulty, body):
    url = faulty.add("body", body, drop_after=500_000, changing=True)
    with pytest.raises(SourceChangedError, match="resource changed during the transfer"):
        read_all(HttpSource(url, backoff=0.01).open_stream())
    assert [h.get("If-Range") for h in faulty.seen("body")] == [None, '"v1"']


def test_reader_refuses_a_range_it_did_not_ask_for(faulty, body):
    url = faulty.add("body", body, drop_after=1000, range_offset=10)
    with pytest.raises(HttpError, match="asked for bytes from 1000, the server sent"):
        read_all(HttpSource(url, backoff=0.01).open_stream())


def test_reader_of_a_bounded_range(faulty, body):
    url = faulty.add("body", body, drop_after=1000)
    reader = HttpSource(url, backoff=0.01).open_stream(5000, end=9000)
    assert read_all(reader) == BODY[5000:9000]
    assert [h.get("Range") for h in faulty.seen("body")] == ["bytes=5000-8999", "bytes=6000-8999"]


def test_reader_gives_up_when_resuming_brings_nothing(faulty, body):
    url = faulty.add("body", body, drop_after=0, drops=100)
    reader = HttpSource(url, retries=2, backoff=0.01).open_stream()
    with pytest.raises(TruncatedError, match="did not resume after 2 retries"):
        read_all(reader)


def test_cancel_during_backoff(faulty, body):
    url = faulty.add("body", body, drop_after=1000, drops=100)
    cancel = threading.Event()
    reader = HttpSource(url, backoff=60).open_stream(cancel=cancel)
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(CancelledError):
        read_all(reader)


def test_error_statuses_are_not_retried(faulty):
    url = faulty.add("gone", status=410)
    with pytest.raises(HttpError) as e:
        HttpSource(url, backoff=10).open_stream()
    assert e.value.status == 410
    assert len(faulty.seen("gone")) == 1


def test_tls_verification(faulty_tls, tls, body):
    url = faulty_tls.add("body", body)
    assert read_all(HttpSource(url, ca_bundle=str(tls.ca)).open_stream()) == BODY
    with pytest.raises(TlsError, match="TLS verification failed"):
        HttpSource(url).open_stream()


def test_connection_refused_is_an_http_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = HttpSource(f"http://127.0.0.1:{port}/x?token=secret", retries=1, backoff=0.01)
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
