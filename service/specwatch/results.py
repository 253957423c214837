"""Offline result records: what ``bench``, ``report`` and ``sweep`` compute, print and write. Imports only
``records``.

``BenchDoc`` is the ``bench --json`` document; a sweep is a ``SweepDoc`` of ``ConfigResult``s, each holding a
``LevelResult`` per concurrency. They are written and read by ``codec`` like every other record, so the one
rule for a derived number (a configuration's accept length, its cycle time, which configuration is plain
decoding) lives here, as a property, and every consumer (the sweep table, the report, the advisor, the
schedule) calls it. Times in seconds, rates in tokens per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

from .records import LoopLag, RequestRecord

SWEEP_VERSION = 2  # 1: 0.4.0 and before, no version field (same fields; read as they are)
ConfigStatus = Literal["ok", "failed"]


CheckName = Literal["achieved_rate", "repeat_spread", "prefix_cache", "server_queueing", "acceptance_identity",
                    "output_length", "synthetic_prompts"]
CHECKS: tuple[CheckName, ...] = get_args(CheckName)  # the closed set of ``specwatch_check_failed{check}``


@dataclass(frozen=True, slots=True)
class Check:
    """One honesty check on a result (``analysis.checks``). Three states, typed: passed (``ok``), failed (not
    ``ok``), and not measured (``ok`` with ``measured`` false: the data to decide was missing; ``detail`` says
    which, starting "not measured: ")."""

    name: CheckName
    ok: bool
    detail: str
    measured: bool = True

    @property
    def failed(self) -> bool:
        return not self.ok


@dataclass(frozen=True, slots=True)
class RecentProbes:
    """The daemon's last probes (``recorder.recent``), as its checks need them: the speculative target's
    measured probes, up to the last ``recorder.recent.KEEP``."""

    requests: int = 0
    ok_outputs: tuple[int, ...] = ()  # output tokens of the ok ones
    distinct_prompts: int = 0
    cached_tokens: int | None = None  # prompt tokens served from the prefix cache (None: no probe reported it)
    reported_prompt_tokens: int = 0  # prompt tokens of the probes that reported cached tokens
    cached_requests: int = 0  # probes with any cached prompt token
    random_prompts: int | None = None  # of the distinct prompts, those that read as random tokens (None: unknown)


@dataclass(frozen=True, slots=True)
class Spread:
    """HDR quantiles and mean of one metric over a run (seconds for latencies)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None


# A lag delays the stamp of a chunk's arrival (and of the send) by at most itself, so every reported interval
# (a TTFT, a chunk gap and the per-token ITL split from it) is off by at most the lag: relative to the shortest
# median interval the report gives, that is its error. Under this share the figures hold to their printed digits.
LAG_SHARE = 0.05
CPU_BOUND_SHARE = 0.8  # the process on a CPU this much of a lagging interval: its own work held the loop


@dataclass(frozen=True, slots=True)
class ClientLag(LoopLag):
    """``LoopLag`` as the results report it, with the requests its distorted spans touched and whether the lag
    moved a reported figure beyond ``bound_ms`` (``LAG_SHARE`` of the shortest median interval: the inter-chunk
    gap or the TTFT)."""

    requests_in_distorted_intervals: int = 0
    bound_ms: float | None = None
    distorts: bool = False

    @classmethod
    def of(cls, lag: LoopLag, records: Sequence[RequestRecord], shortest_s: float | None = None) -> ClientLag:
        hit = sum(1 for r in records if lag.overlaps(r.sent_ns, r.done_ns)) if lag.distorted_spans_ns else 0
        bound_ms = max(lag.threshold_ms, LAG_SHARE * shortest_s * 1e3) if shortest_s else lag.threshold_ms
        distorts = bool(lag.distorted_intervals) and (lag.worst_interval_p99_ms or 0.0) > bound_ms
        return cls(**{f.name: getattr(lag, f.name) for f in fields(LoopLag)}, requests_in_distorted_intervals=hit,
                   bound_ms=bound_ms, distorts=distorts)

    @property
    def cpu_bound(self) -> bool:
        return self.distorted_cpu_share is not None and self.distorted_cpu_share >= CPU_BOUND_SHARE


Phase = Literal["ramp_up", "steady", "drain", ""]  # a measured request against its run's steady window ("": failed)


