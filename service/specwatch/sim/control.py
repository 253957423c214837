"""The simulator's control port (``--control-port``, off by default): ``GET /truth`` (what the engine
actually did: finished requests with their timestamps, tokens and verify rounds), ``GET /explain`` and
``POST /control`` (switch profile, scale acceptance or costs, pause the engine) so that a live acceptance
collapse can be simulated. ``/explain`` runs the served engine's code in virtual time (``oracle``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

import orjson
from aiohttp import web

from . import model, oracle, pattern
from .engine import Engine, EngineSettings
from .faults import FaultPlan

SCALE_RANGE = {"accept_scale": (0.0, 10.0), "cost_scale": (0.0, model.MAX_COST_SCALE)}
MAX_PAUSE_S = 3600.0


def _scale(body: dict[str, Any], key: str) -> float:
    v = body.get(key, 1.0)
    lo, hi = SCALE_RANGE[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v <= hi:
        raise ValueError(f"{key}: must be a number in ({lo:g}, {hi:g}]")
    return float(v)


def _int(v: object, key: str, lo: int, hi: int) -> int:
    return int(pattern.number(v, key, int, lo, hi))


def explain_body(settings: EngineSettings, q: Mapping[str, str], batch_size: int) -> dict[str, Any]:
    """``/explain``: the decode round at ``?batch_size=N`` running requests, and the engine in virtual time on
    the arrival pattern the query states (``pattern.parse``: N closed-loop streams for each of ``?streams=N,N,…``,
    as ``bench --concurrency N`` sends them by default): each load's steady state against plain decoding, the
    crossover between them and the best step count among 0..``max_steps`` at each. ``ValueError`` names a bad
    parameter."""
    bs = _int(q.get("batch_size", batch_size), "batch_size", 1, 100_000)
    loads = [_int(x, "streams", 1, 10_000) for x in q.get("streams", "1,16").split(",")][:16]
    max_steps = _int(q.get("max_steps", 10), "max_steps", 0, 64)
    pat = pattern.parse(q)
    body = asdict(model.explain(settings.profile, settings.spec, bs, draft_cost=settings.draft_cost))
    rows, cross = oracle.by_load(settings, pat, loads)
    body["pattern"] = pat.describe()
    body["loads"] = [{"streams": r.streams, "served": asdict(r.served), "plain": asdict(r.plain),
                      "speedup": r.speedup} for r in rows]
    body["crossover"] = cross
    body["best_steps"] = [asdict(oracle.best_steps(settings, pat.at(n), max_steps)) for n in loads]
    return body


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def control_routes(app: web.Application, engine: Engine, batch_size: int, faults: FaultPlan) -> None:
    def explained() -> dict[str, Any]:
        return asdict(model.explain(engine.s.profile, engine.s.spec, batch_size, draft_cost=engine.s.draft_cost))

    async def truth(request: web.Request) -> web.Response:
        return _json({"requests": list(engine.truth), "counters": dict(engine.counters),
                      "rounds": [{"end_ns": t, "batch_size": b, "tokens": n} for t, b, n in engine.rounds],
                      "prefills": [{"end_ns": t, "requests": b, "prompt_tokens": n} for t, b, n in engine.prefills],
                      "forward_ct_decode": engine.forward_ct_decode, "explain": explained(),
                      "pacer": {"stalls": engine.pace.stalls, "lost_ms": engine.pace.lost_ns / 1e6},
                      "faults": {"kind": faults.kind, "remaining": faults.remaining, "injected": faults.injected}})

    async def explain(request: web.Request) -> web.Response:
        try:  # seconds of CPU at many loads: off the serving loop
            return _json(await asyncio.to_thread(explain_body, engine.s, dict(request.query), batch_size))
        except ValueError as exc:
            return _json({"error": str(exc)}, 400)

    async def control(request: web.Request) -> web.Response:
        try:
            profile, pause = checked_control(orjson.loads(await request.read()), engine, faults)
        except (ValueError, orjson.JSONDecodeError) as exc:
            return _json({"error": str(exc)}, 400)
        engine.set_profile(profile)
        if pause:
            engine.pause(float(pause))
        return _json(explained())

    app.router.add_get("/truth", truth)
    app.router.add_get("/explain", explain)
    app.router.add_post("/control", control)


def checked_control(body: Any, engine: Engine, faults: FaultPlan) -> tuple[model.Profile, float]:
    """``POST /control``'s body, every value checked before anything changes (a bad one changes nothing and
    answers 400): the profile to switch to and the pause in seconds; a fault is armed and a ``seed`` (the next
    requests draw as a fresh engine's with that seed) applied here."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    unknown = set(body) - {"profile", "accept_scale", "cost_scale", "pause_s", "fault", "count", "stall_s",
                           "drip_interval_s", "seed"}
    if unknown:
        raise ValueError(f"unknown control keys: {sorted(unknown)}")
    name = body.get("profile", engine.s.profile.name)
    if name not in model.PROFILES:
        raise ValueError(f"profile: {name!r} is not one of {', '.join(sorted(model.PROFILES))}")
    profile = replace(model.PROFILES[name].with_overrides(_scale(body, "accept_scale"), _scale(body, "cost_scale")),
                      off_round_tax=engine.s.profile.off_round_tax)  # the launch's --off-round-tax stays
    pause = body.get("pause_s", 0)
    if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not 0 <= pause <= MAX_PAUSE_S:
        raise ValueError(f"pause_s: must be a number of seconds from 0 to {MAX_PAUSE_S:g}")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise ValueError("seed: must be an integer from 0")
    if "fault" in body:
        faults.arm(body)
    if seed is not None:
        engine.reseed(seed)
    return profile, float(pause)
