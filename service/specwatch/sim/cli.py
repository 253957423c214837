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
import sys
import time
from typing import Any

from aiohttp import web

from . import graphs, logfmt, model, steps
from .engine import Engine, EngineSettings
from .faults import FaultPlan
from .native import NativeAPI
from .openai import OpenAIAPI
from .serve import LogSink, add_sim_flags, check_sim_flags, explain_text, require_key, run_server, sim_profile
from .sglang_metrics import SGLangMetrics
from .wire import ServerIdentity

SIM_VERSION = "0.5.23"
CONTEXT_LENGTH = 131072  # what the simulator's /v1/models has always reported as max_model_len
ENGINES = ("sglang", "vllm")


DESCRIPTION = """\
A simulated SGLang server with EAGLE-3 speculative decoding (no GPU, no model): SGLang's wire formats, logs and
metrics, driven by a documented timing model. Takes SGLang's launch flags, so one command template drives a
real server or the simulator; flags it does not simulate (such as --tp 8) are accepted and ignored with a
notice. --engine vllm: the same model behind vLLM's surface, taking `vllm serve`'s flags (specwatch sim
--engine vllm --help lists them)."""
EPILOG = """\
environment:
  SGLANG_LOG_MS  1 or true: log timestamps with milliseconds, as SGLang (default: off)"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specwatch sim", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", default="sglang", choices=ENGINES, help="which server to simulate (default: sglang)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=30000, help="port to serve on (default: 30000)")
    p.add_argument("--model-path", "--model", default="simulated/Llama-3.1-8B-Instruct",
                   help="the model name it reports (default: simulated/Llama-3.1-8B-Instruct)")
    p.add_argument("--served-model-name", default=None, help="the name /v1/models lists (default: the model path)")
    p.add_argument("--speculative-algorithm", default=None,
                   help="EAGLE, EAGLE3, NEXTN (= EAGLE) or NGRAM (default: none: plain decoding)")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", default=None,
                   help="reported in /server_info only (default: none)")
    p.add_argument("--speculative-num-steps", type=int, default=None,
                   help="draft steps per verify round (default: 3 with topk 1 and 4 draft tokens when none of the "
                        "three is given, as SGLang 0.5.23 chooses; else 5)")
    p.add_argument("--speculative-eagle-topk", type=int, default=None,
                   help="draft tree width; NGRAM: overwritten by --speculative-ngram-max-bfs-breadth (default: 1)")
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None,
                   help="tokens one verify round checks; at topk 1 always steps + 1, as SGLang forces it "
                        "(default: steps + 1; NGRAM 12, as SGLang 0.5.23)")
    p.add_argument("--speculative-ngram-min-bfs-breadth", type=int, default=1,
                   help="NGRAM: reported in /server_info only (default: 1)")
    p.add_argument("--speculative-ngram-max-bfs-breadth", type=int, default=model.NGRAM_MAX_BFS_BREADTH,
                   help="NGRAM: reported as speculative_eagle_topk, steps = draft tokens // this (SGLang 0.5.23); "
                        f"a tree wider than 1 is simulated as a chain of draft tokens - 1 "
                        f"(default: {model.NGRAM_MAX_BFS_BREADTH})")
    p.add_argument("--context-length", type=int, default=CONTEXT_LENGTH,
                   help=f"refuse a prompt of this many tokens or more, as SGLang (default: {CONTEXT_LENGTH} tokens)")
    p.add_argument("--speculative-adaptive", action="store_true",
                   help="SGLang 0.5.23's adaptive step count (EAGLE/EAGLE3, topk 1): per-batch-size slots "
                        "(default: off)")
    p.add_argument("--speculative-adaptive-config", default=None,
                   help='slots JSON file: {"1": {"candidate_steps": [3]}, "16": {"candidate_steps": [0]}} '
                        '(default: the built-in slots "1": [1,3,5,7], "8": [0,1,3], "32": [0,1], "64": [0])')
    add_graph_flags(p)
    add_serving_flags(p)
    add_sim_flags(p, logfmt.FAMILIES, logfmt.DEFAULT_FAMILY, "SGLang")
    return p


def add_graph_flags(p: argparse.ArgumentParser) -> None:
    """0.5.23's CUDA-graph flags (sim/graphs.py); --cuda-graph-bs, gone since 0.5.20, is refused as argparse does."""
    p.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None,
                   help="decode CUDA-graph batch sizes; SGLang 0.5.23's adaptive router pads a batch up to these, "
                        "and without them pads nothing (default: none)")
    p.add_argument("--cuda-graph-bs-prefill", type=int, nargs="+", default=None,
                   help="prefill CUDA-graph batch sizes, reported in /server_info (default: none)")
    p.add_argument("--cuda-graph-backend-decode", choices=["full", "breakable", "disabled"], default=None,
                   help="disabled: no decode CUDA graphs, as reported in /server_info (default: none: full)")
    p.add_argument("--disable-decode-cuda-graph", action="store_true",
                   help="no decode CUDA graphs, as reported in /server_info (default: off)")
    p.add_argument("--disable-cuda-graph", action="store_true",
                   help="no CUDA graphs; deprecated in SGLang 0.5.23, with its warning (default: off)")


