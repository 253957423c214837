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
from .faults import FaultPlan

SCALE_RANGE = {"accept_scale": (0.0, 10.0), "cost_scale": (0.0, 100.0)}
MAX_PAUSE_S = 3600.0


def _scale(body: dict[str, Any], key: str) -> float:
    v = body.get(key, 1.0)
    lo, hi = SCALE_RANGE[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v <= hi:
        raise ValueError(f"{key}: must be a number in ({lo:g}, {hi:g}]")
    return float(v)


def _int(v: object, key: str, lo: int, hi: int) -> int:
    try:
        n = int(str(v))
    except ValueError:
        raise ValueError(f"{key}: {str(v)[:40]!r} is not an integer") from None
    if not lo <= n <= hi:
        raise ValueError(f"{key}: must be from {lo} to {hi}")
    return n


def control_routes(app: web.Application, engine: Engine, batch_size: int, faults: FaultPlan) -> None:
    def explained() -> dict[str, Any]:
        return asdict(model.explain(engine.s.profile, engine.s.spec, batch_size, draft_cost=engine.s.draft_cost))

    async def truth(request: web.Request) -> web.Response:
        body = {"requests": list(engine.truth), "counters": dict(engine.counters),
                "rounds": [{"end_ns": t, "batch_size": b, "tokens": n} for t, b, n in engine.rounds],
                "prefills": [{"end_ns": t, "requests": b, "prompt_tokens": n} for t, b, n in engine.prefills],
                "forward_ct_decode": engine.forward_ct_decode, "explain": explained(),
                "faults": {"kind": faults.kind, "remaining": faults.remaining, "injected": faults.injected}}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def explain(request: web.Request) -> web.Response:
        """``?batch_size=N`` (the round at N running requests); ``?streams=N,N,…`` (the best step count at each
        load, the table ``--explain`` prints), with ``max_steps``, ``prompt_tokens``, ``output_tokens``,
        ``domain`` and ``temperature`` (the traffic the model assumes)."""
        q = request.query
        try:
            bs = _int(q.get("batch_size", batch_size), "batch_size", 1, 100_000)
            streams = [_int(x, "streams", 1, 100_000) for x in q.get("streams", "1,16").split(",")][:32]
            max_steps = _int(q.get("max_steps", 10), "max_steps", 0, 64)
            prompt, output = (_int(q.get("prompt_tokens", 64), "prompt_tokens", 1, 1_000_000),
                              _int(q.get("output_tokens", 256), "output_tokens", 2, 1_000_000))
            temperature = float(q.get("temperature", 0.0))
            if not 0 <= temperature <= 2:
                raise ValueError("temperature: must be from 0 to 2")
        except ValueError as exc:
            return web.Response(status=400, body=orjson.dumps({"error": str(exc)}), content_type="application/json")
        s = engine.s
        body = asdict(model.explain(s.profile, s.spec, bs, draft_cost=s.draft_cost))
        body["crossover"] = model.crossover(s.profile, s.spec, s.draft_cost)
        body["best_steps"] = [asdict(model.best_steps(s.profile, s.spec, n, max_steps, prompt, output, s.draft_cost,
                                                      q.get("domain", "chat")[:20], temperature)) for n in streams]
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def control(request: web.Request) -> web.Response:
        """Every value is checked before anything changes: a bad request changes nothing and answers 400."""
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            unknown = set(body) - {"profile", "accept_scale", "cost_scale", "pause_s", "fault", "count", "stall_s",
                                   "drip_interval_s"}
            if unknown:
                raise ValueError(f"unknown control keys: {sorted(unknown)}")
            name = body.get("profile", engine.s.profile.name)
            if name not in model.PROFILES:
                raise ValueError(f"profile: {name!r} is not one of {', '.join(sorted(model.PROFILES))}")
            profile = model.PROFILES[name].with_overrides(_scale(body, "accept_scale"), _scale(body, "cost_scale"))
            pause = body.get("pause_s", 0)
            if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not 0 <= pause <= MAX_PAUSE_S:
                raise ValueError(f"pause_s: must be a number of seconds from 0 to {MAX_PAUSE_S:g}")
            if "fault" in body:
                faults.arm(body)
        except (ValueError, orjson.JSONDecodeError) as exc:
            return web.Response(status=400, body=orjson.dumps({"error": str(exc)}), content_type="application/json")
        engine.set_profile(profile)
        if pause:
            engine.pause(float(pause))
        return web.Response(body=orjson.dumps(explained()), content_type="application/json")

    app.router.add_get("/truth", truth)
    app.router.add_get("/explain", explain)
    app.router.add_post("/control", control)
