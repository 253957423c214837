"""Fault injection (off by default; armed through the control port): the simulator misbehaves the way real
servers and networks do, so the profiler's handling of each fault is tested against a real process.

``POST /control {"fault": KIND, "count": N}`` arms KIND for the next N generation requests (native or
OpenAI); ``{"fault": null}`` disarms. Kinds:

- ``http_500``, ``http_429``, ``http_503``: the request is answered with that status at once.
- ``stall``: after the first chunk the stream goes silent for ``stall_s`` (default 120 s).
- ``drip``: after the first chunk, one byte every ``drip_interval_s`` (default 0.2 s) of an event that never ends.
- ``malformed``: an event whose JSON is cut short, then the rest of the stream.
- ``truncated``: half an event, then the connection is closed.
- ``reset``: the connection is aborted mid-stream.
- ``oversized``: one 17 MiB ``data:`` line.  ``multiline``: 17 MiB of ``data:`` lines in one event.
- ``no_done``: the stream ends without ``[DONE]``.
- ``absurd_tokens``: a chunk claims 20,000,000 completion tokens.
- ``kill``: the process exits mid-stream (status 3), as a crashed server does.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

KINDS = ("http_500", "http_429", "http_503", "stall", "drip", "malformed", "truncated", "reset", "oversized",
         "multiline", "no_done", "absurd_tokens", "kill")
DONE = b"data: [DONE]\n\n"
HUGE_BYTES = 17 * 1024 * 1024
TOKENS_RE = re.compile(rb'"completion_tokens":\d+')


@dataclass(slots=True)
class FaultPlan:
    kind: str | None = None
    remaining: int = 0
    stall_s: float = 120.0
    drip_interval_s: float = 0.2
    injected: int = 0  # requests that got a fault, for /truth

    def arm(self, body: dict[str, Any]) -> None:
        """Validate and arm; ``ValueError`` names the bad key (the control port answers 400)."""
        kind = body.get("fault")
        if kind is not None and kind not in KINDS:
            raise ValueError(f"fault: {kind!r} is not one of {', '.join(KINDS)}")
        count = body.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1_000_000:
            raise ValueError("count: must be an integer from 1 to 1000000")
        stall = _seconds(body, "stall_s", self.stall_s, 3600.0)
        drip = _seconds(body, "drip_interval_s", self.drip_interval_s, 60.0)
        self.kind, self.remaining, self.stall_s, self.drip_interval_s = kind, count if kind else 0, stall, drip

    def take(self) -> str | None:
        if self.kind is None or self.remaining <= 0:
            return None
        self.remaining -= 1
        self.injected += 1
        return self.kind


def _seconds(body: dict[str, Any], key: str, default: float, hi: float) -> float:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= hi:
        raise ValueError(f"{key}: must be a number of seconds in (0, {hi:g}]")
    return float(v)


def http_status(kind: str | None) -> int | None:
    return int(kind[5:]) if kind is not None and kind.startswith("http_") else None


class FaultyStream:
    """Stands between a handler and its ``StreamResponse``: passes events through, except the one fault."""

    def __init__(self, request: web.Request, resp: web.StreamResponse, kind: str | None, plan: FaultPlan) -> None:
        self.request, self.resp, self.kind, self.plan = request, resp, kind, plan
        self.events = 0
        self.closed = False

    async def write(self, data: bytes) -> None:
        if self.closed:
            return
        self.events += 1
        at = DONE if self.kind == "no_done" else None  # no_done drops only [DONE]; the others strike event 2
        kind = self.kind if (data == DONE if at else self.events == 2) else None
        if kind is None:
            await self.resp.write(data)
        elif kind == "stall":
            await asyncio.sleep(self.plan.stall_s)
            await self.resp.write(data)
        elif kind == "drip":
            await self.resp.write(b"data: ")
            while True:  # until the client gives up and the write fails
                await asyncio.sleep(self.plan.drip_interval_s)
                await self.resp.write(b"x")
        elif kind == "malformed":
            await self.resp.write(b'data: {"text": "trunc\n\n')
        elif kind == "truncated":
            await self.resp.write(data[: len(data) // 2])
            self._close()
        elif kind == "reset":
            self._close()
        elif kind == "oversized":
            await self.resp.write(b"data: " + b"x" * HUGE_BYTES + b"\n\n")
        elif kind == "multiline":  # one write: the simulator must not be the one hogging the CPU
            await self.resp.write((b"data: " + b"x" * 1023 + b"\n") * (HUGE_BYTES // 1030 + 1) + b"\n")
        elif kind == "no_done":
            pass
        elif kind == "absurd_tokens":
            await self.resp.write(TOKENS_RE.sub(b'"completion_tokens":20000000', data))
        elif kind == "kill":
            os._exit(3)

    def _close(self) -> None:
        self.closed = True
        if self.request.transport is not None:
            self.request.transport.abort()
        raise ConnectionResetError("injected fault: connection closed")  # the handler aborts the request