def add_serving_flags(p: argparse.ArgumentParser) -> None:
    """How it logs, streams and serves: SGLang's own flags for them."""
    p.add_argument("--decode-log-interval", type=int, default=40,
                   help="log a Decode batch line every this many verify rounds (default: 40 rounds)")
    p.add_argument("--stream-interval", type=int, default=1,
                   help="send a stream chunk every this many tokens (default: 1 token)")
    p.add_argument("--ignore-continuous-usage-stats", action="store_true",
                   help="as SGLang before 0.5.4.post2: usage only in the final chunk of an OpenAI stream "
                        "(default: off)")
    p.add_argument("--enable-metrics", action="store_true",
                   help="serve /metrics with SGLang's sglang: names (default: off)")
    p.add_argument("--max-running-requests", type=int, default=None,
                   help="the batch cap (default: 48 requests with speculation, 256 without)")
    p.add_argument("--api-key", default=None,
                   help="answer 401 unless Authorization: Bearer <key> (as SGLang) (default: none: open)")
    p.add_argument("--ssl-certfile", default=None,
                   help="serve HTTPS with this certificate (PEM) (default: none: HTTP)")
    p.add_argument("--ssl-keyfile", default=None, help="the certificate's private key (PEM) (default: none)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"],
                   help="debug and info log the Decode batch lines (default: info)")


