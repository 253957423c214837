"""The daemon's HTTP endpoints: ``/`` (its page), ``/metrics``, ``/healthz``, ``/readyz``, ``/api/summary``.
Exporter stage.

Handlers read what the tick left (the instruments' values, the last ``Snapshot``): beyond rendering the
registry (or the page, for whoever opens it) nothing is computed per request, so a scrape storm cannot stall
the probes.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from .snapshot import Snapshot

CONTENT_TYPE_PROMETHEUS = "text/plain; version=0.0.4"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Endpoints:
    render_metrics: Callable[[], bytes]
    snapshot: Callable[[], Snapshot | None]
    ready: Callable[[], bool]
    page: Callable[[], str | None] | None = None  # GET /: the daemon's own page
    api_token: str | None = None  # when set, / and /api/* answer 401 without "Authorization: Bearer <token>"

    def __repr__(self) -> str:
        return f"Endpoints(api_token={'<set>' if self.api_token else None})"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/api/summary", self.api_snapshot)
        app.router.add_get("/", self.index)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.api_token and (request.path.startswith("/api/") or request.path == "/"):
            given = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if not hmac.compare_digest(given.encode(), self.api_token.encode()):
                return web.Response(status=401, text="unauthorized\n", headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.render_metrics(), headers={"Content-Type": CONTENT_TYPE_PROMETHEUS})

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, _: web.Request) -> web.Response:
        ok = self.ready()
        return web.Response(status=200 if ok else 503, text="ready\n" if ok else "not ready\n")

    async def index(self, _: web.Request) -> web.Response:
        html = self.page() if self.page is not None else None
        if html is None:
            return web.Response(text="specwatch: starting\n", headers={"Refresh": "1"})
        return web.Response(text=html, content_type="text/html")

    async def api_snapshot(self, _: web.Request) -> web.Response:
        s = self.snapshot()
        body = orjson.dumps(s, option=orjson.OPT_NON_STR_KEYS) if s is not None else b"{}"
        return web.Response(body=body, content_type="application/json")
