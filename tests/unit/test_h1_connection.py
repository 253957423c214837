"""The streaming transport's connection, directly (no sockets, no timing): bytes on an idle connection or for
a request that has ended are credited to no request and the connection is never reused; a stream that
delivers more than MAX_PASS_BYTES in one loop pass stops being read until its bytes are parsed."""

from __future__ import annotations

import asyncio

from specwatch.probe.h1 import MAX_PASS_BYTES, Arrivals, Connection, Exchange
from specwatch.probe.prompts import Prompt
from specwatch.probe.stream import Attempt, Target


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