def pick_engine(argv: list[str]) -> tuple[str, list[str]]:
    """``--engine sglang|vllm`` (default sglang), taken out of the flags the flavour parses."""
    rest, engine, i = [], "sglang", 0
    while i < len(argv):
        a = argv[i]
        if a == "--engine" and i + 1 < len(argv):
            engine, i = argv[i + 1], i + 2
            continue
        if a.startswith("--engine="):
            engine = a.partition("=")[2]
        else:
            rest.append(a)
        i += 1
    if engine not in ENGINES:
        print(f"specwatch sim: --engine: {engine!r} is not one of {', '.join(ENGINES)}", file=sys.stderr)
        raise SystemExit(2)
    return engine, rest


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    for name in ("port", "decode_log_interval", "stream_interval", "context_length"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_running_requests is not None and args.max_running_requests < 1:
        parser.error("--max-running-requests must be >= 1")
    check_sim_flags(parser, args)
    try:
        args.spec = model.SpecConfig.from_flags(args.speculative_algorithm, args.speculative_num_steps,
                                                args.speculative_eagle_topk, args.speculative_num_draft_tokens,
                                                args.speculative_ngram_max_bfs_breadth)
    except ValueError as exc:
        parser.error(str(exc))
    for name in ("cuda_graph_bs_decode", "cuda_graph_bs_prefill"):
        if getattr(args, name) is not None and min(getattr(args, name)) < 1:
            parser.error(f"--{name.replace('_', '-')}: batch sizes must be >= 1")
    args.graphs = graphs.GraphFlags(
        bs_decode=tuple(args.cuda_graph_bs_decode) if args.cuda_graph_bs_decode else None,
        bs_prefill=tuple(args.cuda_graph_bs_prefill) if args.cuda_graph_bs_prefill else None,
        decode_off=args.disable_cuda_graph or args.disable_decode_cuda_graph
        or args.cuda_graph_backend_decode == "disabled",
        prefill_off=args.disable_cuda_graph, max_running=args.max_running_requests)
    args.adaptive, args.adaptive_off = adaptive_policy(args, parser)
    return args, unknown


def adaptive_policy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[steps.AdaptiveSteps | None,
                                                                                       str]:
    """``--speculative-adaptive`` as SGLang 0.5.23 takes it: (the policy, or None with the reason it falls back
    to static steps); a launch step that is no candidate refuses to start."""
    spec: model.SpecConfig = args.spec
    if not args.speculative_adaptive:
        return None, ""
    why = ""
    if not spec.enabled:
        why = "speculative decoding is not enabled"
    elif spec.algorithm not in steps.ADAPTIVE_ALGORITHMS:
        why = f"speculative_algorithm={spec.algorithm} is not EAGLE/EAGLE3"
    elif spec.topk != 1:
        why = f"speculative_eagle_topk={spec.topk} (only topk=1 is supported)"
    if why:
        return None, f"speculative_adaptive disabled: {why}. Falling back to static speculative params."
    try:
        return steps.AdaptiveSteps.build(steps.adaptive_slots(args.speculative_adaptive_config), spec.num_steps,
                                         graphs.router_sizes(args.graphs)), ""
    except steps.StepsConfigError as exc:
        parser.error(str(exc))


def server_args(args: argparse.Namespace, spec: model.SpecConfig, max_running: int) -> dict[str, Any]:
    return {
        "model_path": args.model_path, "served_model_name": args.served_model_name or args.model_path,
        "host": args.host, "port": args.port, "tp_size": 1, "dp_size": 1,
        "speculative_algorithm": spec.algorithm,
        "speculative_draft_model_path": args.speculative_draft_model_path,
        "speculative_num_steps": spec.server_steps if spec.enabled else None,
        "speculative_eagle_topk": spec.server_topk if spec.enabled else None,
        "speculative_num_draft_tokens": spec.num_draft_tokens if spec.enabled else None,
        "speculative_ngram_min_bfs_breadth": args.speculative_ngram_min_bfs_breadth,
        "speculative_ngram_max_bfs_breadth": args.speculative_ngram_max_bfs_breadth,
        "context_length": args.context_length,
        "decode_log_interval": args.decode_log_interval, "stream_interval": args.stream_interval,
        "enable_metrics": args.enable_metrics, "max_running_requests": max_running,
        "log_level": args.log_level, "speculative_adaptive": args.speculative_adaptive,
        "speculative_adaptive_config": args.speculative_adaptive_config, "disable_cuda_graph": args.disable_cuda_graph,
        **graphs.server_info(args.graphs, spec.enabled),
    }


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    spec: model.SpecConfig = args.spec
    return EngineSettings(
        profile=sim_profile(args), spec=spec, max_running_requests=args.max_running_requests or (
            48 if spec.enabled else 256),
        decode_log_interval=args.decode_log_interval, stream_interval=args.stream_interval,
        log_family=args.log_format, log_decode=args.log_level in ("debug", "info"),
        log_ms=os.environ.get("SGLANG_LOG_MS", "") in ("1", "true"), seed=args.seed, steps=args.adaptive,
    )


async def serve(args: argparse.Namespace, unknown: list[str]) -> int:
    spec: model.SpecConfig = args.spec
    family = args.log_format
    sink = LogSink(not args.quiet, args.log_file)

    def info(msg: str) -> None:
        sink(logfmt.prefix(family, time.time()) + msg)

    settings = engine_settings(args)
    max_running = settings.max_running_requests
    if args.disable_cuda_graph:  # DeprecatedStoreTrueAction (arg_groups/argparse_actions.py:95-100)
        info("\033[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. Use "
             "'--cuda-graph-backend-{decode,prefill}=disabled' instead.\033[0m")
    if unknown:
        info(f"specwatch sim: ignoring flags it does not simulate: {' '.join(unknown)}")
    if args.adaptive_off:
        info(args.adaptive_off)
    if spec.algorithm == "NGRAM" and args.speculative_num_draft_tokens is None:
        info(model.NGRAM_DRAFT_TOKENS_WARNING)
    engine = Engine(settings, sink)
    metrics = SGLangMetrics(args.served_model_name or args.model_path, engine) if args.enable_metrics else None
    if metrics is not None:
        engine.on_finish = metrics.on_finish
    ident = ServerIdentity(args.model_path, args.served_model_name or args.model_path, SIM_VERSION,
                           server_args(args, spec, max_running), not args.ignore_continuous_usage_stats,
                           context_length=args.context_length)
    info(f"server_args={ident.server_args}")
    if args.load_seconds > 0:
        info("Load weight begin. (simulated)")
        await asyncio.sleep(args.load_seconds)
        info("Load weight end. (simulated)")
    app = web.Application(client_max_size=8 * 1024 * 1024,
                          middlewares=[require_key(args.api_key, lambda path: path != "/health")])
    faults = FaultPlan()
    warn = info if args.log_level in ("debug", "info", "warning") else (lambda msg: None)
    NativeAPI(engine, ident, metrics.render if metrics else None, faults, warn).routes(app)
    OpenAIAPI(engine, ident, faults).routes(app)
    ready = ["Uvicorn running on {url} (Press CTRL+C to quit)", "The server is fired up and ready to roll!"]
    return await run_server(args, app, engine, faults, info, ready)


def main(argv: list[str]) -> int:
    engine, rest = pick_engine(argv)
    if engine == "vllm":
        from . import vllm_cli

        return vllm_cli.main(rest)
    args, unknown = parse(rest)
    if args.explain:
        print(explain_text(args, engine_settings(args)))
        return 0
    import uvloop

    try:
        return uvloop.run(serve(args, unknown))
    except OSError as exc:
        print(f"specwatch sim: cannot listen: {exc}", file=sys.stderr)
        return 1
