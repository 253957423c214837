"""Records and closed label sets: the only types that cross module lines. Imports nothing from the project.

Flow: sources (probe client, log tail, scrape) produce ``RequestRecord`` and ``ServerSample``; the recorder
consumes them and, on its tick, describes each window as ``ProbeWindow`` / ``ServerWindow``; analysis and
exporters read those. Times are monotonic nanoseconds unless a name says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, get_args


class Outcome(StrEnum):
    OK = "ok"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    STREAM_ERROR = "stream_error"
    CANCELLED = "cancelled"


# Closed sets: every Prometheus label value and JSON key drawn from one of these (mypy checks the literals).
Api = Literal["sglang", "completions", "chat"]
TargetName = Literal["spec", "baseline"]
LogResult = Literal["parsed", "ignored", "malformed"]  # every log line gets exactly one
SampleSource = Literal["sglang_decode", "sglang_prefill", "vllm_spec", "vllm_engine", "scrape"]
Channel = Literal["log", "scrape"]  # how a server sample reached us (the ``source`` label of server gauges)
ApiChoice = Literal["auto", "sglang", "completions", "chat"]  # --api: auto detects
BaselineStatus = Literal["measured", "interpolated", "held", "extrapolated", "outside", "ab", "none"]
ServerKind = Literal["sglang", "vllm", "openai"]  # what detection found (openai: any other OpenAI server)
OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)
APIS: tuple[Api, ...] = get_args(Api)
TARGETS: tuple[TargetName, ...] = get_args(TargetName)
LOG_RESULTS: tuple[LogResult, ...] = get_args(LogResult)
SKIP_REASONS = ("too_long", "binary", "partial")  # lines dropped before parsing
SAMPLE_SOURCES: tuple[SampleSource, ...] = get_args(SampleSource)
SAMPLE_CHANNELS: tuple[Channel, ...] = get_args(Channel)
LATENCY_METRICS = ("ttft", "itl", "inter_chunk", "e2e", "service", "schedule_lag")
QUANTILES = (0.5, 0.9, 0.99)
MAX_ACCEPT_LENGTH = 64  # no draft is longer: an accept length, a draft position or k beyond it is garbage


def vllm_accept_length(accepted_tokens: float, drafts: float) -> float | None:
    """vLLM's mean acceptance length: 1 + accepted draft tokens / drafts (None before the first draft)."""
    return 1.0 + accepted_tokens / drafts if drafts > 0 else None


