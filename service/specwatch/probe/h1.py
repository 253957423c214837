"""The probe's streaming transport: HTTP/1.1 POSTs whose responses are parsed in ``data_received``.

Source stage. A general HTTP client hands every arrival to a reader task: the bytes wait in a buffer, a
future wakes the task, the task parses — per chunk, at 30k chunks/s. Here each read is stamped as the loop
hands it over (``data_received``), and all the reads of one loop pass are then parsed in one callback
(``Arrivals``): the chunked body decoded, SSE events split and fed to the request's ``Attempt``. No task
switch per chunk, a stream in flight costs nothing between its chunks, and the request's coroutine only
waits for the outcome.

Scope is what an SGLang or vLLM stream needs: ``POST`` with a JSON body, ``Content-Length``, chunked or
close-delimited responses, keep-alive (a pool of at most ``limit`` connections per process, reused per
host), TLS with an optional CA bundle, the API key as ``Authorization: Bearer``. No redirects, proxies or
compression (we never ask for any). Detection, scrapes and info queries keep using aiohttp.

Every failure resolves the exchange with a ``Failure`` (the client turns it into a record's outcome):
connect errors, a status other than 200 (with the first 200 bytes of its body), a malformed head or chunk,
a connection lost mid-stream, silence or a drip past ``read_s``, a flood of bytes without a token (past
``limits.max_bytes_without_token``), the whole-request deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from .. import __version__
from ..errors import StreamError
from ..options import default
from ..records import Outcome
from ..redaction import redact, scrub
from .h1parse import ResponseParser
from .limits import max_bytes_without_token
from .sse import SSEParser
from .stream import Attempt

log = logging.getLogger("specwatch")
MAX_SNIPPET = 200
MAX_PASS_BYTES = 64 * 1024  # one stream's bytes parsed per loop pass, at most (plus the read that crossed it)
USER_AGENT = f"specwatch/{__version__}"


@dataclass(frozen=True, slots=True)
class Failure:
    outcome: Outcome
    error: str
    http_status: int | None = None


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        u = urlsplit(url)
        return cls(u.scheme, u.hostname or "", u.port or (443 if u.scheme == "https" else 80))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class Exchange:
    """One request's response, parsed as it arrives (framing by ``h1parse.ResponseParser``, whose sink this
    is; SSE events to the ``Attempt``). ``done`` resolves with None (the stream finished: ``[DONE]`` or its
    body ended after one) or a ``Failure``; ``complete`` says the body was read to its end, so the connection
    may carry another request."""

    __slots__ = ("_location", "_quiet_bytes", "_snippet", "_sse", "attempt", "bytes_ns", "done", "ended",
                 "keep_alive", "parser", "secrets", "seen", "status", "when_ns")

    def __init__(self, attempt: Attempt, loop: asyncio.AbstractEventLoop, secrets: tuple[str, ...] = ()) -> None:
        self.attempt = attempt
        self.secrets = secrets  # never in an error text, whatever the server echoes
        self.done: asyncio.Future[Failure | None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()  # the body was read to its end, or lost
        self.parser = ResponseParser(self)
        self._location = ""
        self.status = 0
        self.keep_alive = True
        self._snippet = b""
        self._sse = SSEParser()
        self._quiet_bytes = 0  # body bytes since the last token-bearing chunk
        self.bytes_ns = 0  # the last arrival of any byte
        self.seen = False  # any byte of a response at all (a reused connection that died unseen is retried)
        self.when_ns = 0  # when the outcome was decided: the arrival stamp of the bytes that decided it

    @property
    def complete(self) -> bool:
        return self.parser.complete and not self.parser.extra

    def resolve(self, result: Failure | None) -> None:
        if not self.done.done():
            self.when_ns = self.bytes_ns if result is None else time.monotonic_ns()
            self.done.set_result(result)

    def fail(self, outcome: Outcome, error: str, status: int | None = None) -> None:
        """Every failure's text passes here: server-supplied parts are scrubbed of secrets and control bytes."""
        self.keep_alive = False
        self.resolve(Failure(outcome, scrub(error, self.secrets), status))

    # ---- bytes in ---------------------------------------------------------------------------------
    def feed(self, data: bytes, now: int) -> None:
        """The per-request boundary: whatever these bytes do, it ends this exchange, never another stream's."""
        self.bytes_ns = now
        self.seen = True
        try:
            self.parser.feed(data)
        except StreamError as exc:  # SSEError included
            self._broken(str(exc))
        except Exception as exc:  # a bug in parsing this stream: its outcome, and loudly in the log
            log.exception("parsing a response failed")
            self._broken(f"unparseable response ({type(exc).__name__})")

    def _broken(self, why: str) -> None:
        self.fail(Outcome.STREAM_ERROR, why, self.status or None)
        if not self.ended.done():
            self.ended.set_result(None)  # nothing more is read from this connection

    # ---- the parser's sink ------------------------------------------------------------------------
    def on_head(self, status: int, keep_alive: bool, location: str) -> None:
        self.status = status
        self.keep_alive = keep_alive
        self._location = location

    def on_body(self, piece: bytes) -> None:
        if self.status != 200:
            self._snippet += piece[:MAX_SNIPPET - len(self._snippet)]
            if len(self._snippet) >= MAX_SNIPPET:
                self._http_error()
            return
        if self.done.done():
            return  # after [DONE] or a failure: read to the end, keep nothing
        attempt, now = self.attempt, self.bytes_ns
        chunks = len(attempt.chunk_ns)
        for ev in self._sse.feed(piece):
            if attempt.handle(ev.data, now):
                self.resolve(None)
                return
        if len(attempt.chunk_ns) > chunks:
            self._quiet_bytes = 0
            return
        self._quiet_bytes += len(piece)
        if self._quiet_bytes > max_bytes_without_token(attempt.tokens):
            raise StreamError(f"{self._quiet_bytes} bytes without a token after {attempt.tokens} tokens: a flood "
                              "(keep-alives or events that carry no token)")

    def _http_error(self) -> None:
        if self.done.done():
            return
        text = self._snippet.decode("utf-8", "replace").replace("\n", " ")
        where = f" to {redact(self._location)}" if 300 <= self.status < 400 else ""
        self.fail(Outcome.HTTP_ERROR, f"HTTP {self.status}{where}: {text}", self.status)

    def on_end(self) -> None:
        """The body ended (its length read, the last chunk and trailer, or the close of a close-delimited one)."""
        if not self.ended.done():
            self.ended.set_result(None)
        if self.status != 200:
            self._http_error()
            return
        if not self.done.done():
            for ev in self._sse.close():
                if self.attempt.handle(ev.data, self.bytes_ns):
                    self.resolve(None)
                    return
            self.fail(Outcome.STREAM_ERROR, "stream ended without [DONE]", 200)

    def lost(self, exc: Exception | None) -> None:
        """The connection closed: the end of a close-delimited body, or a loss."""
        self.keep_alive = False
        try:
            ended = self.parser.close()
        except StreamError as err:  # the last event of a close-delimited body is itself broken
            self._broken(str(err))
            return
        if not self.ended.done():
            self.ended.set_result(None)
        if not ended and not self.done.done():
            why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
            self.fail(Outcome.STREAM_ERROR, f"connection lost mid-stream: {why}", self.status or None)