@dataclass(frozen=True, slots=True)
class SteadyWindow:
    """A run's steady window (``analysis.steady_window``, which states the rule): the span in which all its
    streams were in flight, the figures of the requests that ran entirely inside it, and those it recorded apart.
    When ``steady`` is False the figures are None and ``reason`` says why (a window too short to be steady,
    or a result written before windows were measured)."""

    steady: bool = False
    reason: str = "not measured (a result written before steady windows)"
    streams: int | None = None  # the closed loop's streams (None: an open loop)
    window_s: float = 0.0  # from the moment all streams are first in flight to the first stream's last end
    window_share: float = 0.0  # of the measured phase (first send to last end)
    requests: int = 0  # ok requests that ran entirely inside the window
    ramp_up: int = 0  # ok requests sent before it opened, recorded apart
    drain: int = 0  # ok requests that ended after it closed, recorded apart
    mean_in_flight: float | None = None  # ok requests between send and end, time-weighted over the window
    server_running: float | None = None  # median running requests the server's /metrics gave (measured phase)
    tokens_per_second: float | None = None  # per stream: mean over the window's requests of tokens / (end - send)
    decode_tokens_per_second: float | None = None  # per stream, token-weighted, after each request's first chunk
    output_tokens_per_second: float | None = None  # aggregate: every token that arrived inside the window / window
    ttft_s: float | None = None  # mean over the window's requests, from the send


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One measured phase (a bench run, or one concurrency level of a sweep configuration)."""

    requests: int
    ok: int
    overall_tokens_per_second: float | None  # output tokens of ok requests / wall time
    avg_tokens_per_second: float | None  # the seed's per-request tok/s (output tokens / service time)
    min_tokens_per_second: float | None
    max_tokens_per_second: float | None
    decode_tokens_per_second: float | None  # token-weighted, after each request's first chunk
    latency_seconds: dict[str, Spread]
    tokens_per_chunk: Spread
    accept_length_client: float | None  # (completion - 1) / verify rounds, from the servers' per-request counts
    accept_length_server_per_request: float | None
    accept_length_server_lifetime: float | None
    verify_rounds: int
    position_acceptance: tuple[float, ...]  # index 0 = draft position 1
    outcomes: dict[str, int]
    out_of_range: dict[str, int]
    approximated_token_counts: int
    tokens_per_chunk_bound: int | None
    event_loop_lag: ClientLag = ClientLag()
    steady: SteadyWindow = SteadyWindow()  # the figures above are the whole measured phase's; these the window's
    accept_length_server_pooled: float | None = None  # the server's per-request figures pooled as the client's

    @property
    def stream_decode_tps(self) -> float | None:
        """Per-stream decode tok/s as sweep and tune compare configurations: the steady window's, where all the
        run's streams were in flight (at N streams, N streams' figure), else the whole measured phase's (one
        stream, an open loop, a window too short to be steady)."""
        return self._windowed(self.steady.decode_tokens_per_second, self.decode_tokens_per_second)

    @property
    def request_tps(self) -> float | None:
        """The seed's per-request tok/s (tokens over the whole request), by ``stream_decode_tps``'s rule."""
        return self._windowed(self.steady.tokens_per_second, self.avg_tokens_per_second)

    @property
    def aggregate_tps(self) -> float | None:
        """Every stream's output tok/s, by ``stream_decode_tps``'s rule."""
        return self._windowed(self.steady.output_tokens_per_second, self.overall_tokens_per_second)

    def _windowed(self, window: float | None, whole: float | None) -> float | None:
        return window if self.steady.steady and window else whole


@dataclass(frozen=True, slots=True)
class RunResult:
    """One measured request, as the results document lists it."""

    prompt_id: str
    domain: str
    outcome: str
    status: int | None
    error: str
    output_tokens: int
    prompt_tokens: int
    service_s: float
    e2e_s: float
    schedule_lag_s: float
    ttft_s: float | None
    chunks: int
    decode_tokens_per_second: float | None
    accept_length: float | None
    server_accept_length: float | None
    verify_ct: int | None
    tokens_exact: bool
    phase: Phase = ""  # where it ran against the steady window
    round: int = 0  # sweep --interleave: the round it ran in (0: the first, or not interleaved)

    @classmethod
    def of(cls, r: RequestRecord) -> RunResult:
        return cls(r.prompt_id, r.domain, r.outcome.value, r.http_status, r.error, r.output_tokens,
                   r.prompt_tokens, r.service_ns / 1e9, r.e2e_ns / 1e9, r.schedule_lag_ns / 1e9,
                   None if r.ttft_ns is None else r.ttft_ns / 1e9, len(r.chunk_ns), r.decode_tokens_per_second,
                   r.accept_length, r.spec.accept_length if r.spec else None,
                   r.spec.verify_ct if r.spec else None, r.tokens_exact)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def service_tokens_per_second(self) -> float | None:
        """``RequestRecord.service_tokens_per_second`` as written (seconds, not nanoseconds)."""
        return self.output_tokens / self.service_s if self.service_s > 0 else None


@dataclass(frozen=True, slots=True)
class DomainResult:
    ok: int
    decode_tokens_per_second: float | None
    accept_length: float | None


@dataclass(frozen=True, slots=True)
class ServeMetrics:
    """``vllm bench serve``'s result keys (vLLM 0.32), same names and units, computed as it computes them
    (``analysis.serve_metrics``), so a script written for its JSON reads ``bench --json``. Milliseconds where the
    name says ``_ms``, seconds for ``duration``, per second for throughputs; ``p99_*`` is its default
    ``--metric-percentiles``. Statistics over no value are 0.0, as vLLM writes them."""

    duration: float  # s: the measured phase, first request's intended start to the last request's end
    completed: int  # requests that streamed at least one token chunk and ended ok
    failed: int
    total_input_tokens: int  # prompt tokens of the completed requests
    total_output_tokens: int
    request_throughput: float  # completed / duration (aggregate)
    output_throughput: float  # output tokens / duration (aggregate over every stream)
    total_token_throughput: float | None  # (input + output tokens) / duration; None: a prompt count was missing
    mean_ttft_ms: float
    median_ttft_ms: float
    std_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float  # per request: (last chunk - first chunk) / (output tokens - 1), first token excluded
    median_tpot_ms: float
    std_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float  # vLLM's ITL: one value per gap between token chunks (a chunk may carry several tokens)
    median_itl_ms: float
    std_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float  # send to the last token chunk
    median_e2el_ms: float
    std_e2el_ms: float
    p99_e2el_ms: float
    num_prompts: int
    request_rate: float | str  # "inf": a closed loop (vLLM: every request at once)
    burstiness: float | str  # "inf": constant gaps
    max_concurrency: int | None


@dataclass(frozen=True, slots=True)
class BenchDoc(ServeMetrics):
    """The ``bench --json`` / ``report --json`` document: vllm bench serve's keys (``ServeMetrics``) flat at the
    top, then specwatch's own."""

    server_url: str
    api: str
    model: str
    server_info: dict[str, Any]  # the server's own answer, as it gave it
    config: dict[str, Any]  # the bench options, as given (``RunInfo.settings``)
    results: BenchResult
    by_domain: dict[str, DomainResult]
    runs: tuple[RunResult, ...]
    checks: tuple[Check, ...] = ()  # every CHECKS name once (``analysis.checks``); absent before 0.6: none

    def all_failed(self) -> str | None:
        """The reasons when every measured request failed, else None."""
        if self.runs and not any(r.ok for r in self.runs):
            return "; ".join(sorted({f"{r.outcome}: {r.error}" for r in self.runs})[:3])
        return None