@dataclass(frozen=True, slots=True)
class SpecStats:
    """Speculative fields the server reported for one request (SGLang's final ``meta_info``)."""

    verify_ct: int  # SGLang's spec_verify_ct; vLLM's num_spec_steps (steps that carried a draft)
    accept_length: float | None = None  # the server's own (SGLang completion / verify_ct; vLLM's mean)
    histogram: tuple[int, ...] = ()  # verify rounds by number of accepted drafts (index 0 = none accepted)
    accepted_drafts: int | None = None  # vLLM's num_accepted_draft_tokens (SGLang: every round verifies)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    api: Api
    target: TargetName
    prompt_id: str
    domain: str
    warmup: bool
    intended_ns: int  # when the schedule said the request should start
    sent_ns: int  # when it was actually handed to the connection
    done_ns: int
    chunk_ns: Sequence[int]  # arrival of every chunk that carried tokens (the client's array('q'), no copy)
    chunk_tokens: Sequence[int]  # tokens in each such chunk
    tokens_exact: bool  # chunk_tokens came from server counts, not apportioned from a final total
    prompt_tokens: int
    output_tokens: int
    outcome: Outcome
    http_status: int | None = None  # when a response arrived
    error: str = ""
    spec: SpecStats | None = None
    server_load: float | None = None  # running requests the server reported while it ran (None: unknown)
    probe_concurrency: int | None = None  # this load's probes in flight when it was sent, itself included
    chunk_tokens_max: int | None = None  # apportioned counts (not tokens_exact): each chunk held 1..this
    chunk_texts: tuple[str, ...] = ()  # with --tokenizer and apportioned counts: for an exact split, then cleared
    cached_tokens: int | None = None  # prompt tokens served from the server's prefix cache (None: not reported)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def ttft_ns(self) -> int | None:
        """From the actual send to the first token-bearing chunk (service time to first token)."""
        return self.chunk_ns[0] - self.sent_ns if self.chunk_ns else None

    @property
    def e2e_ns(self) -> int:
        """From the *intended* start: a stalled client or server cannot hide behind the schedule."""
        return self.done_ns - self.intended_ns

    @property
    def service_ns(self) -> int:
        return self.done_ns - self.sent_ns

    @property
    def service_tokens_per_second(self) -> float | None:
        """The seed script's per-request tok/s: output tokens / (done - sent)."""
        return self.output_tokens * 1e9 / self.service_ns if self.service_ns > 0 else None

    @property
    def schedule_lag_ns(self) -> int:
        return max(0, self.sent_ns - self.intended_ns)

    @property
    def decode_ns(self) -> int:
        return self.chunk_ns[-1] - self.chunk_ns[0] if len(self.chunk_ns) > 1 else 0

    @property
    def decode_tokens(self) -> int:
        """Tokens after the first chunk's: the first chunk belongs to prefill (it may carry more than one)."""
        return self.output_tokens - self.chunk_tokens[0] if self.chunk_tokens else 0

    @property
    def decode_tokens_per_second(self) -> float | None:
        """decode_tokens / (last chunk - first chunk)."""
        d = self.decode_ns
        return self.decode_tokens * 1e9 / d if d > 0 else None

    @property
    def spec_tokens(self) -> int:
        """Tokens the verify rounds produced: their accepted drafts plus one each where the server counts
        them (vLLM, whose steps without a draft are no verify round); else all but the first, which prefill
        made (SGLang: every decode round verifies). The one rule for both: 1 + accepted / rounds."""
        if self.spec is not None and self.spec.accepted_drafts is not None:
            return self.spec.accepted_drafts + self.spec.verify_ct
        return self.output_tokens - 1

    @property
    def accept_length(self) -> float | None:
        """Client-side accept length: ``spec_tokens`` / verify rounds."""
        if self.spec is None or self.spec.verify_ct <= 0:
            return None
        return self.spec_tokens / self.spec.verify_ct


@dataclass(frozen=True, slots=True)
class ServerSample:
    """One periodic server report: an SGLang decode/prefill line, a vLLM spec line, or a metrics scrape."""

    source: SampleSource
    dp_rank: str = ""
    wall_time: str = ""  # as printed; only labels output
    accept_length: float | None = None
    accept_rate: float | None = None  # 0..1
    gen_throughput: float | None = None  # tokens/s
    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None  # KV-cache usage, 0..1
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    position_acceptance: tuple[float, ...] = ()  # index 0 = draft position 1
    iteration: int | None = None
    speculative_steps: float | None = None  # draft steps in use now (SGLang's running value; vLLM's mean K)

    @property
    def is_decode(self) -> bool:
        """Prefill lines report neither decode throughput nor the decode batch: they never count as load."""
        return self.source != "sglang_prefill"


