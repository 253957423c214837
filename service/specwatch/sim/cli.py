"""``specwatch sim``: launch flags (SGLang's own), wiring, and the optional control endpoint.

The control endpoint (``--control-port``, off by default) serves ``GET /truth`` (what the engine actually
did: finished requests with their timestamps, tokens and verify rounds), ``GET /explain`` and
``POST /control`` (switch profile, scale acceptance or costs, pause the engine) so that a live acceptance
collapse can be simulated.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import sys
import time
from typing import IO, Any

from aiohttp import web

from . import logfmt, model
from .control import control_routes
from .engine import Engine, EngineSettings
from .faults import FaultPlan
from .native import NativeAPI
from .openai import OpenAIAPI
from .sglang_metrics import SGLangMetrics
from .wire import ServerIdentity

SIM_VERSION = "0.5.23"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specwatch sim",
        description="Simulated SGLang server with EAGLE-3 speculative decoding (no GPU, no model). "
                    "Takes SGLang's launch flags; flags it does not simulate are accepted and ignored.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--model-path", "--model", default="simulated/Llama-3.1-8B-Instruct")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--api-key", default=None, help="answer 401 unless Authorization: Bearer <key> (as SGLang)")
    p.add_argument("--ssl-certfile", default=None, help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--ssl-keyfile", default=None, help="the certificate's private key (PEM)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"])
    # simulator-only
    p.add_argument("--profile", default="seed", choices=sorted(model.PROFILES))
    p.add_argument("--log-file", default=None, help="append log lines to this file as well as stdout")
    p.add_argument("--log-format", default=logfmt.DEFAULT_FAMILY, choices=sorted(logfmt.FAMILIES),
                   help="SGLang release family whose log line shapes to print")
    p.add_argument("--quiet", action="store_true", help="do not print log lines to stdout")
    p.add_argument("--seed", type=int, default=None, help="make acceptance draws reproducible")
    p.add_argument("--control-port", type=int, default=None,
                   help="serve /truth, /explain and /control (profile, pause, fault injection) on this port")
    p.add_argument("--control-host", default="127.0.0.1",
                   help="address of the control port (default 127.0.0.1: it is unauthenticated)")
    p.add_argument("--load-seconds", type=float, default=0.0,
                   help="pretend to load weights for this long before the port opens")
    p.add_argument("--explain", action="store_true", help="print the expected numbers and exit")
    p.add_argument("--batch-size", type=int, default=1, help="with --explain: running requests")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    for name in ("port", "decode_log_interval", "stream_interval"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_running_requests is not None and args.max_running_requests < 1:
        parser.error("--max-running-requests must be >= 1")
    try:
        args.spec = model.SpecConfig.from_flags(args.speculative_algorithm, args.speculative_num_steps,
                                                args.speculative_eagle_topk, args.speculative_num_draft_tokens)
    except ValueError as exc:
        parser.error(str(exc))
    return args, unknown


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

    def info(self, family: str, msg: str) -> None:
        self(logfmt.prefix(family, time.time()) + msg)


def server_args(args: argparse.Namespace, spec: model.SpecConfig, max_running: int) -> dict[str, Any]:
    return {
        "model_path": args.model_path, "served_model_name": args.served_model_name or args.model_path,
        "host": args.host, "port": args.port, "tp_size": 1, "dp_size": 1,
        "speculative_algorithm": spec.algorithm,
        "speculative_draft_model_path": args.speculative_draft_model_path,
        "speculative_num_steps": spec.num_steps if spec.enabled else None,
        "speculative_eagle_topk": spec.topk if spec.enabled else None,
        "speculative_num_draft_tokens": spec.num_draft_tokens if spec.enabled else None,
        "decode_log_interval": args.decode_log_interval, "stream_interval": args.stream_interval,
        "enable_metrics": args.enable_metrics, "max_running_requests": max_running,
        "log_level": args.log_level,
    }


def require_key(key: str | None) -> Any:
    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if key and request.path != "/health" and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)
    return check


async def serve(args: argparse.Namespace, unknown: list[str]) -> int:
    spec: model.SpecConfig = args.spec
    family = args.log_format
    sink = LogSink(not args.quiet, args.log_file)
    max_running = args.max_running_requests or (48 if spec.enabled else 256)
    settings = EngineSettings(
        profile=model.PROFILES[args.profile], spec=spec, max_running_requests=max_running,
        decode_log_interval=args.decode_log_interval, stream_interval=args.stream_interval, log_family=family,
        log_decode=args.log_level in ("debug", "info"), log_ms=os.environ.get("SGLANG_LOG_MS", "") in ("1", "true"),
        seed=args.seed,
    )
    if unknown:
        sink.info(family, f"specwatch sim: ignoring flags it does not simulate: {' '.join(unknown)}")
    engine = Engine(settings, sink)
    metrics = SGLangMetrics(args.served_model_name or args.model_path, engine) if args.enable_metrics else None
    if metrics is not None:
        engine.on_finish = metrics.on_finish
    ident = ServerIdentity(args.model_path, args.served_model_name or args.model_path, SIM_VERSION,
                           server_args(args, spec, max_running))
    sink.info(family, f"server_args={ident.server_args}")
    if args.load_seconds > 0:
        sink.info(family, "Load weight begin. (simulated)")
        await asyncio.sleep(args.load_seconds)
        sink.info(family, "Load weight end. (simulated)")
    app = web.Application(client_max_size=8 * 1024 * 1024, middlewares=[require_key(args.api_key)])
    faults = FaultPlan()
    NativeAPI(engine, ident, metrics.render if metrics else None, faults).routes(app)
    OpenAIAPI(engine, ident, faults).routes(app)
    runners = [web.AppRunner(app, access_log=None, handler_cancellation=True)]
    sites: list[tuple[web.AppRunner, str, int]] = [(runners[0], args.host, args.port)]
    if args.control_port:
        capp = web.Application()
        control_routes(capp, engine, args.batch_size, faults)
        runners.append(web.AppRunner(capp, access_log=None))
        sites.append((runners[1], args.control_host, args.control_port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(engine.run())
    try:
        tls = None
        if args.ssl_certfile:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(args.ssl_certfile, args.ssl_keyfile)
        for i, (runner, host, port) in enumerate(sites):
            await runner.setup()
            await web.TCPSite(runner, host, port, reuse_address=True, ssl_context=tls if i == 0 else None).start()
        scheme = "https" if tls else "http"
        sink.info(family, f"Uvicorn running on {scheme}://{args.host}:{args.port} (Press CTRL+C to quit)")
        sink.info(family, "The server is fired up and ready to roll!")
        done, _ = await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # an engine bug: crash loudly
    finally:
        task.cancel()
        engine.shutdown()
        for runner in runners:
            await runner.cleanup()
    return 0


def main(argv: list[str]) -> int:
    args, unknown = parse(argv)
    if args.explain:
        print(model.format_explanation(model.explain(model.PROFILES[args.profile], args.spec, args.batch_size)))
        return 0
    import uvloop

    try:
        return uvloop.run(serve(args, unknown))
    except OSError as exc:
        print(f"specwatch sim: cannot listen: {exc}", file=sys.stderr)
        return 1