LoadSource = Literal["log", "scrape", ""]


@dataclass(frozen=True, slots=True)
class LevelResult:
    """A configuration measured at one concurrency, with the load the server itself reported meanwhile."""

    results: BenchResult
    runs: tuple[RunResult, ...]
    server_load: float | None = None  # median running requests in its log lines or /metrics (None: no source)
    load_source: LoadSource = ""
    checks: tuple[Check, ...] = ()  # the level's bench checks (``analysis.checks``)

    def per_request_decode(self) -> list[float]:
        """Per-request decode tok/s of the ok runs: the steady window's where it has one (``stream_decode_tps``'s
        rule), else every measured one."""
        steady = self.results.steady.steady and self.results.steady.decode_tokens_per_second is not None
        return [r.decode_tokens_per_second for r in self.runs if r.ok and r.decode_tokens_per_second
                and (not steady or r.phase == "steady")]

    def per_round_decode(self) -> list[list[float]]:
        """The ok runs' decode tok/s by round (``RunResult.round``), every measured one: at one stream, the only
        load interleaving runs at, the rounds' idle gaps would make the steady window meaningless."""
        rounds: dict[int, list[float]] = {}
        for r in self.runs:
            if r.ok and r.decode_tokens_per_second:
                rounds.setdefault(r.round, []).append(r.decode_tokens_per_second)
        return [rounds[k] for k in sorted(rounds)]


