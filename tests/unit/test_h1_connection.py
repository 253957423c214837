"""The streaming transport's connection, directly (no sockets, no timing): bytes on an idle connection or for
a request that has ended are credited to no request and the connection is never reused; a stream that
delivers more than MAX_PASS_BYTES in one loop pass stops being read until its bytes are parsed; a stream that
sends more than max_bytes_without_token between two tokens is ended as a flood."""

from __future__ import annotations

import asyncio

from specwatch.probe.h1 import MAX_PASS_BYTES, Arrivals, Connection, Exchange
from specwatch.probe.limits import max_bytes_without_token, max_event_bytes
from specwatch.probe.prompts import Prompt
from specwatch.probe.stream import Attempt, Target
from specwatch.records import Outcome


class FakeTransport:
    def __init__(self) -> None:
        self.closed = False
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def connection() -> tuple[Connection, FakeTransport, Arrivals]:
    arrivals = Arrivals(asyncio.get_running_loop())
    conn = Connection(arrivals)
    t = FakeTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t, arrivals


def exchange() -> Exchange:
    a = Attempt(Target("spec", "http://x", "sglang"), Prompt("p", "chat", text="x"), False, 0, max_tokens=8)
    return Exchange(a, asyncio.get_running_loop())


async def test_bytes_on_an_idle_connection_close_it_and_reach_no_request():
    conn, t, arrivals = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\n\r\n")
    assert t.closed and conn.lost and arrivals._queue == []


async def test_bytes_for_a_request_that_has_ended_are_not_credited_to_the_next_one():
    conn, t, arrivals = connection()
    first, second = exchange(), exchange()
    conn.exchange = first
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel")
    conn.exchange = second  # the pool handed the connection on before these bytes were parsed
    arrivals.drain()
    assert not second.seen and second.parser.status == 0  # nothing of the first response reached it
    assert t.closed and conn.lost


async def test_a_stream_faster_than_a_pass_is_paused_until_its_bytes_are_parsed():
    conn, t, arrivals = connection()
    conn.exchange = exchange()
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"1000\r\n" + b": keep-alive\n\n" * (4096 // 14) + b"\n" * (4096 - 14 * (4096 // 14)) + b"\r\n"
    while conn.pass_bytes <= MAX_PASS_BYTES:
        assert t.reading
        conn.data_received(piece)
    assert not t.reading  # paused: the loop reads this socket no more in this pass
    arrivals.drain()
    assert t.reading and conn.pass_bytes == 0  # parsed, then read again


def sglang_event(tokens: int, text: bytes = b"w") -> bytes:
    return b'data: {"text": "%s", "meta_info": {"completion_tokens": %d}}\n\n' % (text, tokens)


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
PINGS = b": keep-alive\n\n" * 4096  # 56 KiB of keep-alive comments


def flooded(pieces: list[bytes]) -> Exchange:
    ex = exchange()
    ex.feed(HEAD, 1)
    for i, piece in enumerate(pieces):
        ex.feed(chunked(piece), 2 + i)
        if ex.done.done():
            break
    return ex


async def test_a_flood_without_a_token_ends_the_stream_past_two_of_its_largest_events():
    """Keep-alives, or events that repeat the same count, past max_bytes_without_token: a stream_error at once,
    not a read timeout's worth of parsing at full speed. Just under the bound, nothing is wrong."""
    bound = max_bytes_without_token(1)
    for flood in (PINGS, sglang_event(1, b"w" * 200_000)):  # keep-alives, or large events under the events cap
        pieces = [sglang_event(1)] + [flood] * (bound // len(flood) + 1)
        ex = flooded(pieces)
        failure = ex.done.result()
        assert failure is not None and failure.outcome is Outcome.STREAM_ERROR
        assert "without a token after 1 tokens" in failure.error
        under = flooded([sglang_event(1)] + [flood] * (bound // len(flood)))
        assert not under.done.done()


async def test_keep_alives_between_tokens_never_add_up():
    """The count restarts at every token: a long stream whose keep-alives add up to far more than the bound,
    but never that much between two tokens, is fine, and ends ok."""
    per_gap = max_bytes_without_token(0) // len(PINGS) - 1
    pieces = []
    for n in range(1, 5):
        pieces += [PINGS] * per_gap + [sglang_event(n)]
    ex = flooded([*pieces, b"data: [DONE]\n\n"])
    assert ex.done.result() is None and sum(map(len, pieces)) > 3 * max_bytes_without_token(4)


async def test_the_largest_events_allowed_never_trip_it():
    """After a token: one event as large as an event may be that carries no new token (a usage chunk, a role-only
    delta), then one that does; plus keep-alives. Neither the event bound nor the flood bound refuses them."""
    def largest(tokens: int, after: int) -> bytes:
        pad = max_event_bytes(after) - len(sglang_event(tokens)[6:-2]) + 1
        event = sglang_event(tokens, b"w" * pad)
        assert len(event[6:-2]) == max_event_bytes(after)
        return event
    ex = flooded([sglang_event(1), PINGS, largest(1, 1), PINGS, largest(2, 1), sglang_event(3)])
    assert not ex.done.done() and ex.attempt.tokens == 3
