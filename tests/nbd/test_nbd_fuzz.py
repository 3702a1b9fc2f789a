"""Servers that send random or mutated bytes: the client raises only its typed errors, never
waits past the end of what the server sent, and allocates no more than a bound."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fuzzing import hostile_inputs, memory_bound, run_target
from hostile_server import (
    Request,
    Talk,
    answering,
    handshake_bytes,
    hole_chunk,
    hostile_server,
    scripted,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from diskferry.base.errors import CancelledError
from diskferry.nbd import protocol as p
from diskferry.nbd.client import NbdClient
from diskferry.nbd.errors import NbdConnectionError, NbdError

KiB = 1 << 10
MiB = 1 << 20
TYPED = (NbdError, CancelledError)
# Generous: the servers here always end the connection, so no wait comes near these.
WAIT = 10.0
READ_AT, READ_LENGTH = 4 * KiB, 64 * KiB
MARK = 0xEE  # what the read buffer held before; the servers here never send it
U32 = st.integers(0, 0xFFFFFFFF)
FUZZ = settings(max_examples=200)


@contextmanager
def served(talk: Talk) -> Iterator[str]:
    """A hostile server running `talk` on a socket in a folder of its own; its URL."""
    with (
        tempfile.TemporaryDirectory() as folder,
        hostile_server(Path(folder) / "nbd.sock", talk) as url,
    ):
        yield url


def _not_a_hang(error: Exception) -> None:
    """The servers here end the connection: a timeout would mean the client waited for ever."""
    assert "no answer in" not in str(error) and "did not finish in" not in str(error)
    assert "timed out" not in str(error)


# --- the handshake -------------------------------------------------------------------------

VALID_HANDSHAKE = handshake_bytes()


def _mutated(changes: list[tuple[int, int]], keep: int) -> bytes:
    data = bytearray(VALID_HANDSHAKE)
    for at, value in changes:
        data[at % len(data)] = value
    return bytes(data[:keep])


def _raw_option_reply(magic: int, option: int, rtype: int, length: int, data: bytes) -> bytes:
    return p.OPTION_REPLY.pack(magic, option, rtype, length) + data


_info = st.one_of(
    st.builds(
        lambda size, flags: struct.pack(">HQH", p.INFO_EXPORT, size, flags),
        st.integers(0, 2**64 - 1),
        st.integers(0, 0xFFFF),
    ),
    st.builds(lambda a, b, c: struct.pack(">HIII", p.INFO_BLOCK_SIZE, a, b, c), U32, U32, U32),
    st.binary(max_size=20),
)
_option_replies = st.builds(
    _raw_option_reply,
    st.sampled_from([p.OPTION_REPLY_MAGIC] * 4 + [0]),
    st.sampled_from([p.OPT_STRUCTURED_REPLY, p.OPT_SET_META_CONTEXT, p.OPT_GO, 1234]),
    st.one_of(
        st.sampled_from(
            [p.REP_ACK, p.REP_INFO, p.REP_META_CONTEXT, p.REP_ERR_UNSUP, p.REP_ERR_TLS_REQD]
        ),
        U32,
    ),
    st.one_of(st.integers(0, 40), st.sampled_from([0xFFFFFFFF, (1 << 20) + 1, 1 << 20])),
    st.one_of(_info, st.binary(max_size=40)),
)
handshake_scripts = st.one_of(
    st.binary(max_size=120),
    st.builds(
        _mutated,
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
        st.integers(0, len(VALID_HANDSHAKE)),
    ),
    st.builds(
        lambda replies: VALID_HANDSHAKE[:18] + b"".join(replies),
        st.lists(_option_replies, max_size=8),
    ),
)


@FUZZ
@given(handshake_scripts)
def test_the_handshake_against_random_and_mutated_bytes(script: bytes) -> None:
    with served(scripted(script)) as url, memory_bound():
        try:
            client = NbdClient.connect(url, contexts=["base:allocation"], timeout=WAIT)
        except TYPED as e:
            _not_a_hang(e)
        else:
            client.close()


def test_the_valid_script_is_a_handshake() -> None:
    """The mutations above start from a handshake that the client takes."""
    with (
        served(scripted(VALID_HANDSHAKE)) as url,
        NbdClient.connect(url, contexts=["base:allocation"], timeout=WAIT) as client,
    ):
        assert client.contexts == ["base:allocation"] and client.size == MiB


# --- replies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """A reply chunk to draw: its fields, some of them lies, built for the request it answers."""

    magic: str
    flags: int
    rtype: int
    own_cookie: bool
    cookie: int
    at: int
    size: int
    length: int | None
    code: int
    text: bytes

    def build(self, request: Request) -> bytes:
        """The bytes of the chunk in answer to `request`."""
        cookie = request.cookie if self.own_cookie else self.cookie
        if self.magic == "simple":
            payload = b"\x11" * request.length if self.code == 0 else b""
            return (
                p.MAGIC.pack(p.SIMPLE_REPLY_MAGIC)
                + p.SIMPLE_REPLY_REST.pack(self.code, cookie)
                + payload
            )
        if self.magic == "other":
            return p.MAGIC.pack(self.cookie & 0xFFFFFFFF) + self.text
        offset = max(0, request.offset + self.at)
        body = self._body(offset)
        length = len(body) if self.length is None else self.length
        head = p.STRUCTURED_REPLY_REST.pack(self.flags, self.rtype, cookie, length)
        return p.MAGIC.pack(p.STRUCTURED_REPLY_MAGIC) + head + body

    def _body(self, offset: int) -> bytes:
        if self.rtype == p.REPLY_TYPE_OFFSET_DATA:
            return p.CHUNK_OFFSET.pack(offset) + b"\x11" * min(self.size, 80 * KiB)
        if self.rtype == p.REPLY_TYPE_OFFSET_HOLE:
            return p.HOLE_CHUNK.pack(offset, self.size)
        if self.rtype == p.REPLY_TYPE_BLOCK_STATUS:
            descriptors = min(self.size, 64)
            return p.STATUS_CONTEXT.pack(self.code % 3) + b"".join(
                p.STATUS_DESCRIPTOR.pack((self.at + i) % (1 << 32), i % 4)
                for i in range(descriptors)
            )
        if self.rtype & p.REPLY_TYPE_ERROR_BIT:
            return p.ERROR_CHUNK.pack(self.code, len(self.text)) + self.text
        return self.text


CHUNK_FIELDS = {
    "magic": st.sampled_from(["structured"] * 6 + ["simple", "other"]),
    "flags": st.one_of(st.sampled_from([0, p.REPLY_FLAG_DONE]), st.integers(0, 0xFFFF)),
    "rtype": st.one_of(
        st.sampled_from(
            [
                p.REPLY_TYPE_NONE,
                p.REPLY_TYPE_OFFSET_DATA,
                p.REPLY_TYPE_OFFSET_HOLE,
                p.REPLY_TYPE_BLOCK_STATUS,
                p.REPLY_TYPE_ERROR_BIT | 1,
                p.REPLY_TYPE_ERROR_BIT | 2,
            ]
        ),
        st.integers(0, 0xFFFF),
    ),
    "own_cookie": st.sampled_from([True] * 5 + [False]),
    "cookie": st.integers(0, 2**64 - 1),
    "at": st.integers(-16, READ_LENGTH + 16),
    "size": st.one_of(st.integers(0, READ_LENGTH + 16), st.sampled_from([1 << 31, 0xFFFFFFFF])),
    "length": st.one_of(
        st.none(), st.none(), U32, st.sampled_from([0xFFFFFFFF, 8 * MiB + 4, 64 * MiB])
    ),
    "code": st.sampled_from([0, 5, 22, 1 << 31]),
    "text": st.binary(max_size=32),
}
chunks = st.builds(Chunk, **CHUNK_FIELDS)


def _good_read(request: Request) -> list[Chunk]:
    """The chunks of a whole, well-formed read reply: the start for mutations to grow from."""
    half = request.length // 2
    common = dict(own_cookie=True, cookie=0, length=None, code=0, text=b"", magic="structured")
    return [
        Chunk(flags=0, rtype=p.REPLY_TYPE_OFFSET_DATA, at=0, size=half, **common),
        Chunk(
            flags=p.REPLY_FLAG_DONE, rtype=p.REPLY_TYPE_OFFSET_HOLE, at=half, size=half, **common
        ),
    ]


def _exchange(operation: str, reply: Callable[[Request], bytes]) -> None:
    """Run one read or block status against a server sending `reply`; check the outcome."""
    talk = answering(reply, size=MiB, requests=1)
    buf = bytearray([MARK]) * READ_LENGTH
    with served(talk) as url, memory_bound():
        client = NbdClient.connect(
            url, contexts=["base:allocation"], timeout=WAIT, request_timeout=WAIT
        )
        try:
            if operation == "read":
                client.read_into(READ_AT, buf)
                assert MARK not in buf  # a read that returns filled all of its buffer
            else:
                client.block_status(READ_AT, READ_LENGTH)
        except TYPED as e:
            _not_a_hang(e)
        finally:
            client.close()


@FUZZ
@given(st.sampled_from(["read", "status"]), st.lists(chunks, min_size=1, max_size=5))
def test_random_reply_chunks(operation: str, drawn: list[Chunk]) -> None:
    _exchange(operation, lambda request: b"".join(c.build(request) for c in drawn))


@FUZZ
@given(st.integers(0, 1), st.sampled_from(sorted(CHUNK_FIELDS)), st.data())
def test_mutated_read_replies(which: int, field: str, data: st.DataObject) -> None:
    value = data.draw(CHUNK_FIELDS[field], label=field)

    def reply(request: Request) -> bytes:
        good = _good_read(request)
        good[which] = replace(good[which], **{field: value})
        return b"".join(c.build(request) for c in good)

    _exchange("read", reply)


@pytest.mark.parametrize(
    "reply",
    [
        lambda r: hole_chunk(r.cookie, r.offset, 0xFFFFFFFF, done=True),
        lambda r: _lying(r, p.REPLY_TYPE_OFFSET_DATA, 0xFFFFFFFF, p.CHUNK_OFFSET.pack(r.offset)),
        lambda r: _lying(r, p.REPLY_TYPE_ERROR_BIT | 1, 0xFFFFFFFF),
        lambda r: _lying(r, p.REPLY_TYPE_ERROR_BIT | 1, 64 * MiB),
        lambda r: _lying(r, p.REPLY_TYPE_BLOCK_STATUS, 0xFFFFFFFC),
        lambda r: _lying(r, p.REPLY_TYPE_BLOCK_STATUS, 64 * MiB + 4),
    ],
    ids=[
        "hole-4-GiB",
        "data-4-GiB",
        "error-4-GiB",
        "error-64-MiB",
        "status-4-GiB",
        "status-64-MiB",
    ],
)
def test_huge_lengths_are_refused_before_anything_is_allocated(
    reply: Callable[[Request], bytes],
) -> None:
    talk = answering(reply, size=MiB, requests=1)
    with (
        served(talk) as url,
        memory_bound(),
        NbdClient.connect(url, request_timeout=WAIT) as client,
        pytest.raises(NbdConnectionError) as caught,
    ):
        client.read(READ_AT, READ_LENGTH)
    assert "broke the protocol" in str(caught.value)


def _lying(request: Request, rtype: int, length: int, body: bytes = bytes(16)) -> bytes:
    """A chunk header that promises `length` bytes, and a few of them."""
    head = p.STRUCTURED_REPLY_REST.pack(0, rtype, request.cookie, length)
    return p.MAGIC.pack(p.STRUCTURED_REPLY_MAGIC) + head + body


@settings(max_examples=50)
@pytest.mark.parametrize("name", ["nbd_handshake", "nbd_reply"])
@given(data=st.data())
def test_the_shared_targets_against_mutated_scripts(name: str, data: st.DataObject) -> None:
    """The targets `make fuzz` runs under atheris, from their seeds."""
    run_target(name, data.draw(hostile_inputs(name, max_size=256), label="script"))
