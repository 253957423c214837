"""The simulator's arrival stamps (``wire.ArrivalStamps``): a request's wire TTFT starts when its first bytes reach
the process, not when aiohttp has parsed them; bytes that come while the connection is busy start nothing. The
engine's arrival is when the middleware ran."""

import asyncio
import time

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from specwatch.sim.wire import ARRIVAL_NS, RECEIVED_NS, ArrivalStamps


class Inner(asyncio.Protocol):
    """aiohttp's protocol as the stamping one sees it: what reached it, in order."""

    ssl_context = None  # what aiohttp's request asks of its protocol
    peername = ("127.0.0.1", 40000)
    sockname = ("127.0.0.1", 30000)

    def __init__(self) -> None:
        self.calls: list[object] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.calls.append(("made", transport))

    def data_received(self, data: bytes) -> None:
        self.calls.append(data)

    def eof_received(self) -> bool | None:
        self.calls.append("eof")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append(("lost", exc))


async def answer(stamps: ArrivalStamps, request: web.Request, during=None) -> int:
    async def handler(req: web.Request) -> web.StreamResponse:
        if during is not None:
            during()
        return web.Response()

    before = time.monotonic_ns()
    await stamps.received_at(request, handler)
    # the engine's arrival is when the middleware ran: never before the bytes, never before the call
    assert request[ARRIVAL_NS] >= max(request[RECEIVED_NS], before)
    return request[RECEIVED_NS]


async def test_a_request_is_stamped_when_its_first_bytes_arrived_and_busy_bytes_start_nothing():
    stamps = ArrivalStamps()
    inner = Inner()
    conn = stamps.factory(lambda: inner)()
    transport = object()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(b"POST /generate HTTP/1.1\r\n")
    first = conn.head_ns
    conn.data_received(b"Host: x\r\n\r\n")  # more of the same request: still its first bytes' time
    assert conn.head_ns == first > 0
    body = []
    got = await answer(stamps, make_mocked_request("POST", "/generate", protocol=inner),
                       during=lambda: (conn.data_received(b"body"), body.append(conn.head_ns)))
    assert got == first
    assert body == [0]  # the body came while the request was being answered: no next request started
    conn.data_received(b"POST /generate HTTP/1.1\r\n\r\n")
    second = conn.head_ns
    assert second > first
    assert await answer(stamps, make_mocked_request("POST", "/generate", protocol=inner)) == second
    # every call reached aiohttp's protocol, in order
    conn.eof_received()
    conn.connection_lost(None)
    assert inner.calls == [("made", transport), b"POST /generate HTTP/1.1\r\n", b"Host: x\r\n\r\n", b"body",
                           b"POST /generate HTTP/1.1\r\n\r\n", "eof", ("lost", None)]
    assert stamps.open == {}


async def test_a_request_the_stamps_never_saw_arrive_is_stamped_by_the_middleware():
    stamps = ArrivalStamps()
    # a pipelined request: its bytes came with the first one's, so none are its own; and one from elsewhere
    inner = Inner()
    conn = stamps.factory(lambda: inner)()
    conn.connection_made(object())  # type: ignore[arg-type]
    conn.data_received(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n")
    head = conn.head_ns
    assert await answer(stamps, make_mocked_request("GET", "/a", protocol=inner)) == head
    assert conn.head_ns == 0  # taken: the second request has no bytes of its own, so the middleware stamps it
    second = await answer(stamps, make_mocked_request("GET", "/b", protocol=inner))
    assert second > head
    assert await answer(stamps, make_mocked_request("GET", "/c", protocol=Inner())) > second
