"""The probe's I/O seam: one pooled aiohttp session, one streamed request → one ``RequestRecord``.

Source stage. Failures become records with an outcome and a one-line reason, never exceptions
(``CancelledError`` excepted: the load loop records it and re-raises). The stream's meaning is
``stream.Attempt``'s; this module only moves bytes and stamps their arrival.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler

from ..errors import StreamError, TargetError
from ..options import redact
from ..records import Outcome, RequestRecord
from .sse import SSEParser
from .stream import PATHS, Attempt, GenParams, build_payload

JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
YIELD_AFTER_BYTES = 64 * 1024  # SSE chunks are a few hundred bytes; only a flood reads this much at once
CONTROL_CONNECTIONS = 4  # beyond the streams: detection, the server-metrics scrape, info queries


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = 5.0
    read_s: float = 60.0  # longest a stream may go without a token (silence, keep-alives or a drip alike)
    request_s: float = 600.0  # whole-request deadline


@dataclass(frozen=True, slots=True)
class Access:
    """How to reach the target: its API key (sent as ``Authorization: Bearer``) and a CA bundle for TLS."""

    api_key: str | None = None
    ca_file: str | None = None

    def __repr__(self) -> str:  # never print the key
        return f"Access(api_key={'<set>' if self.api_key else None}, ca_file={self.ca_file!r})"


async def _stamp_send(_: aiohttp.ClientSession, ctx: Any, __: Any) -> None:
    """aiohttp is about to hand the request's bytes to the transport (its body's chunk, in the same step as
    the write): the send the server sees. The stamp taken before ``post`` would also hold the wait for a
    connection and for the loop, which is the client's delay (schedule lag), not the server's TTFT."""
    attempt = ctx.trace_request_ctx
    if isinstance(attempt, Attempt):
        attempt.sent_ns = time.monotonic_ns()


class StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, stamping the moment bytes arrive: the event loop calls
    ``data_received`` as it reads the socket, before any stream's task resumes. A stamp taken in the
    reading task would add the time every other stream woken in the same loop iteration spent first."""

    arrived_ns = 0

    def data_received(self, data: bytes) -> None:
        self.arrived_ns = time.monotonic_ns()
        super().data_received(data)


def make_session(max_streams: int, timeouts: Timeouts, access: Access | None = None) -> aiohttp.ClientSession:
    """One pooled session. Connector limit and timeouts are explicit: aiohttp's defaults queue silently
    past 100 connections and cut every request at 5 minutes. Callers pass the number that caps their
    streams in flight (``LoadPlan.max_streams``), so no stream ever waits for a connection unmeasured."""
    access = access or Access()
    limit = max_streams + CONTROL_CONNECTIONS
    ssl_ctx = ssl.create_default_context(cafile=access.ca_file) if access.ca_file else True
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ttl_dns_cache=300, ssl=ssl_ctx)
    connector._factory = functools.partial(StampingHandler, loop=connector._loop)  # type: ignore[assignment]
    timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.connect_s, sock_read=timeouts.read_s)
    headers = {"Authorization": f"Bearer {access.api_key}"} if access.api_key else None
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_stamp_send)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=2**20, headers=headers,
                                 json_serialize=lambda o: orjson.dumps(o).decode(), trace_configs=[trace])


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """The decoded body of a 200 answer, else None; ``TargetError`` on 401/403 (the key is wrong or missing,
    which no retry will mend). Connection errors propagate (the caller decides)."""
    async with session.get(url, allow_redirects=False) as resp:
        if resp.status in (401, 403):
            raise TargetError(f"{redact(url)} answered HTTP {resp.status}: give the target's API key in "
                              "SPECWATCH_API_KEY or --api-key-file")
        if resp.status != 200:
            return None
        try:
            return orjson.loads(await resp.read())
        except orjson.JSONDecodeError:
            return None


def _slices(data: bytes) -> list[bytes] | tuple[bytes]:
    if len(data) <= YIELD_AFTER_BYTES:
        return (data,)
    view = memoryview(data)
    return [bytes(view[i:i + YIELD_AFTER_BYTES]) for i in range(0, len(data), YIELD_AFTER_BYTES)]


async def execute(session: aiohttp.ClientSession, attempt: Attempt, params: GenParams,
                  limits: Timeouts = Timeouts()) -> RequestRecord:
    target = attempt.target
    url = target.base_url + PATHS[target.api]
    body = orjson.dumps(build_payload(target, attempt.prompt, params))
    attempt.sent_ns = time.monotonic_ns()

    def fail(outcome: Outcome, error: str, http_status: int | None = None) -> RequestRecord:
        return attempt.finish(outcome, time.monotonic_ns(), error, http_status)

    progress_ns, deadline_ns = int(limits.read_s * 1e9), attempt.sent_ns + int(limits.request_s * 1e9)
    try:
        async with session.post(url, data=body, headers=JSON_HEADERS, allow_redirects=False,
                                trace_request_ctx=attempt) as resp:
            if resp.status != 200:
                snippet = (await resp.content.read(200)).decode("utf-8", "replace").replace("\n", " ")
                where = f" to {redact(resp.headers.get('Location', ''))}" if 300 <= resp.status < 400 else ""
                return fail(Outcome.HTTP_ERROR, f"HTTP {resp.status}{where}: {snippet}", resp.status)
            parser = SSEParser()
            proto = resp.connection.protocol if resp.connection is not None else None
            stamped = isinstance(proto, StampingHandler)
            async for data in resp.content.iter_any():
                now = proto.arrived_ns if stamped else time.monotonic_ns()  # type: ignore[union-attr]
                for piece in _slices(data):
                    for ev in parser.feed(piece):
                        if attempt.handle(ev.data, now):
                            return attempt.finish(Outcome.OK, now, http_status=200)
                    if len(data) > YIELD_AFTER_BYTES:  # a flood already buffered is handed over without an
                        await asyncio.sleep(0)  # await: let the other streams (and /healthz) run between slices
                last = attempt.chunk_ns[-1] if attempt.chunk_ns else attempt.sent_ns
                if now - last > progress_ns:  # bytes arrive, tokens do not: a drip
                    return fail(Outcome.TIMEOUT, f"no token for {limits.read_s:g}s while bytes kept arriving")
                if now > deadline_ns:
                    return fail(Outcome.TIMEOUT, f"request exceeded its {limits.request_s:g}s deadline")
            now = time.monotonic_ns()
            for ev in parser.close():
                if attempt.handle(ev.data, now):
                    return attempt.finish(Outcome.OK, now, http_status=200)
            return fail(Outcome.STREAM_ERROR, "stream ended without [DONE]", 200)
    except StreamError as exc:
        return fail(Outcome.STREAM_ERROR, str(exc), 200)
    except aiohttp.ConnectionTimeoutError:
        return fail(Outcome.CONNECT_ERROR, "connect timed out")
    except TimeoutError:
        return fail(Outcome.TIMEOUT, "read timed out" if attempt.sent_ns else "timed out")
    except aiohttp.ClientConnectorError as exc:
        return fail(Outcome.CONNECT_ERROR, f"cannot connect: {exc.os_error or exc}")
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
        return fail(Outcome.STREAM_ERROR, f"connection lost mid-stream: {type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        return fail(Outcome.STREAM_ERROR, f"{type(exc).__name__}: {exc}")