@dataclass(frozen=True, slots=True)
class LoopLag:
    """The client's own event-loop lag over a run (``probe.lag.loop_lag``): the worst interval's p99, the largest
    sample, how many intervals were distorted and when (the spans mark the requests that ran then)."""

    threshold_ms: float = 1.0
    intervals: int = 0
    distorted_intervals: int = 0
    worst_interval_p99_ms: float | None = None
    max_ms: float | None = None
    samples: int = 0
    distorted_spans_ns: tuple[tuple[int, int], ...] = ()
    distorted_cpu_share: float | None = None  # the probe process's CPU time / wall time over the distorted intervals
    cpus: int = 0  # cores the run could use (0: not recorded)
    workers: int = 1  # probe processes it ran

    def overlaps(self, start_ns: int, end_ns: int) -> bool:
        return any(a < end_ns and start_ns < b for a, b in self.distorted_spans_ns)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A bench run's arrivals in ``vllm bench serve``'s terms, as its results document writes them."""

    num_prompts: int = 0  # measured requests
    request_rate: float | str = "inf"  # requests per second; "inf" (vLLM's spelling): a closed loop, all at once
    burstiness: float | str = 1.0  # the gamma arrivals' shape (1: Poisson, vLLM's default); "inf": constant gaps
    max_concurrency: int | None = None  # streams (closed loop) or the cap on them (open loop)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a bench run was pointed at; written first in a records file so a replay can print the same report."""

    server_url: str
    api: str
    model: str
    server_info: dict[str, Any] = field(default_factory=dict)  # the server's own answer, kept as it gave it
    steps: int | None = None  # its draft steps as detection read them (0: plain decoding; None: it did not say)
    draft_tokens: int | None = None  # its verify width
    lifetime_accept_length: float | None = None  # the server's own running average, asked after the run
    settings: dict[str, Any] = field(default_factory=dict)  # the bench options, as given
    start_wall_s: float | None = None  # Unix time of the first send: labels a replay's .hlog like the run's
    loop_lag: LoopLag = LoopLag()  # the client's own event-loop lag
    server_running: tuple[int, ...] = ()  # running requests in the server's /metrics while the run ran (busy only)
    schedule: Schedule = Schedule()  # the arrivals (absent from records files before 0.5: the default)
    server_queued: tuple[int, ...] = ()  # waiting requests in the server's /metrics at each sample (absent before 0.6)


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """Self-health of the log source, the scrape and the recorder, as exported at scrape time."""

    configured: bool = False  # a log source (file, command or stdin) is configured
    up: bool = False
    restarts: int = 0  # file reopenings or command restarts
    last_error: str = ""
    lines: dict[str, int] = field(default_factory=dict)  # by LOG_RESULTS
    skipped: dict[str, int] = field(default_factory=dict)  # by SKIP_REASONS
    last_sample_unix_s: float = 0.0  # 0 before the first parsed sample
    scrape_rejected: int = 0  # values refused in the server's /metrics
    out_of_range: dict[str, int] = field(default_factory=dict)  # HDR values out of range, by metric


@dataclass(frozen=True, slots=True)
class Quantiles:
    """HDR-exact quantiles of one latency metric over one window, in seconds, with the exact count and sum."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None
    count: int
    sum: float


@dataclass(frozen=True, slots=True)
class ProbeWindow:
    """One target's probes over one window, computed once per tick and read by every exporter."""

    requests: int
    ok: int
    errors: int  # requests - ok
    outcomes: dict[str, int]  # every OUTCOMES key
    tokens_per_second: float | None  # token-weighted decode rate
    tokens_per_second_relative_stderr: float | None  # of the mean per-request decode tok/s
    accept_length: float | None  # client-side
    server_reported_accept_length: float | None  # mean of the servers' per-request spec_accept_length
    tokens_per_chunk: float | None
    position_acceptance: tuple[float, ...]  # index 0 = draft position 1
    approximated_requests: int  # token counts apportioned from a final total
    latency_s: dict[str, Quantiles]  # every LATENCY_METRICS key
    position_rounds: int = 0  # verify rounds the position acceptance was counted over


@dataclass(frozen=True, slots=True)
class ServerWindow:
    """Server samples over one window (prefill lines do not count towards throughput)."""

    accept_length: float | None
    accept_rate: float | None
    gen_throughput: float | None
    samples: int
    position_acceptance: tuple[float, ...] = ()  # mean of the samples' per-position rates (vLLM's log lines)
