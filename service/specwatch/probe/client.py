"""The probe's I/O seam: one streamed request → one ``RequestRecord``, and the pooled aiohttp session for
everything that is not a stream (detection, scrapes, info queries).

Source stage. Streams go over ``h1.Streams``, which parses each response inside the loop's read callback
(the arrival stamp is taken there); ``execute`` sends, waits for the outcome and turns it into a record.
Failures become records with an outcome and a one-line reason, never exceptions (``CancelledError``
excepted: the load loop records it and re-raises). The stream's meaning is ``stream.Attempt``'s.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ..errors import AuthError, ResponseTooLarge
from ..options import default
from ..records import Outcome, RequestRecord
from ..redaction import redact
from .h1 import Exchange, Origin, Streams, wait_body
from .stream import PATHS, Attempt, GenParams, build_payload

CONTROL_CONNECTIONS = 4  # detection, the server-metrics scrape, info queries


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = default("connect_timeout_s")
    read_s: float = default("read_timeout_s")  # longest a stream may go without a token (silence or a drip)
    request_s: float = default("request_timeout_s")  # whole-request deadline


@dataclass(frozen=True, slots=True)
class Access:
    """How to reach the target: its API key (sent as ``Authorization: Bearer``) and a CA bundle for TLS."""

    api_key: str | None = None
    ca_file: str | None = None

    def __repr__(self) -> str:  # never print the key
        return f"Access(api_key={'<set>' if self.api_key else None}, ca_file={self.ca_file!r})"


def make_session(timeouts: Timeouts, access: Access | None = None, streams: int = 0) -> aiohttp.ClientSession:
    """The pooled session for what is not a probe stream (those go over ``h1.Streams``, sized from
    ``TrafficPlan.max_streams``): detection, scrapes, info queries. Connector limit and timeouts are explicit:
    aiohttp's defaults queue silently past 100 connections and cut every request at 5 minutes. ``streams``:
    connections for a caller that also streams on it (the benchmarks' bare loop)."""
    access = access or Access()
    limit = streams + CONTROL_CONNECTIONS
    ssl_ctx = ssl.create_default_context(cafile=access.ca_file) if access.ca_file else True
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ttl_dns_cache=300, ssl=ssl_ctx)
    timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.connect_s, sock_read=timeouts.read_s)
    headers = {"Authorization": f"Bearer {access.api_key}"} if access.api_key else None
    return aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=2**20, headers=headers,
                                 json_serialize=lambda o: orjson.dumps(o).decode())


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """The decoded body of a 200 answer, else None; ``AuthError`` on 401/403 (the key is wrong or missing,
    which no retry will mend: the command names where its key came from). Connection errors propagate."""
    async with session.get(url, allow_redirects=False) as resp:
        if resp.status in (401, 403):
            raise AuthError(f"{redact(url)} answered HTTP {resp.status}")
        if resp.status != 200:
            return None
        try:
            return orjson.loads(await resp.read())
        except orjson.JSONDecodeError:
            return None


MAX_METRICS_BYTES = 8 * 1024 * 1024  # vLLM's /metrics is ~650 lines; a runaway exposition is refused whole


