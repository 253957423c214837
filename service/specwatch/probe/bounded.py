"""A bounded benchmark run: detection, the load (or its workers) beside the event-loop lag monitor, the
seed script's per-request lines, and what the run was pointed at. Probe stage: ``BenchSpec`` in, ``RunInfo``
and the records out; ``bench`` and ``sweep`` analyse them (``analysis.bench_results``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..errors import AuthError, ConfigError, ResponseTooLarge, TargetError
from ..options import default
from ..records import ApiChoice, LoopLag, RequestRecord, RunInfo, Schedule
from ..server.scrape import QUEUED_GAUGES, running_from_text
from . import lag as lag_mod
from . import prompts as prompt_sets
from .client import Access, Timeouts, get_text, make_session
from .detect import UNREACHABLE, ServerInfo, detect, lifetime_accept_length, speculation_of
from .runner import ProbeSetup, run_probes
from .stream import GenParams, Target
from .traffic import TrafficPlan


@dataclass(frozen=True, slots=True)
class BenchSpec:
    server_url: str = default("server_url")
    api: ApiChoice = default("api")
    max_tokens: int = default("max_tokens")
    num_runs: int = default("num_runs")
    warmup: int = default("warmup")
    concurrency: int = default("concurrency")
    rate_per_s: float | None = default("rate_per_s")
    request_rate: float | None = default("request_rate")  # vLLM's: inf = all at once
    burstiness: float | None = default("burstiness")
    max_concurrency: int | None = default("max_concurrency")
    poisson: bool = default("poisson")
    max_in_flight: int = default("max_in_flight")
    prompts: str | None = default("prompts")
    temperature: float = default("temperature")
    ignore_eos: bool = default("ignore_eos")
    connect_timeout_s: float = default("connect_timeout_s")
    read_timeout_s: float = default("read_timeout_s")
    request_timeout_s: float = default("request_timeout_s")
    api_key: str | None = default("api_key")  # from SPECWATCH_API_KEY or --api-key-file, never a flag
    api_key_file: str | None = default("api_key_file")
    ca_file: str | None = default("ca_file")
    seed: int = default("seed")
    workers: int = default("workers")
    tokenizer: str | None = default("tokenizer")
    json: str | None = default("json")
    records: str | None = default("records")
    hlog: str | None = default("hlog")
    verbose: bool = default("verbose")

    def __post_init__(self) -> None:
        """vLLM's traffic flags beside ours: one meaning each, or a message naming both."""
        if self.rate_per_s is not None and self.request_rate is not None:
            raise ConfigError("rate_per_s and request_rate are alternatives (--request-rate is vllm bench serve's "
                              "name): give at most one")
        if self.burstiness is not None and self.rate is None:
            raise ConfigError("burstiness: needs a finite request rate (--request-rate or --rate-per-s)")
        if self.burstiness is not None and self.poisson:
            raise ConfigError("burstiness and poisson are alternatives (--burstiness 1 is Poisson)")

    @property
    def rate(self) -> float | None:
        """The open loop's requests per second; None: a closed loop."""
        r = self.rate_per_s if self.rate_per_s is not None else self.request_rate
        return None if r is None or math.isinf(r) else r

    @property
    def arrivals_shape(self) -> float | None:
        """The gamma arrivals' shape: --burstiness, or 1 (Poisson) under vLLM's --request-rate, as vLLM does."""
        if self.burstiness is not None:
            return self.burstiness
        return 1.0 if self.request_rate is not None and self.rate is not None else None

    @property
    def plan(self) -> TrafficPlan:
        everyone = self.request_rate is not None and math.isinf(self.request_rate)  # vLLM: all sent at time 0
        streams = self.max_concurrency or (self.num_runs if everyone else self.concurrency)
        return TrafficPlan(concurrency=streams, rate_per_s=self.rate, poisson=self.poisson,
                           burstiness=self.arrivals_shape, max_in_flight=self.max_concurrency or self.max_in_flight,
                           warmup=self.warmup, requests=self.num_runs, seed=self.seed)

    @property
    def schedule(self) -> Schedule:
        """The arrivals as vllm bench serve's results name them."""
        plan = self.plan
        if plan.rate_per_s is None:
            return Schedule(self.num_runs, "inf", 1.0, plan.concurrency)
        shape = plan.burstiness if plan.burstiness is not None else 1.0 if plan.poisson else "inf"
        return Schedule(self.num_runs, plan.rate_per_s, shape, plan.max_in_flight)

    def __repr__(self) -> str:
        return f"BenchSpec(server_url={self.server_url!r}, api_key={'<set>' if self.api_key else None}, …)"

    @property
    def settings(self) -> dict[str, Any]:
        """The options that shape the measurement (not where its outputs go, never a secret)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("json", "records", "hlog", "api_key", "api_key_file", "verbose")}

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts(self.connect_timeout_s, self.read_timeout_s, self.request_timeout_s)

    @property
    def access(self) -> Access:
        return Access(self.api_key, self.ca_file)


DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(BenchSpec)}


class Printer:
    """Keeps the records as they arrive and reports them: the seed script's per-request lines (``say``, every
    measured one only with ``verbose``) and each record to ``progress`` (bench's progress bar) when given."""

    def __init__(self, plan: TrafficPlan, say: Callable[[str], None], verbose: bool = True,
                 progress: Callable[[RequestRecord], None] | None = None) -> None:
        self.plan = plan
        self.say = say
        self.verbose = verbose
        self.progress = progress
        self.records: list[RequestRecord] = []
        self.measuring = asyncio.Event()  # set once the warm-up requests are done
        if plan.warmup == 0:
            self.measuring.set()

    def __call__(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if rec.warmup:
            n = sum(r.warmup for r in self.records)
            if n >= self.plan.warmup:
                self.measuring.set()
            state = f"done ({rec.output_tokens} tokens)" if rec.ok else f"failed ({rec.outcome}: {rec.error})"
            self.say(f"  Warmup {n}/{self.plan.warmup} {state}" + ("\n" if n == self.plan.warmup else ""))
            return
        if self.verbose:
            self.say(run_line(len(self.records) - self.plan.warmup, self.plan.requests, rec))
        if self.progress is not None:
            self.progress(rec)


def run_line(i: int, n: int | None, rec: RequestRecord) -> str:
    """The seed script's line for measured request ``i`` of ``n``."""
    head = f"  Run {i}/{n}:"
    tps = rec.service_tokens_per_second
    if rec.ok and tps is not None:
        return (f"{head} {rec.output_tokens} tokens in {rec.service_ns / 1e9:.2f}s = {tps:.1f} tok/s "
                f"(prompt: {rec.prompt_tokens} toks)")
    return f"{head} failed ({rec.outcome}: {rec.error})"


async def collect(spec: BenchSpec, say: Callable[[str], None] = print,
                  progress: Callable[[RequestRecord], None] | None = None) -> tuple[RunInfo, list[RequestRecord]]:
    """Run the benchmark, printing the seed script's lines (with ``progress``, bench's progress bar, the
    per-request ones only under ``--verbose``). ``TargetError`` when ``--api auto`` cannot
    reach or recognise the server, ``AuthError`` when it refuses the key, ``WorkerError`` when a worker died."""
    plist = prompt_sets.read(spec.prompts) if spec.prompts else prompt_sets.builtin()
    plan = spec.plan
    params = GenParams(max_tokens=spec.max_tokens, temperature=spec.temperature, ignore_eos=spec.ignore_eos)
    printer = Printer(plan, say, spec.verbose or progress is None, progress)
    async with make_session(spec.timeouts, spec.access) as session:
        try:
            info = await detect(session, spec.server_url, spec.api)
        except AuthError:
            raise
        except aiohttp.ClientConnectorError as exc:  # refused (or no route): each request will record it
            info = ServerInfo("completions" if spec.api == "auto" else spec.api)
            if spec.api == "auto":
                say(f"cannot detect the API of {spec.server_url} ({exc}): probing /v1/completions (served by "
                    "SGLang and vLLM alike), so every request records its outcome")
        except (*UNREACHABLE, TargetError) as exc:
            if spec.api == "auto":
                raise TargetError(f"cannot detect the API of {spec.server_url}: {exc or type(exc).__name__}. "
                                  "Start the server or pass --api.") from None
            info = ServerInfo(spec.api)
        mode = (f"rate={plan.rate_per_s}/s{arrivals(plan)}, max in flight {plan.max_in_flight}"
                if plan.rate_per_s is not None else f"concurrency={plan.concurrency}")
        say(f"Benchmarking {spec.server_url} (api {info.api}, {mode})")
        say(f"  max_tokens={spec.max_tokens}, num_runs={spec.num_runs}, warmup={spec.warmup}\n")
        setup = ProbeSetup(plan, [Target("spec", spec.server_url, info.api, info.model)], plist, params,
                           spec.timeouts, spec.access, spec.workers, spec.tokenizer is not None)
        done = asyncio.Event()
        sampler = asyncio.create_task(running_requests(session, spec.server_url, done,
                                                         printer.measuring))
        try:
            intervals = await run_probes(setup, printer, asyncio.Event(), lag_mod.LagMonitor(interval_s=1.0))
        finally:
            done.set()
        running, queued = await sampler
        lag = lag_mod.loop_lag(intervals, workers=spec.workers) if intervals else LoopLag()
        lifetime = await lifetime_accept_length(session, info, spec.server_url)
    first_ns = min((r.sent_ns for r in printer.records), default=time.monotonic_ns())
    steps, draft_tokens = speculation_of(info.engine, info.info) if info.info else (None, None)
    run = RunInfo(server_url=spec.server_url, api=info.api, model=info.model, server_info=info.info,
                  steps=steps, draft_tokens=draft_tokens,
                  lifetime_accept_length=lifetime, settings=spec.settings,
                  start_wall_s=time.time() - (time.monotonic_ns() - first_ns) / 1e9, loop_lag=lag,
                  server_running=tuple(running), schedule=spec.schedule, server_queued=tuple(queued))
    return run, printer.records


def arrivals(plan: TrafficPlan) -> str:
    if plan.burstiness is not None:
        return " poisson" if plan.burstiness == 1 else f" gamma (burstiness {plan.burstiness:g})"
    return " poisson" if plan.poisson else ""


LOAD_EVERY_S = 0.5  # the mean gap between two scrapes; each gap is drawn from 0.5x to 1.5x of it
MAX_LOAD_SAMPLES = 100_000


async def running_requests(session: aiohttp.ClientSession, url: str, done: asyncio.Event,
                           measuring: asyncio.Event) -> tuple[list[int], list[int]]:
    """The server's running requests from its own ``/metrics`` (SGLang with ``--enable-metrics``, vLLM), every
    ``LOAD_EVERY_S`` until ``done``, busy moments after the warm-up only (``measuring``): what load a run really
    put on the server. The sequential warm-up's ones are not its load: a 16-stream level of a real sweep lasts a
    few seconds, and two warm-up samples made its median 8.5 (CI). A server without metrics (or one that
    refuses them) gives none; a failed scrape is skipped, never raised. Second: the waiting requests at every
    sample, for the server_queueing check. The gaps are random: at a fixed rate of 4 a second, a scrape every
    0.5 s woke with the sender and always found the request just sent waiting for the running decode round to
    end (5 of 9 samples: a queue that was not there, CI)."""
    rng = random.Random(0)
    out: list[int] = []
    queued: list[int] = []
    waits = [asyncio.ensure_future(measuring.wait()), asyncio.ensure_future(done.wait())]
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)  # no scrape in the warm-up
    for w in pending:
        w.cancel()
    while not done.is_set() and len(out) < MAX_LOAD_SAMPLES:
        try:
            status, text = await get_text(session, url + "/metrics")
        except (*UNREACHABLE, ResponseTooLarge, TargetError):
            status, text = 0, ""
        if status in (401, 403, 404):
            break  # no metrics here: none will come
        out += [n for n in running_from_text(text) if n] if status == 200 else []
        queued += running_from_text(text, QUEUED_GAUGES) if status == 200 else []
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), LOAD_EVERY_S * rng.uniform(0.5, 1.5))
    return out, queued
