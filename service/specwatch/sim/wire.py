"""Wire helpers shared by the simulator's native and OpenAI handlers: request validation, JSON answers, the
arrival stamps (when a request's first bytes reach the process, and when the engine can have it), and driving
a request through the engine until it finishes.

Shapes follow SGLang 0.5.2x (the wire-format tests in tests/integration/test_sim_wire.py pin them).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from .engine import Engine, SimRequest, Snapshot
from .faults import FaultPlan

MAX_NEW_TOKENS_LIMIT = 32_768
RECEIVED_NS = web.RequestKey("received_ns", int)  # when its first bytes reached the process (ArrivalStamps)
ARRIVAL_NS = web.RequestKey("arrival_ns", int)  # when the first middleware ran: the engine's arrival
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class BadRequest(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    model_path: str
    served_model_name: str
    version: str
    server_args: dict[str, Any]
    continuous_usage: bool = True  # honours stream_options.continuous_usage_stats (SGLang 0.5.4.post2+, vLLM)
    context_length: int | None = None  # SGLang's --context-length; None: no prompt is refused

    def over_context(self, prompt_tokens: int) -> str | None:
        """SGLang 0.5.23's refusal of a prompt that fills the context (managers/tokenizer_manager.py:1337-1351:
        input tokens >= context length, without --allow-auto-truncate), or None."""
        if self.context_length is None or prompt_tokens < self.context_length:
            return None
        return (f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                f"({self.context_length} tokens).")


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def number(d: dict[str, Any], key: str, default: float, kind: type = float) -> Any:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
        raise BadRequest(f"{key} must be {'an integer' if kind is int else 'a number'}, got {v!r}")
    return kind(v)


def max_tokens(d: dict[str, Any], key: str, default: int) -> int:
    n = number(d, key, default, int)
    if n <= 0 or n > MAX_NEW_TOKENS_LIMIT:
        raise BadRequest(f"{key} must be between 1 and {MAX_NEW_TOKENS_LIMIT}, got {n}")
    return int(n)


def boolean(d: dict[str, Any], key: str, default: bool = False) -> bool:
    v = d.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise BadRequest(f"{key} must be a boolean, got {v!r}")
    return v


class StampedConnection(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind one that notes when a request's first bytes arrive.

    aiohttp parses a request and builds its handler's task before any middleware runs. Right after an idle spell
    that took 4-8 ms on a 2-core VM (measured from the bytes' arrival to the middleware): a client's TTFT counts
    that time, and a truth stamped in the middleware did not. Bytes that arrive while a request of this
    connection is being handled (its body, a pipelined request) start nothing: a request they begin falls back
    to the middleware's own stamp."""

    __slots__ = ("_inner", "_open", "busy", "head_ns")

    def __init__(self, inner: asyncio.Protocol, open_conns: dict[asyncio.BaseProtocol, StampedConnection]) -> None:
        self._inner = inner
        self._open = open_conns
        self.head_ns = 0  # the arrival of the first bytes of a request no middleware has taken yet
        self.busy = 0  # requests of this connection between the middleware and their answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._open[self._inner] = self
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy and not self.head_ns:
            self.head_ns = time.monotonic_ns()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._open.pop(self._inner, None)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class ArrivalStamps:
    """The protocol factory of a listening socket (``loop.create_server``) in front of an aiohttp runner's, and
    the middleware that gives each request two stamps: ``RECEIVED_NS``, when its first bytes reached the process
    (when the middleware ran if they came in while the connection was busy), where the TTFT the simulator puts
    on the wire starts; and ``ARRIVAL_NS``, when the middleware ran, the engine's arrival. The engine keeps the
    second: it schedules and batches a request from when its handler can submit it, so that a served run and
    ``/explain``'s virtual one (its client pace read from these arrivals) batch alike. Install ``received_at`` as
    the app's first middleware, so that every answered request takes its stamps."""

    def __init__(self) -> None:
        self.open: dict[asyncio.BaseProtocol, StampedConnection] = {}

    def factory(self, make: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: StampedConnection(make(), self.open)

    @web.middleware
    async def received_at(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Stamp the request as early as the server saw it: the simulator's truth starts here."""
        now = time.monotonic_ns()
        request[ARRIVAL_NS] = now
        conn = self.open.get(request.protocol)
        if conn is None:
            request[RECEIVED_NS] = now
            return await handler(request)
        request[RECEIVED_NS] = conn.head_ns or now
        conn.head_ns = 0
        conn.busy += 1
        try:
            return await handler(request)
        finally:
            conn.busy -= 1


class Handlers:
    """What both APIs share: the engine, the server's identity, submitting and driving requests."""

    def __init__(self, engine: Engine, ident: ServerIdentity, faults: FaultPlan | None = None) -> None:
        self.engine = engine
        self.ident = ident
        self.faults = faults or FaultPlan()

    def new_request(self, request: web.Request, prompt: str, prompt_tokens: int, max_new: int, ignore_eos: bool,
                     temperature: float, stream_interval: int | None, rid: str | None) -> SimRequest:
        req = SimRequest(rid=rid or uuid.uuid4().hex, prompt=prompt, prompt_tokens=prompt_tokens,
                         max_new_tokens=max_new, ignore_eos=ignore_eos, temperature=temperature,
                         stream_interval=stream_interval or self.engine.s.stream_interval,
                         arrival_ns=request[ARRIVAL_NS], received_ns=request[RECEIVED_NS])
        self.engine.submit(req)
        return req

    async def drive(self, req: SimRequest, on_snap: Callable[[Snapshot], Awaitable[None]] | None) -> Snapshot:
        """Feed coalesced snapshots to ``on_snap`` until the request finishes; abort it if the consumer fails
        (a client that disconnects mid-stream frees its batch slot)."""
        try:
            while True:
                snap = await req.queue.get()
                while not req.queue.empty():
                    snap = req.queue.get_nowait()
                if on_snap is not None:
                    if not req.first_sent_ns and snap.completion_tokens:
                        req.first_sent_ns = time.monotonic_ns()  # its first token's chunk is being written
                    await on_snap(snap)
                if snap.finished:
                    return snap
        finally:
            if req.finish_reason is None:
                self.engine.abort(req)

