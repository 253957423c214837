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
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from . import model, steps, vllm_logfmt
from .engine import Engine, EngineSettings
from .faults import FaultPlan
from .serve import LogSink, add_sim_flags, check_sim_flags, explain_text, require_key, run_server, sim_profile
from .vllm_api import VLLMAPI
from .vllm_metrics import VLLMMetrics
from .wire import ServerIdentity

VLLM_VERSION = "0.33.0"
# method -> draft cost: lookup proposers run no model
# (0.33.0's methods; medusa and mlp_speculator were dropped in 0.33.0)
METHODS = {"ngram": 0.0, "ngram_gpu": 0.0, "suffix": 0.0, "eagle": 1.0, "eagle3": 1.0, "mtp": 1.0,
           "draft_model": 1.0, "dflash": 1.0, "dspark": 1.0}
# the methods 0.33.0 keeps a per-batch-size schedule for on Model Runner V1 (config/vllm.py); others drop it
SCHEDULE_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
SIMULATED_KEYS = ("method", "num_speculative_tokens", SCHEDULE_KEY)
# SpeculativeConfig's fields (vllm/config/speculative.py: 0.32.0 :386-610, 0.33.0 :407-660). It is a pydantic
# dataclass with extra="forbid" (@config, config/utils.py:70-71): any other key stops the server with a
# validation error
FIELDS_0_32 = frozenset({
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
    "tensor_parallel_size", "quantization", "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len",
    "revision", "code_revision", "index_share_for_mtp_iteration", "disable_padded_drafter_batch",
    "disable_eagle_block_drop", "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
    "prompt_lookup_min", "parallel_drafting", "target_model_config", "target_parallel_config", SCHEDULE_KEY,
    "draft_model_config", "draft_parallel_config", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "draft_load_config", "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk"})
FIELDS_NEW_IN_0_33 = frozenset({"disable_lookahead_block_hashes", "draft_lm_head_quantization", "xpress_topc",
                                "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"})
SPEC_FIELDS = FIELDS_0_32 | FIELDS_NEW_IN_0_33
# fields that tune a real drafter but not the simulated timing: accepted, ignored with a notice
IGNORED_KEYS = frozenset({
    "model", "prompt_lookup_max", "prompt_lookup_min", "draft_tensor_parallel_size", "max_model_len",
    "quantization", "revision", "code_revision", "disable_padded_drafter_batch", "rejection_sample_method",
    "draft_sample_method", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "enforce_eager"})
# `vllm serve`'s --max-num-seqs when not given (engine/arg_utils.py get_batch_defaults: 0.32.0 :2894-2985, 0.33.0
# :2940-3039): 256 on a GPU under 70 GiB, an A100 or a GB10; 1024 on an H100/H200 or anything of 160 GiB and
# more; 128 per CPU worker; doubled under --performance-mode throughput. The simulator takes the first.
DEFAULT_MAX_NUM_SEQS = 256
MAX_SPEC_TOKENS = 32
DEFAULT_STATS_INTERVAL_S = 10.0


class SpecConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class VLLMSpec:
    spec: model.SpecConfig  # its algorithm: the method vLLM settles on (``vllm_method``)
    draft_cost: float
    ignored: list[str]
    schedule: object = None  # num_speculative_tokens_per_batch_size as given (validated against max_num_seqs)
    replaced: str = ""  # a *_mtp method given, which vLLM replaces with mtp (and says so)


def vllm_method(method: str | None, model_name: object) -> str:
    """The method vLLM runs, as ``SpeculativeConfig.__post_init__`` settles it (0.33.0 config/speculative.py:
    1236-1250, 1432-1473): none given is ``custom_class`` for a dotted import path, ``ngram`` for the model
    ``ngram``/``[ngram]``, else ``draft_model``; every ``*_mtp`` is ``mtp``; a model-based method other than
    eagle, eagle3, dflash and dspark takes the one its draft model's name says."""
    name = model_name if isinstance(model_name, str) else None
    if method is None:
        parts = (name or "").split(".")
        if (name is not None and "/" not in name and not name.startswith(("http://", "https://", "file://"))
                and len(parts) >= 2 and all(p.isidentifier() for p in parts)):
            return "custom_class"
        method = "ngram" if name in ("ngram", "[ngram]") else "draft_model"
    method = "mtp" if method.endswith("_mtp") else "ngram" if method == "[ngram]" else method
    if name is None or method in ("ngram", "ngram_gpu", "suffix", "eagle", "eagle3", "dflash", "dspark"):
        return method
    lowered = name.lower()
    return next((m for word, m in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"),
                                   ("dspark", "dspark")) if word in lowered), method)


