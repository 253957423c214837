"""The simulator's control port (``--control-port``, off by default): ``GET /truth`` (what the engine
actually did: finished requests with their timestamps, tokens and verify rounds), ``GET /explain`` and
``POST /control`` (switch profile, scale acceptance or costs, pause the engine) so that a live acceptance
collapse can be simulated."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson
from aiohttp import web

from . import model
from .engine import Engine


def control_routes(app: web.Application, engine: Engine, batch_size: int) -> None:
    def explained() -> dict[str, Any]:
        return asdict(model.explain(engine.s.profile, engine.s.spec, batch_size))

    async def truth(request: web.Request) -> web.Response:
        body = {"requests": list(engine.truth), "counters": dict(engine.counters),
                "forward_ct_decode": engine.forward_ct_decode, "explain": explained()}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def explain(request: web.Request) -> web.Response:
        bs = int(request.query.get("batch_size", batch_size))
        body = asdict(model.explain(engine.s.profile, engine.s.spec, bs))
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def control(request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            unknown = set(body) - {"profile", "accept_scale", "cost_scale", "pause_s"}
            if unknown:
                raise ValueError(f"unknown control keys: {sorted(unknown)}")
            base = model.PROFILES[body.get("profile", engine.s.profile.name)]
            profile = base.with_overrides(float(body.get("accept_scale", 1.0)), float(body.get("cost_scale", 1.0)))
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
            return web.Response(status=400, body=orjson.dumps({"error": str(exc)}), content_type="application/json")
        engine.set_profile(profile)
        if body.get("pause_s"):
            engine.pause(float(body["pause_s"]))
        return web.Response(body=orjson.dumps(explained()), content_type="application/json")

    app.router.add_get("/truth", truth)
    app.router.add_get("/explain", explain)
    app.router.add_post("/control", control)
