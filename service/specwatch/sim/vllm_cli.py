"""``specwatch sim --engine vllm``: the simulator's timing model behind vLLM's surface, taking ``vllm serve``'s
own flags for what it simulates.

    specwatch sim --engine vllm [serve] [MODEL] --port 8000 \\
        --speculative-config '{"method": "eagle3", "num_speculative_tokens": 3}' --max-num-seqs 64

``--speculative-config`` is vLLM's JSON: ``method``, ``num_speculative_tokens`` and the per-batch-size
schedule ``num_speculative_tokens_per_batch_size`` are simulated (``ngram`` and ``suffix`` propose by
lookup, so their drafting costs nothing; model-based methods pay the profile's draft step; under a schedule
each engine step drafts the K its batch size gets, as ``sim.steps`` describes), the keys that only tune a
real drafter are accepted and ignored, a key that is no ``SpeculativeConfig`` field is refused with vLLM's own
validation error, and any other field is refused with its name. The methods are 0.33.0's
(``medusa`` and ``mlp_speculator`` were dropped there). Stats lines every ``VLLM_LOG_STATS_INTERVAL``
seconds (default 10) unless ``--disable-log-stats``; ``--log-format`` picks the vLLM generation whose line
shapes to print.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from . import model, steps, vllm_logfmt
from .engine import Engine, EngineSettings
from .faults import FaultPlan
from .serve import LogSink, add_sim_flags, check_sim_flags, explain_text, require_key, run_server, sim_profile
from .vllm_api import VLLMAPI
from .vllm_metrics import VLLMMetrics
from .vllm_spec import SCHEDULE_KEY, SCHEDULE_METHODS, SpecConfigError, spec_from_config
from .wire import ServerIdentity

VLLM_VERSION = "0.33.0"
# `vllm serve`'s --max-num-seqs when not given (engine/arg_utils.py get_batch_defaults: 0.32.0 :2894-2985, 0.33.0
# :2940-3039): 256 on a GPU under 70 GiB, an A100 or a GB10; 1024 on an H100/H200 or anything of 160 GiB and
# more; 128 per CPU worker; doubled under --performance-mode throughput. The simulator takes the first.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_STATS_INTERVAL_S = 10.0


def stats_interval(env: dict[str, str]) -> float:
    """``VLLM_LOG_STATS_INTERVAL``: seconds; non-positive or unreadable values fall back to 10, as in vLLM."""
    try:
        v = float(env.get("VLLM_LOG_STATS_INTERVAL", DEFAULT_STATS_INTERVAL_S))
    except ValueError:
        return DEFAULT_STATS_INTERVAL_S
    return v if math.isfinite(v) and v > 0 else DEFAULT_STATS_INTERVAL_S


DESCRIPTION = """\
The simulator's timing model behind vLLM's surface, taking `vllm serve`'s own flags for what it simulates:

    specwatch sim --engine vllm [serve] [MODEL] --port 8000 \\
        --speculative-config '{"method": "eagle3", "num_speculative_tokens": 3}' --max-num-seqs 64

