"""What both flavours of the simulator share to serve: the log sink, the API-key guard, the control port,
TLS, signals, and running the engine beside the HTTP sites until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import ssl
import sys
from collections.abc import Callable, Coroutine
from typing import IO, Any

from aiohttp import web

from ..errors import PromptFileError
from . import model, oracle, pattern
from .control import control_routes
from .engine import Engine, EngineSettings
from .faults import FaultPlan
from .wire import ArrivalStamps


class LogSink:
    def __init__(self, to_stdout: bool, path: str | None) -> None:
        self.to_stdout = to_stdout
        self.file: IO[str] | None = open(path, "a", buffering=1, encoding="utf-8") if path else None  # noqa: SIM115

    def __call__(self, line: str) -> None:
        if self.to_stdout:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        if self.file is not None:
            self.file.write(line + "\n")


def require_key(key: str | None, guarded: Callable[[str], bool]) -> Any:
    """401 unless ``Authorization: Bearer <key>`` on the paths ``guarded`` names (SGLang: all but /health;
    vLLM: /v1/…)."""
    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if key and guarded(request.path) and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)
    return check


def add_sim_flags(p: argparse.ArgumentParser, formats: dict[str, str], default_format: str, what: str) -> None:
    """The simulator-only flags, the same for both flavours."""
    p.add_argument("--profile", default="seed", choices=sorted(model.PROFILES),
                   help="timing and acceptance profile: seed (the seed's tuning story), mixed (acceptance by prompt "
                        "domain and temperature), fast (seed at 1/100 of its costs) (default: seed)")
    p.add_argument("--log-file", default=None,
                   help="append log lines to this file as well as stdout (default: none: stdout only)")
    p.add_argument("--log-format", default=default_format, choices=sorted(formats),
                   help=f"{what} release family whose log line shapes to print (default: {default_format})")
    p.add_argument("--quiet", action="store_true", help="do not print log lines to stdout (default: off)")
    p.add_argument("--seed", type=int, default=None,
                   help="make acceptance draws reproducible (default: none: different draws each run)")
    p.add_argument("--control-port", type=int, default=None,
                   help="serve /truth, /explain and /control (profile, pause, fault injection) on this port "
                        "(default: none: off)")
    p.add_argument("--control-host", default="127.0.0.1",
                   help="address of the control port, which is unauthenticated (default: 127.0.0.1)")
    p.add_argument("--load-seconds", type=float, default=0.0,
                   help="pretend to load weights for this long before the port opens (default: 0 s)")
    p.add_argument("--explain", action="store_true",
                   help="print what this engine will do and exit: one decode round at --batch-size running requests, "
                        "and (same engine, virtual time) the steady state at each of --streams (default: off)")
    p.add_argument("--batch-size", type=int, default=1,
                   help="with --explain: running requests in the round explained (default: 1 request)")
    p.add_argument("--streams", "--batch-sizes", dest="streams", default=None, metavar="N,N,…",
                   help="with --explain: the table by load: per-stream and aggregate tok/s of this configuration and "
                        "of plain decoding at N closed-loop streams, and the crossover (--batch-sizes: its old name) "
                        "(default: none: 1 stream, no table)")
    p.add_argument("--max-steps", type=int, default=10,
                   help="with --explain: the best step count at each load among 0 (plain) to this many "
                        "(default: 10 steps)")
    p.add_argument("--arrival", default="together", choices=pattern.ARRIVALS,
                   help="with --explain: streams started together (bench --concurrency) or --stagger-ms apart; "
                        "open loop (constant or poisson) at --rate-per-s (default: together)")
    p.add_argument("--rate-per-s", type=float, default=None,
                   help="with --explain and an open-loop --arrival: requests per second (default: none)")
    p.add_argument("--stagger-ms", type=float, default=None,
                   help="with --explain --arrival staggered: ms between stream starts (default: 0 ms)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="with --explain: a fixed prompt length in tokens (default: the built-in prompts, as bench "
                        "sends them)")
    p.add_argument("--prompts", default=None, metavar="FILE",
                   help="with --explain: the prompts bench --prompts FILE sends (default: the built-in prompts)")
    p.add_argument("--output-tokens", type=int, default=None,
                   help="with --explain: tokens per request (default: 500 tokens, bench's --max-tokens)")
    p.add_argument("--requests", type=int, default=None,
                   help="with --explain: measured requests per load (default: enough for a steady state)")
    p.add_argument("--cost-scale", type=float, default=1.0,
                   help="multiply every cost of the profile (same shape, faster or slower) (default: 1)")


    p.add_argument("--off-round-tax", type=float, default=model.OFF_ROUND_TAX, metavar="FRACTION",
                   help="a decode round that drafts nothing in this speculating server (a schedule's 0 range, an "
                        "adaptive slot at 0) costs plain decoding's round times 1 + this (default: 0.066, vLLM's "
                        "published K = 0 range at 2 streams)")


def explain_pattern(args: argparse.Namespace) -> pattern.Pattern:
    """The arrival pattern the flags state, through ``/explain``'s parser (one rule, one set of messages)."""
    given = {"arrival": args.arrival, "rate_per_s": args.rate_per_s, "stagger_ms": args.stagger_ms,
             "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens, "requests": args.requests}
    pat = pattern.parse({k: str(v) for k, v in given.items() if v is not None})
    return dataclasses.replace(pat, prompts_file=args.prompts) if args.prompts else pat


def explain_text(args: argparse.Namespace, settings: EngineSettings) -> str:
    """``--explain``: one decode round at ``--batch-size``; with ``--streams`` the steady state by load and the
    crossover; the best step count at each load (1 stream without ``--streams``)."""
    pat = explain_pattern(args)
    loads = [int(x) for x in args.streams.split(",") if x.strip()] if args.streams else [1]
    lines = [model.format_explanation(model.explain(settings.profile, settings.spec, args.batch_size,
                                                    draft_cost=settings.draft_cost))]
    if args.streams and pat.rate_per_s is None:
        lines.append(oracle.format_by_load(settings, pat, *oracle.by_load(settings, pat, loads)))
    if args.max_steps:
        lines.append(model.format_best_steps([oracle.best_steps(settings, pat.at(n), args.max_steps) for n in loads]))
    return "\n".join(lines)


def check_sim_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.streams is not None:
        try:
            sizes = [int(x) for x in args.streams.split(",") if x.strip()]
        except ValueError:
            parser.error(f"--streams: {args.streams!r} is not a list of integers")
        if not sizes or any(n < 1 or n > 10_000 for n in sizes):
            parser.error("--streams: each must be from 1 to 10000")
    if not 0 <= args.max_steps <= 64:
        parser.error("--max-steps must be from 0 to 64")
    if not 0.001 <= args.cost_scale <= model.MAX_COST_SCALE:
        parser.error(f"--cost-scale must be from 0.001 to {model.MAX_COST_SCALE:g}")
    if not 0 <= args.off_round_tax <= 10:
        parser.error("--off-round-tax must be from 0 to 10")
    if args.explain:
        try:
            explain_pattern(args)
        except (ValueError, PromptFileError) as exc:
            parser.error(f"--{str(exc).split(':')[0].replace('_', '-')}: {str(exc).partition(': ')[2] or exc}")


def sim_profile(args: argparse.Namespace) -> model.Profile:
    profile = model.PROFILES[args.profile].with_overrides(cost_scale=args.cost_scale)
    return dataclasses.replace(profile, off_round_tax=args.off_round_tax)


async def run_server(args: argparse.Namespace, app: web.Application, engine: Engine, faults: FaultPlan,
                     say: Callable[[str], None], ready_lines: list[str],
                     extra_tasks: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = ()) -> int:
    """Serve ``app`` (and the control port if asked) with the engine running, until a signal. Every request to
    ``app`` is stamped with its arrival (``wire.ArrivalStamps``), its first middleware."""
    stamps = ArrivalStamps()
    app.middlewares.insert(0, stamps.received_at)
    runners = [web.AppRunner(app, access_log=None, handler_cancellation=True)]
    # the control port listens before the API does: whoever sees /health answer finds /truth and /control up
    sites: list[tuple[web.AppRunner, str, int]] = []
    if args.control_port:
        capp = web.Application()
        control_routes(capp, engine, args.batch_size, faults)
        runners.append(web.AppRunner(capp, access_log=None))
        sites.append((runners[1], args.control_host, args.control_port))
    sites.append((runners[0], args.host, args.port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(engine.run()), *(asyncio.create_task(t()) for t in extra_tasks)]
    listening: asyncio.Server | None = None
    try:
        tls = None
        if args.ssl_certfile:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(args.ssl_certfile, args.ssl_keyfile)
        for runner, host, port in sites:
            await runner.setup()
            if runner is not runners[0]:
                await web.TCPSite(runner, host, port, reuse_address=True).start()
                continue
            assert runner.server is not None  # the API listens through the arrival stamps; TLS on it only
            listening = await loop.create_server(stamps.factory(runner.server), host, port, ssl=tls,
                                                 reuse_address=True)
        scheme = "https" if tls else "http"
        for line in ready_lines:
            say(line.format(url=f"{scheme}://{args.host}:{args.port}"))
        done, _ = await asyncio.wait([*tasks, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            if t in done:
                t.result()  # an engine bug: crash loudly
    finally:
        for t in tasks:
            t.cancel()
        engine.shutdown()
        if listening is not None:
            listening.close()
        for runner in runners:
            await runner.cleanup()
    return 0