def spec_from_config(raw: str | None) -> VLLMSpec:
    """vLLM's ``--speculative-config`` JSON → the simulated config, its draft cost, the ignored keys and the
    per-batch-size schedule."""
    if raw is None:
        return VLLMSpec(model.SpecConfig(), 1.0, [])
    try:
        cfg = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SpecConfigError(f"--speculative-config: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise SpecConfigError("--speculative-config: must be a JSON object")
    cfg = {k.replace("-", "_"): v for k, v in cfg.items()}  # as vLLM does (engine/arg_utils.py:2086-2088)
    extra = [k for k in cfg if k not in SPEC_FIELDS]
    if extra:
        raise SpecConfigError("--speculative-config: " + validation_error(extra, cfg))
    unknown = sorted(k for k in cfg if k not in SIMULATED_KEYS and k not in IGNORED_KEYS)
    if unknown:
        raise SpecConfigError(f"--speculative-config: key {unknown[0]!r} cannot be simulated (simulated: "
                              f"{', '.join(SIMULATED_KEYS)}; accepted and ignored: {', '.join(sorted(IGNORED_KEYS))})")
    given = cfg.get("method")
    if (given is None and not cfg.get("model")) or (given is not None and not isinstance(given, str)):
        raise SpecConfigError("--speculative-config: key 'method' is required (e.g. \"ngram\", \"eagle3\", \"mtp\")")
    if isinstance(given, str) and ("mtp" if given.endswith("_mtp") else given) not in METHODS:
        raise SpecConfigError(f"--speculative-config: key 'method': {given!r} is not one of "
                              f"{', '.join(sorted(METHODS))} (or a *_mtp method)")
    method = vllm_method(given, cfg.get("model"))
    if method not in METHODS:
        raise SpecConfigError(f"--speculative-config: a {method} proposer cannot be simulated")
    k = cfg.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPEC_TOKENS:
        raise SpecConfigError(f"--speculative-config: key 'num_speculative_tokens' must be an integer from 1 to "
                              f"{MAX_SPEC_TOKENS}, got {k!r}")
    ignored = sorted(key for key in cfg if key in IGNORED_KEYS)
    replaced = given if isinstance(given, str) and given.endswith("_mtp") else ""
    return VLLMSpec(model.SpecConfig(algorithm=method, num_steps=k, topk=1, num_draft_tokens=k + 1), METHODS[method],
                    ignored, cfg.get(SCHEDULE_KEY), replaced)


def validation_error(extra: list[str], cfg: dict[str, Any]) -> str:
    """pydantic's error for keyword arguments a forbid-extra dataclass has no field for, as vLLM stops with it."""
    n = len(extra)
    lines = [f"{n} validation error{'s' if n > 1 else ''} for SpeculativeConfig"]
    for k in extra:
        lines += [k, f"  Unexpected keyword argument [type=unexpected_keyword_argument, input_value={cfg[k]!r}, "
                     f"input_type={type(cfg[k]).__name__}]"]
    return "\n".join(lines)


def stats_interval(env: dict[str, str]) -> float:
    """``VLLM_LOG_STATS_INTERVAL``: seconds; non-positive or unreadable values fall back to 10, as in vLLM."""
    try:
        v = float(env.get("VLLM_LOG_STATS_INTERVAL", DEFAULT_STATS_INTERVAL_S))
    except ValueError:
        return DEFAULT_STATS_INTERVAL_S
    return v if math.isfinite(v) and v > 0 else DEFAULT_STATS_INTERVAL_S


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specwatch sim --engine vllm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", nargs="*", metavar="[serve] MODEL", help="as `vllm serve MODEL` (both optional)")
    p.add_argument("--model", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--speculative-config", "-sc", default=None, help="vLLM's JSON speculative config")
    p.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS,
                   help=f"the batch cap (default {DEFAULT_MAX_NUM_SEQS}: what `vllm serve` picks on a GPU under 70 GiB "
                        "or an A100; it picks 128 per CPU worker and 1024 on an H100 or larger)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--per-request-spec-decode-metrics", default="none", choices=["none", "summary", "detailed"])
    p.add_argument("--api-key", default=None, help="answer 401 on /v1/… unless Authorization: Bearer <key> (as vLLM)")
    p.add_argument("--ssl-certfile", default=None)
    p.add_argument("--ssl-keyfile", default=None)
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


async def serve(args: argparse.Namespace, unknown: list[str]) -> int:
    gen = args.log_format
    sink = LogSink(not args.quiet, args.log_file)
    pid = os.getpid()

    def info(msg: str, where: str = "api_server.py:1890", level: str = "INFO") -> None:
        sink(vllm_logfmt.prefix(gen, time.time(), pid, where, level) + msg)

    settings = EngineSettings(profile=sim_profile(args), spec=args.spec,
                              max_running_requests=args.max_num_seqs, log_decode=False, log_prefill=False,
                              seed=args.seed, draft_cost=args.draft_cost, steps=args.schedule)
    engine = Engine(settings, sink)
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
        print(explain_text(args, args.spec, args.draft_cost))
        return 0
    import uvloop

    try:
        return int(uvloop.run(serve(args, unknown)))
    except OSError as exc:
        print(f"specwatch sim: cannot listen: {exc}", file=sys.stderr)
        return 1
