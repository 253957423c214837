"""Wire helpers shared by the simulator's native and OpenAI handlers: request validation, JSON answers, the
arrival stamp, and driving a request through the engine until it finishes.

Shapes follow SGLang 0.5.2x (the wire-format tests in tests/integration/test_sim_wire.py pin them).
"""

from __future__ import annotations

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
RECEIVED_NS = "specwatch.received_ns"
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


@web.middleware
async def received_at(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """Stamp the request as early as the server sees it: the simulator's truth starts here."""
    request[RECEIVED_NS] = time.monotonic_ns()
    return await handler(request)


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
                         arrival_ns=request[RECEIVED_NS])
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
                    await on_snap(snap)
                if snap.finished:
                    return snap
        finally:
            if req.finish_reason is None:
                self.engine.abort(req)

