"""The HTTP/1.1 response parser, directly: framing tables, the faults a hostile server sends, and any bytes
split anywhere → the same result or a ``StreamError``, never another exception, always in bounded work."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.errors import StreamError
from specwatch.probe.h1parse import MAX_HEAD_BYTES, ResponseParser


class Recorder:
    def __init__(self) -> None:
        self.heads: list[tuple[int, bool, str]] = []
        self.body = b""
        self.ends = 0

    def on_head(self, status: int, keep_alive: bool, location: str) -> None:
        self.heads.append((status, keep_alive, location))

    def on_body(self, piece: bytes) -> None:
        assert self.heads and not self.ends, "a body piece outside a response"
        self.body += piece

    def on_end(self) -> None:
        self.ends += 1


def parse(data: bytes, pieces: list[int] | None = None, close: bool = False) -> tuple[Recorder, ResponseParser]:
    """Feed ``data`` cut at ``pieces`` (offsets), then optionally the connection's close."""
    rec = Recorder()
    p = ResponseParser(rec)
    cuts = [0, *sorted(set(pieces or [])), len(data)]
    for a, b in itertools.pairwise(cuts):
        if b > a:
            p.feed(data[a:b])
    if close:
        p.close()
    return rec, p


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
GOOD = [
    ("chunked", CHUNKED, b"hello world", True, False),
    ("chunk extensions", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0;y\r\n\r\n",
     b"hello", True, False),
    ("trailers", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n",
     b"hi", True, False),
    ("upper-case hex", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
     b"0123456789", True, False),
    ("content-length", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", True, False),
    ("two equal lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", b"hi", True, False),
    ("close-delimited", b"HTTP/1.1 200 OK\r\n\r\nuntil the end", b"until the end", False, True),
    ("HTTP/1.0 closes", b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", False, False),
    ("connection close", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", b"hi", False, False),
    ("1xx interim skipped", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", True, False),
    ("204 has no body", b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", b"", True, False),
    ("304 has no body", b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", b"", True, False),
    ("an error page", b"HTTP/1.1 500 Oops\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nbad", b"bad", True,
     False),
]


@pytest.mark.parametrize(("name", "data", "body", "keep_alive", "close"), GOOD, ids=[g[0] for g in GOOD])
def test_framing_table_whole_and_split_at_every_byte(name, data, body, keep_alive, close):
    for cut in [None, *range(1, len(data))]:  # one feed, and every two-piece split
        rec, p = parse(data, None if cut is None else [cut], close)
        assert (rec.body, rec.ends, p.complete) == (body, 1, True), (name, cut)
        assert len(rec.heads) == 1 and rec.heads[0][1] == keep_alive
    rec, _ = parse(data, list(range(len(data))), close)  # a byte at a time
    assert rec.body == body


BAD = [
    ("negative chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello",
     "malformed chunk size"),
    ("non-hex chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello",
     "malformed chunk size"),
    ("plus-signed size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello", "malformed chunk size"),
    ("empty chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", "malformed chunk size"),
    ("huge chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 40 + b"\r\n",
     "malformed chunk size"),
    ("chunk without CRLF", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhiXX", "did not end with CRLF"),
    ("a thousand-digit status", b"HTTP/1.1 " + b"2" * 1000 + b" OK\r\n\r\n", "not an HTTP/1.1 status line"),
    ("a 64-bit status", b"HTTP/1.1 18446744073709551617 OK\r\n\r\n", "not an HTTP/1.1 status line"),
    ("unicode digits", "HTTP/1.1 2\u0662\u0660 OK\r\n\r\n".encode(), "not an HTTP/1.1 status line"),
    ("a thousand-digit length", b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 1000 + b"\r\n\r\n",
     "malformed Content-Length"),
    ("negative length", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "malformed Content-Length"),
    ("two lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", "two different"),
    ("length and chunked", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
     "both Content-Length and Transfer-Encoding"),
    ("gzip transfer coding", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "Transfer-Encoding"),
    ("gzip content", b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n", "Content-Encoding"),
    ("101 unasked", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "switched protocols"),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "not an HTTP/1.1 response"),
    ("TLS bytes", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "not an HTTP/1.1 response"),
    ("header without colon", b"HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", "malformed header line"),
    ("endless head", b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000, "exceeded"),
    ("endless size line", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 5000, "exceeded"),
    ("endless trailer", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"X: y\r\n" * 20000,
     "trailer exceeded"),
    ("endless interims", b"HTTP/1.1 100 Continue\r\n\r\n" * 20, "interim"),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD, ids=[b[0] for b in BAD])
def test_faults_are_a_stream_error_at_once_whole_or_split(name, data, message):
    for pieces in (None, [len(data) // 2], list(range(0, len(data), 4096))):
        with pytest.raises(StreamError, match=message):
            parse(data, pieces)


def test_the_first_bytes_of_a_non_http_answer_fail_before_any_more_arrive():
    with pytest.raises(StreamError):
        parse(b"\x16\x03\x01")  # three bytes of a TLS record: no HTTP response starts that way
    rec, p = parse(b"HTT")  # a prefix of HTTP/ waits
    assert not p.complete and not rec.heads


def test_bytes_after_the_response_are_flagged_and_the_connection_not_reused():
    rec, p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiGARBAGE")
    assert rec.body == b"hi" and p.complete and p.extra and not p.keep_alive


def test_a_truncated_body_is_not_complete_on_close():
    for data in (CHUNKED[:-7], b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhi", b"HTTP/1.1 200 OK\r\nContent-Le"):
        rec, p = parse(data)
        assert p.close() is False and rec.ends == 0


def test_a_head_at_the_limit_is_read_and_one_past_it_refused():
    filler = b"X-Pad: " + b"a" * (MAX_HEAD_BYTES - 60) + b"\r\n"
    head = b"HTTP/1.1 200 OK\r\n" + filler + b"Content-Length: 0"
    assert len(head) <= MAX_HEAD_BYTES
    rec, p = parse(head + b"\r\n\r\n")
    assert p.complete and rec.heads[0][0] == 200
    with pytest.raises(StreamError, match="exceeded"):
        parse(head + b"x" * (MAX_HEAD_BYTES - len(head) + 1) + b"\r\n\r\n")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=8), st.booleans())
def test_any_bytes_give_a_result_or_a_stream_error(data, cuts, close):
    try:
        rec, _p = parse(data, [c for c in cuts if c < len(data)], close)
    except StreamError:
        return
    assert len(rec.heads) <= 1 and rec.ends <= 1
    assert len(rec.body) <= len(data)


RESPONSE = st.builds(
    lambda body, chunks, framing: (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks if c) + b"0\r\n\r\n", b"".join(chunks))
    if framing == "chunked" else
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body, body),
    st.binary(max_size=300), st.lists(st.binary(max_size=80), max_size=6), st.sampled_from(["chunked", "length"]))


@settings(max_examples=300, deadline=None)
@given(RESPONSE, st.lists(st.integers(1, 700), max_size=10))
def test_a_well_formed_response_decodes_the_same_however_it_is_split(resp, cuts):
    data, body = resp
    rec, p = parse(data, [c for c in cuts if c < len(data)])
    assert rec.body == body and rec.ends == 1 and p.complete and not p.extra


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=64).filter(lambda b: b"\n" not in b and b"\r" not in b))
def test_a_mutated_chunk_size_line_is_decoded_or_refused_never_negative(size_line):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n" + b"x" * 64 + b"\r\n0\r\n\r\n"
    try:
        rec, _ = parse(data)
    except StreamError:
        return
    start = data.index(b"\r\n\r\n") + 4 + len(size_line) + 2
    assert data[start:start + len(rec.body)] == rec.body  # read forward, once: never backwards, never again