class Arrivals:
    """Stamp every read at once, parse after: the loop calls ``data_received`` for each readable socket in
    turn, so a burst of a thousand streams' chunks is stamped back to back (about a microsecond each) and only
    then parsed, in one callback after the loop's I/O phase. Parsing inside each read would add every earlier
    stream's parse to the later streams' stamps."""

    __slots__ = ("_loop", "_queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: list[tuple[Connection, Exchange, bytes, int]] = []

    def add(self, conn: Connection, ex: Exchange, data: bytes) -> None:
        q = self._queue
        q.append((conn, ex, data, time.monotonic_ns()))
        if len(q) == 1:
            self._loop.call_soon(self.drain)

    def drain(self) -> None:
        q, self._queue = self._queue, []
        for conn, ex, data, now in q:
            if ex is conn.exchange:
                ex.feed(data, now)
            else:  # the bytes' request has ended since they arrived: they belong to none, and the connection
                conn.lost = True  # is never reused
                if conn.transport is not None:
                    conn.transport.close()
        for conn, _, _, _ in q:
            conn.next_pass()


class Connection(asyncio.Protocol):
    """One pooled connection. The loop reads a busy socket up to 32 times per pass; a stream that delivers more
    than ``MAX_PASS_BYTES`` in one pass stops being read until its bytes are parsed, so no stream, however
    fast, holds the loop for more than one bounded parse per pass (every other stream and /healthz go on)."""

    __slots__ = ("arrivals", "exchange", "lost", "pass_bytes", "paused", "transport")

    def __init__(self, arrivals: Arrivals) -> None:
        self.arrivals = arrivals
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.lost = False
        self.pass_bytes = 0  # received since the last parse
        self.paused = False

    def next_pass(self) -> None:
        self.pass_bytes = 0
        if self.paused:
            self.paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is None:  # bytes on an idle pooled connection belong to no request: never reuse it
            self.lost = True
            if self.transport is not None:
                self.transport.close()
            return
        self.arrivals.add(self, ex, data)
        self.pass_bytes += len(data)
        if self.pass_bytes > MAX_PASS_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.arrivals.drain()  # what arrived before the close is parsed first
        self.lost = True
        if self.exchange is not None:
            self.exchange.lost(exc)


class Streams:
    """A pool of at most ``limit`` connections (every stream in flight holds one, so none waits unmeasured
    when the caller sizes it from ``TrafficPlan.max_streams``)."""

    def __init__(self, limit: int, connect_s: float = default("connect_timeout_s"), api_key: str | None = None,
                 ca_file: str | None = None) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._idle: dict[Origin, list[Connection]] = {}
        self._open: set[Connection] = set()
        self.connect_s = connect_s
        self._auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""
        self.secrets = (api_key,) if api_key else ()
        self._ca_file = ca_file
        self._ssl: ssl.SSLContext | None = None
        self._arrivals: Arrivals | None = None

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self._ca_file) if self._ca_file \
                else ssl.create_default_context()
        return self._ssl

    async def _connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        tls = self._ssl_context() if origin.scheme == "https" else None
        if self._arrivals is None:
            self._arrivals = Arrivals(loop)
        arrivals = self._arrivals
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: Connection(arrivals), origin.host, origin.port, ssl=tls,
                                   server_hostname=origin.host if tls else None), self.connect_s)
        self._open.add(conn)
        return conn

    def request(self, origin: Origin, path: str, body: bytes) -> bytes:
        return (f"POST {path} HTTP/1.1\r\nHost: {origin.host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(body)}\r\n").encode() + self._auth + b"\r\n" + body

    async def acquire(self, origin: Origin) -> tuple[Connection, bool]:
        """A connection (idle and reused, or new) and whether it was reused; the caller must ``release``."""
        await self._slots.acquire()
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn, True
            self._open.discard(conn)
        try:
            return await self._connect(origin), False
        except BaseException:
            self._slots.release()
            raise

    def release(self, origin: Origin, conn: Connection, reusable: bool) -> None:
        conn.exchange = None
        if reusable and not conn.lost and conn.transport is not None and not conn.transport.is_closing():
            self._idle.setdefault(origin, []).append(conn)
        else:
            self._open.discard(conn)
            if conn.transport is not None:
                conn.transport.close()
        self._slots.release()

    async def close(self) -> None:
        for conn in list(self._open):
            if conn.transport is not None:
                conn.transport.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)

    async def __aenter__(self) -> Streams:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


async def wait_body(ex: Exchange, conn: Connection, limit_s: float) -> bool:
    """After the outcome: let the body's last bytes (the chunked terminator, usually in the same read as
    ``[DONE]``) arrive, briefly, so the connection can be reused. True when it may be."""
    if not ex.ended.done():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(ex.ended), limit_s)
    return ex.complete and ex.keep_alive and not conn.lost