async def get_text(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    """The status and the text body (empty unless 200) of a bounded GET such as ``/metrics``;
    ``ResponseTooLarge`` past ``MAX_METRICS_BYTES``. Connection errors propagate."""
    async with session.get(url, allow_redirects=False) as resp:
        if resp.status != 200:
            return resp.status, ""
        data = await resp.content.read(MAX_METRICS_BYTES + 1)
    if len(data) > MAX_METRICS_BYTES:
        raise ResponseTooLarge(f"{redact(url)}: more than {MAX_METRICS_BYTES} bytes")
    return 200, data.decode("utf-8", "replace")


def make_streams(max_streams: int, timeouts: Timeouts, access: Access | None = None) -> Streams:
    """The streaming transport's pool (``h1``), sized like the session: one connection per stream."""
    access = access or Access()
    return Streams(max_streams, timeouts.connect_s, access.api_key, access.ca_file)


class _Watchdog:
    """One timer per stream, re-armed only when it fires: silence (no byte for ``read_s``), a drip (bytes but
    no token for ``read_s``) and the whole-request deadline, without a timer operation per chunk."""

    __slots__ = ("attempt", "deadline_ns", "ex", "handle", "limits", "loop", "read_ns")

    def __init__(self, ex: Exchange, attempt: Attempt, limits: Timeouts, loop: asyncio.AbstractEventLoop) -> None:
        self.ex, self.attempt, self.limits, self.loop = ex, attempt, limits, loop
        self.read_ns = int(limits.read_s * 1e9)
        self.deadline_ns = attempt.sent_ns + int(limits.request_s * 1e9)
        self.handle: asyncio.TimerHandle | None = None
        self._arm(min(self.read_ns, self.deadline_ns - attempt.sent_ns))

    def _arm(self, delay_ns: int) -> None:
        self.handle = self.loop.call_later(max(delay_ns, 1_000_000) / 1e9, self._check)

    def _check(self) -> None:
        ex, a, now = self.ex, self.attempt, time.monotonic_ns()
        last_token = a.chunk_ns[-1] if a.chunk_ns else a.sent_ns
        if ex.done.done():
            return
        if now - ex.bytes_ns >= self.read_ns:
            ex.fail(Outcome.TIMEOUT, "read timed out")
        elif now - last_token >= self.read_ns:
            ex.fail(Outcome.TIMEOUT, f"no token for {self.limits.read_s:g}s while bytes kept arriving")
        elif now >= self.deadline_ns:
            ex.fail(Outcome.TIMEOUT, f"request exceeded its {self.limits.request_s:g}s deadline")
        else:
            self._arm(min(ex.bytes_ns + self.read_ns, last_token + self.read_ns, self.deadline_ns) - now)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()


@dataclass(frozen=True, slots=True)
class StreamTransport:
    """The real ``traffic.Transport``: ``execute`` over an ``h1.Streams`` pool."""

    streams: Streams

    async def execute(self, attempt: Attempt, params: GenParams, limits: Timeouts) -> RequestRecord:
        return await execute(self.streams, attempt, params, limits)


async def execute(streams: Streams, attempt: Attempt, params: GenParams, limits: Timeouts = Timeouts()
                  ) -> RequestRecord:
    """Stream one request on ``streams``; every outcome is a record (``CancelledError`` propagates)."""
    target = attempt.target
    origin = Origin.of(target.base_url)
    request = streams.request(origin, PATHS[target.api], orjson.dumps(build_payload(target, attempt.prompt, params)))
    loop = asyncio.get_running_loop()
    for retry in (False, True):
        attempt.sent_ns = time.monotonic_ns()  # until the write below: a failed connect is stamped here
        try:
            conn, reused = await streams.acquire(origin)
        except TimeoutError:
            return attempt.finish(Outcome.CONNECT_ERROR, time.monotonic_ns(), "connect timed out")
        except (OSError, ssl.SSLError) as exc:
            return attempt.finish(Outcome.CONNECT_ERROR, time.monotonic_ns(), f"cannot connect: {exc}")
        ex = Exchange(attempt, loop, streams.secrets)
        conn.exchange = ex
        reusable = False
        watchdog: _Watchdog | None = None
        try:
            assert conn.transport is not None
            attempt.sent_ns = ex.bytes_ns = time.monotonic_ns()  # the bytes go to the socket now
            conn.transport.write(request)
            watchdog = _Watchdog(ex, attempt, limits, loop)
            failure = await ex.done
            if failure is None:
                reusable = await wait_body(ex, conn, 1.0)
                return attempt.finish(Outcome.OK, ex.when_ns, http_status=200)
            if reused and not ex.seen and not retry and failure.outcome is Outcome.STREAM_ERROR:
                continue  # the server had closed the idle connection: once more on a fresh one
            return attempt.finish(failure.outcome, ex.when_ns, failure.error, failure.http_status)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            streams.release(origin, conn, reusable)
    raise AssertionError("unreachable")  # pragma: no cover
