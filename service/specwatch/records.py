"""Records: the only types that cross module lines. Imports nothing from the project.

Flow: sources (client, log tail, scrape) produce ``RequestRecord`` and ``ServerSample``; the recorder
consumes them; exporters read the recorder. Times are monotonic nanoseconds unless a name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    OK = "ok"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    STREAM_ERROR = "stream_error"
    CANCELLED = "cancelled"


OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)


@dataclass(frozen=True, slots=True)
class SpecStats:
    """Speculative fields the server reported for one request (SGLang's final ``meta_info``)."""

    verify_ct: int
    accept_length: float | None = None  # the server's own spec_accept_length (completion / verify_ct)
    accept_rate: float | None = None
    correct_drafts: int | None = None
    proposed_drafts: int | None = None
    histogram: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestRecord:
    api: str  # "sglang" | "completions" | "chat"
    target: str  # "spec" | "baseline"
    prompt_id: str
    domain: str
    warmup: bool
    intended_ns: int  # when the schedule said the request should start
    sent_ns: int  # when it was actually handed to the connection
    done_ns: int
    chunk_ns: tuple[int, ...]  # arrival of every chunk that carried tokens
    chunk_tokens: tuple[int, ...]  # tokens in each such chunk
    tokens_exact: bool  # chunk_tokens came from server counts, not apportioned from a final total
    prompt_tokens: int
    output_tokens: int
    outcome: Outcome
    status: int | None = None
    error: str = ""
    spec: SpecStats | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def first_chunk_ns(self) -> int | None:
        return self.chunk_ns[0] if self.chunk_ns else None

    @property
    def last_chunk_ns(self) -> int | None:
        return self.chunk_ns[-1] if self.chunk_ns else None

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
    def schedule_lag_ns(self) -> int:
        return max(0, self.sent_ns - self.intended_ns)

    @property
    def decode_ns(self) -> int:
        return self.chunk_ns[-1] - self.chunk_ns[0] if len(self.chunk_ns) > 1 else 0

    @property
    def decode_tokens_per_second(self) -> float | None:
        """(tokens - 1) / (last chunk - first chunk): the first token belongs to prefill."""
        d = self.decode_ns
        return (self.output_tokens - self.chunk_tokens[0]) * 1e9 / d if d > 0 else None

    @property
    def accept_length(self) -> float | None:
        """Client-side accept length: (completion_tokens - 1) / spec_verify_ct."""
        if self.spec is None or self.spec.verify_ct <= 0:
            return None
        return (self.output_tokens - 1) / self.spec.verify_ct


@dataclass(frozen=True, slots=True)
class ServerSample:
    """One periodic server report: an SGLang decode/prefill line, a vLLM spec line, or a metrics scrape."""

    source: str  # "sglang_decode" | "sglang_prefill" | "vllm_spec" | "scrape"
    dp_rank: str = ""
    wall_time: str = ""  # as printed; only labels output
    accept_length: float | None = None
    accept_rate: float | None = None
    gen_throughput: float | None = None
    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    position_acceptance: tuple[float, ...] = ()
    iteration: int | None = None