@dataclass(frozen=True, slots=True)
class ConfigResult:
    """One configuration of a sweep. ``results``/``runs`` are its lowest concurrency's (or, through ``at``,
    the one a single-level table is printed for); ``by_concurrency`` holds every level measured."""

    label: str
    params: dict[str, str]
    started: float  # Unix seconds
    status: ConfigStatus = "failed"
    finished: float | None = None
    error: str = ""
    command: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    speculative_config: dict[str, Any] | None = None  # vLLM: the --speculative-config it ran (sweep's option)
    steps: int = 0  # draft steps (0: plain decoding)
    draft_tokens: int = 1  # verify width
    log_accept_length: float | None = None  # pooled from the server's log lines over the whole configuration
    log_position_acceptance: tuple[float, ...] = ()
    results: BenchResult | None = None
    runs: tuple[RunResult, ...] = ()
    by_concurrency: dict[int, LevelResult] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.results is not None

    @property
    def levels(self) -> list[int]:
        return sorted(self.by_concurrency)

    def at(self, c: int) -> ConfigResult:
        """This configuration as measured at concurrency ``c`` (itself when it has no such level)."""
        lvl = self.by_concurrency.get(c)
        return self if lvl is None else replace(self, results=lvl.results, runs=lvl.runs)

    @property
    def accept_length(self) -> float | None:
        """The one rule: the client's count (per-request verify rounds) where the server gave one; else, for a
        speculative configuration, the server log's pooled value; plain decoding accepts 1 token a round; None
        when a speculative configuration's accept length is known from neither."""
        client = self.results.accept_length_client if self.results else None
        if client is not None:
            return client
        return self.log_accept_length if self.steps else 1.0

    @property
    def position_acceptance(self) -> tuple[float, ...]:
        """SGLang: the probe's per-request histograms; vLLM: the per-position rates of its log lines."""
        return (self.results.position_acceptance if self.results else ()) or self.log_position_acceptance

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Per-stream decode tok/s (tokens after the first ÷ first → last token; the steady window's where the
        level has one: ``BenchResult.stream_decode_tps``)."""
        return self.results.stream_decode_tps if self.results else None

    @property
    def cycle_s(self) -> float | None:
        """One verify round: accept length ÷ per-stream decode tok/s."""
        al, tps = self.accept_length, self.decode_tokens_per_second
        return al / tps if al is not None and tps else None

    @property
    def tokens_per_second(self) -> float | None:
        return self.results.overall_tokens_per_second if self.results else None

    def stream_tps(self, c: int) -> float | None:
        """Per-stream decode tok/s at concurrency ``c`` (None where not measured)."""
        lvl = self.by_concurrency.get(c)
        return lvl.results.stream_decode_tps if lvl is not None else None

    def per_request(self, c: int) -> list[float]:
        """Per-request decode tok/s of the ok runs at concurrency ``c``."""
        lvl = self.by_concurrency.get(c)
        return lvl.per_request_decode() if lvl is not None else []

    def per_round(self, c: int) -> list[list[float]]:
        """``per_request``'s figures grouped by --interleave round (one group when not interleaved)."""
        lvl = self.by_concurrency.get(c)
        return lvl.per_round_decode() if lvl is not None else []

    def per_request_service(self) -> list[float]:
        """The seed's per-request tok/s of the ok runs."""
        return [t for r in self.runs if r.ok and (t := r.service_tokens_per_second)]


def plain_of(configs: Sequence[ConfigResult]) -> ConfigResult | None:
    """The plain-decoding configuration: the launched baseline, or (``--targets``) a finished one that does not
    speculate."""
    ok = [c for c in configs if c.ok]
    return next((c for c in ok if c.label == "baseline"), None) or next((c for c in ok if c.steps == 0), None)


def levels(configs: Sequence[ConfigResult]) -> list[int]:
    """Every concurrency some finished configuration was measured at."""
    return sorted({c for r in configs if r.ok for c in r.by_concurrency})


@dataclass(frozen=True, slots=True)
class VersusPlain:
    """A configuration against plain decoding at one load (``analysis.comparisons``): per-stream decode tok/s,
    the ratio of the per-request means less one, its 95% interval and what it says."""

    label: str
    concurrency: int
    decode_tokens_per_second: float
    plain_decode_tokens_per_second: float | None
    ratio: float | None
    low: float | None
    high: float | None
    outcome: str  # faster | slower | a tie | "" (plain decoding itself, or none measured)
    rounds: int = 0  # > 0: the interval is paired over this many --interleave rounds; 0: Welch's over the requests


@dataclass(frozen=True, slots=True)
class LoadPick:
    """A load's answer: the fastest configuration, the pick, and the sentence every output prints."""

    concurrency: int
    pick: str
    fastest: str
    steps: int
    sentence: str


@dataclass(frozen=True, slots=True)
class SweepDoc:
    """``sweep.json``. ``winner`` is the pick at the lowest load; ``comparisons`` and ``picks`` are what the
    terminal, the CSV and the report print."""

    configurations: tuple[ConfigResult, ...]
    winner: str | None
    baseline_tokens_per_second: float | None
    version: int = SWEEP_VERSION
    comparisons: tuple[VersusPlain, ...] = ()
    picks: tuple[LoadPick, ...] = ()
    checks: tuple[Check, ...] = ()  # per check, over every configuration's levels (``analysis.checks.merged``)