--speculative-config is vLLM's JSON: method, num_speculative_tokens and the per-batch-size schedule
num_speculative_tokens_per_batch_size are simulated (ngram and suffix propose by lookup, so their drafting
costs nothing; model-based methods pay the profile's draft step; under a schedule each engine step drafts the
K its batch size gets), the keys that only tune a real drafter are accepted and ignored, a key that is no
SpeculativeConfig field is refused with vLLM's own validation error, and any other field is refused with its
name. The methods are vLLM 0.33.0's (medusa and mlp_speculator were dropped there). Flags it does not
simulate are accepted and ignored with a notice."""
EPILOG = f"""\
environment:
  VLLM_LOG_STATS_INTERVAL  seconds between the stats lines, unless --disable-log-stats
                           (default: {DEFAULT_STATS_INTERVAL_S:g} s)"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specwatch sim --engine vllm", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", nargs="*", metavar="[serve] MODEL", help="as `vllm serve MODEL` (both optional)")
    p.add_argument("--model", default=None,
                   help="the model name it reports (default: MODEL, else simulated/Llama-3.1-8B-Instruct)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to serve on (default: 8000)")
    p.add_argument("--served-model-name", nargs="+", default=None,
                   help="the name /v1/models lists (default: the model)")
    p.add_argument("--speculative-config", "-sc", default=None,
                   help="vLLM's JSON speculative config (default: none: plain decoding)")
    p.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS,
                   help="the batch cap; `vllm serve` picks 128 per CPU worker and 1024 on an H100 or larger "
                        f"(default: {DEFAULT_MAX_NUM_SEQS} requests, what it picks on a GPU under 70 GiB or an A100)")
    p.add_argument("--max-model-len", type=int, default=4096,
                   help="the context length /v1/models reports (default: 4096 tokens)")
    p.add_argument("--disable-log-stats", action="store_true", help="no stats lines (default: off)")
    p.add_argument("--per-request-spec-decode-metrics", default="none", choices=["none", "summary", "detailed"],
                   help="summary or detailed: metrics.speculative_decoding in the usage chunk (default: none)")
    p.add_argument("--api-key", default=None,
                   help="answer 401 on /v1/… unless Authorization: Bearer <key> (as vLLM) (default: none: open)")
    p.add_argument("--ssl-certfile", default=None,
                   help="serve HTTPS with this certificate (PEM) (default: none: HTTP)")
    p.add_argument("--ssl-keyfile", default=None, help="the certificate's private key (PEM) (default: none)")
    add_sim_flags(p, vllm_logfmt.GENERATIONS, vllm_logfmt.DEFAULT_GENERATION, "vLLM")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    words = list(args.words)
    if words and words[0] == "serve":
        words.pop(0)
    args.model = args.model or (words.pop(0) if words else "simulated/Llama-3.1-8B-Instruct")
    unknown = words + unknown
    for name in ("port", "max_num_seqs", "max_model_len"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    check_sim_flags(parser, args)
    try:
        vs = spec_from_config(args.speculative_config)
        args.spec, args.draft_cost, args.ignored_keys = vs.spec, vs.draft_cost, vs.ignored
        args.replaced = vs.replaced
        args.schedule, args.schedule_dropped = None, ""
        if vs.schedule is not None and vs.spec.algorithm not in SCHEDULE_METHODS:  # vllm.py:1088-1108
            args.schedule_dropped = (f"Dynamic speculative decoding is not supported with the '{vs.spec.algorithm}' "
                                     "speculative method on Model Runner V1. Disabling num_speculative_tokens_per_batch"
                                     "_size and falling back to static num_speculative_tokens="
                                     f"{vs.spec.num_steps}.")
        elif vs.schedule is not None:
            args.schedule = steps.BatchSchedule(steps.batch_schedule(vs.schedule, args.max_num_seqs,
                                                                     vs.spec.num_steps))
    except (SpecConfigError, steps.StepsConfigError) as exc:
        parser.error(str(exc))
    args.name = (args.served_model_name or [args.model])[0]
    return args, unknown


def server_args(args: argparse.Namespace) -> dict[str, Any]:
    spec: model.SpecConfig = args.spec
    return {"model": args.model, "served_model_name": args.name, "host": args.host, "port": args.port,
            "max_num_seqs": args.max_num_seqs, "max_model_len": args.max_model_len,
            "speculative_config": {"method": spec.algorithm, "num_speculative_tokens": spec.num_steps,
                                   **({SCHEDULE_KEY: "set"} if args.schedule is not None else {})}
            if spec.enabled else None}


class StatsLogger:
    """vLLM's periodic stats block, from the engine's lifetime counters (differenced per interval)."""

    def __init__(self, engine: Engine, generation: str, interval_s: float, say: LogSink) -> None:
        self.engine, self.generation, self.interval_s, self.say = engine, generation, interval_s, say
        self.pid = os.getpid()
        self._prev = self._totals()
        self._prev_t = time.monotonic()
        self._prev_idle = True

    def _totals(self) -> tuple[int, ...]:
        e = self.engine
        return (e.totals.prompt_tokens, e.totals.generation_tokens, e.totals.drafts, e.totals.draft_tokens,
                e.totals.accepted, *e.totals.accepted_pos)

    def interval(self) -> vllm_logfmt.Interval:
        now, cur = time.monotonic(), self._totals()
        d = [c - p for c, p in zip(cur, self._prev, strict=True)]
        e = self.engine
        iv = vllm_logfmt.Interval(
            elapsed_s=now - self._prev_t, prompt_tokens=d[0], generation_tokens=d[1], running=len(e.running),
            waiting=len(e.waiting), kv_usage=e.used_tokens / e.s.profile.max_total_tokens, drafts=d[2],
            draft_tokens=d[3], accepted=d[4], accepted_pos=tuple(d[5:]))
        self._prev, self._prev_t = cur, now
        return iv

    def log_once(self) -> None:
        iv = self.interval()
        idle = vllm_logfmt.idle(iv)
        quiet, self._prev_idle = idle and self._prev_idle, idle
        if quiet:  # idle for two intervals in a row: vLLM logs the block at DEBUG
            return
        wall = time.time()
        self.say(vllm_logfmt.engine_line(self.generation, iv, wall, self.pid))
        e = self.engine
        life = vllm_logfmt.Lifetime(draft_tokens=e.totals.draft_tokens, accepted=e.totals.accepted,
                                    emitted=e.totals.accepted + e.totals.drafts, num_spec_tokens=e.s.spec.num_steps)
        line = vllm_logfmt.spec_line(self.generation, iv, life, wall, self.pid)
        if line is not None:
            self.say(line)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.log_once()


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    return EngineSettings(profile=sim_profile(args), spec=args.spec, max_running_requests=args.max_num_seqs,
                          log_decode=False, log_prefill=False, seed=args.seed, draft_cost=args.draft_cost,
                          steps=args.schedule)


async def serve(args: argparse.Namespace, unknown: list[str]) -> int:
    gen = args.log_format
    sink = LogSink(not args.quiet, args.log_file)
    pid = os.getpid()

    def info(msg: str, where: str = "api_server.py:1890", level: str = "INFO") -> None:
        sink(vllm_logfmt.prefix(gen, time.time(), pid, where, level) + msg)

    engine = Engine(engine_settings(args), sink)
    metrics = VLLMMetrics(args.name, engine)
    engine.on_finish, engine.on_abort, engine.on_step = metrics.on_finish, metrics.on_abort, metrics.on_step
    ident = ServerIdentity(args.model, args.name, VLLM_VERSION, server_args(args))
    info(f"vLLM API server version {VLLM_VERSION} (specwatch sim)")
    info(f"non-default args: {ident.server_args}", "utils.py:253")
    if unknown:
        info(f"specwatch sim: ignoring flags it does not simulate: {' '.join(unknown)}")
    if args.replaced:
        info(f"method `{args.replaced}` is deprecated and replaced with mtp.", "speculative.py:1247", "WARNING")
    if args.schedule_dropped:
        info(args.schedule_dropped, "vllm.py:1100", "WARNING")
    if args.ignored_keys:
        info(f"specwatch sim: ignoring speculative-config keys it does not simulate: {', '.join(args.ignored_keys)}")
    if args.load_seconds > 0:
        await asyncio.sleep(args.load_seconds)
    app = web.Application(client_max_size=8 * 1024 * 1024,
                          middlewares=[require_key(args.api_key, lambda path: path.startswith("/v1"))])
    faults = FaultPlan()
    VLLMAPI(engine, ident, metrics.render, faults, args.per_request_spec_decode_metrics,
            args.max_model_len).routes(app)
    tasks: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = ()
    if not args.disable_log_stats:
        tasks = (StatsLogger(engine, gen, stats_interval(dict(os.environ)), sink).run,)
    ready = [vllm_logfmt.prefix(gen, time.time(), pid, "entry.py:140") + "Starting vLLM server on {url}",
             "INFO:     Application startup complete."]
    return await run_server(args, app, engine, faults, sink, ready, tasks)


def main(argv: list[str]) -> int:
    args, unknown = parse(argv)
    if args.explain:
        print(explain_text(args, engine_settings(args)))
        return 0
    import uvloop

    try:
        return int(uvloop.run(serve(args, unknown)))
    except OSError as exc:
        print(f"specwatch sim: cannot listen: {exc}", file=sys.stderr)
        return 1
