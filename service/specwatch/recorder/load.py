"""The server's load over time, and the probes' decode rate by load. Recorder stage.

``LoadTracker`` keeps the running-request counts the server reports — SGLang's decode lines
(``#running-req``), vLLM's stats line (``Running: N reqs``) and either server's scraped gauge
(``sglang:num_running_reqs``, ``vllm:num_requests_running``) — for a few minutes. A probe's load is the mean
of the counts reported while it ran, or the last count before it ended when none came in meanwhile (a vLLM
line comes every 10 s), unless that count is older than ``stale_s``: then the load is unknown. With DP
ranks each scheduler reports its own batch: the load is their mean (the batch a probe joins).

``LoadCurve`` sums each successful probe into its load bucket (a closed set: the nearest power of two, the
last open ended) over ``window_s`` (hours of production traffic), in O(1) per probe: per bucket the decode tokens and
seconds, the per-request rates' sum and sum of squares (their spread), the loads (the bucket's mean), and
the spec tokens and verify rounds of probes that reported them (the bucket's accept length, so its cycle time
— a property of cost, stable when acceptance moves — for the live advisor).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from ..records import RequestRecord, ServerSample
from .stats import relative_stderr

LOAD_SOURCES = ("sglang_decode", "vllm_engine", "scrape")  # ServerSample.source values whose running counts
LOAD_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the nearest power of two (in log scale); 256 and above
MAX_SAMPLES = 10_000


def bucket_of(load: float) -> int:
    """The power of two nearest ``load`` in log scale: 32 holds ~22.6 to ~45.3 running requests, so a server
    at "32" whose count dips to 31 now and then stays in one bucket."""
    if load <= 1:
        return 1
    return min(LOAD_BUCKETS[-1], 2 ** round(math.log2(load)))


class LoadTracker:
    def __init__(self, stale_s: float = 30.0, keep_s: float = 900.0) -> None:
        self.stale_ns = int(stale_s * 1e9)
        self.keep_ns = int(keep_s * 1e9)
        self.samples: collections.deque[tuple[int, int]] = collections.deque(maxlen=MAX_SAMPLES)

    def add(self, s: ServerSample, now_ns: int) -> None:
        if s.running is not None and s.source in LOAD_SOURCES:
            self.samples.append((now_ns, s.running))
            while self.samples and now_ns - self.samples[0][0] > self.keep_ns:
                self.samples.popleft()

    def during(self, t0_ns: int, t1_ns: int) -> float | None:
        """Mean running requests reported in [t0, t1]; else the last report before t1 if fresh; else None.
        Walks back from the newest report and stops at the first before t0: a request's own span, not the whole
        history (samples are in time order; this runs once per request)."""
        inside: list[int] = []
        for t, n in reversed(self.samples):
            if t > t1_ns:
                continue
            if t < t0_ns:
                if not inside and t1_ns - t <= self.stale_ns:
                    return float(n)
                break
            inside.append(n)
        return sum(inside) / len(inside) if inside else None

    def current(self, now_ns: int, window_s: float) -> float | None:
        return self.during(now_ns - int(window_s * 1e9), now_ns)


@dataclass(slots=True)
class _Sums:
    n: int = 0
    tokens: float = 0.0
    seconds: float = 0.0
    rate_sum: float = 0.0
    rate_sq: float = 0.0
    load_sum: float = 0.0
    spec_tokens: int = 0  # of the probes that reported verify rounds: their accept length is these / rounds
    rounds: int = 0

    def add(self, sign: int, tokens: float, seconds: float, load: float, spec: tuple[int, int]) -> None:
        rate = tokens / seconds
        self.n += sign
        self.tokens += sign * tokens
        self.seconds += sign * seconds
        self.rate_sum += sign * rate
        self.rate_sq += sign * rate * rate
        self.load_sum += sign * load
        self.spec_tokens += sign * spec[0]
        self.rounds += sign * spec[1]


@dataclass(frozen=True, slots=True)
class LoadBucket:
    bucket: int
    requests: int
    mean_load: float
    tokens_per_second: float
    relative_stderr: float | None  # of tokens_per_second, from the per-request spread
    accept_length: float | None = None  # of its probes that reported verify rounds (None: none did)
    rounds_per_token: float = 0.0  # verify rounds its probes reported per decode token (0: no draft seen)

    @property
    def cycle_s(self) -> float | None:
        """Seconds per verify round at this load: accept length ÷ per-stream decode tok/s (``verdict``'s rule)."""
        return self.accept_length / self.tokens_per_second if self.accept_length and self.tokens_per_second > 0 \
            else None


def decode_rate(rec: RequestRecord) -> tuple[float, float] | None:
    """(decode tokens, decode seconds) of a successful probe, as the windows count them (``RequestRecord``)."""
    if not rec.ok or rec.decode_ns <= 0 or rec.decode_tokens <= 0:
        return None
    return float(rec.decode_tokens), rec.decode_ns / 1e9


class LoadCurve:
    def __init__(self, window_s: float) -> None:
        self.window_ns = int(window_s * 1e9)
        self.sums = {b: _Sums() for b in LOAD_BUCKETS}
        self.entries: collections.deque[tuple[int, int, float, float, float, tuple[int, int]]] = collections.deque()

    def add(self, rec: RequestRecord, load: float | None, now_ns: int) -> None:
        rate = decode_rate(rec)
        if rate is None or load is None or not math.isfinite(load):
            return
        b = bucket_of(load)
        spec = (rec.spec_tokens, rec.spec.verify_ct) if rec.accept_length is not None and rec.spec else (0, 0)
        self.sums[b].add(1, rate[0], rate[1], load, spec)
        self.entries.append((now_ns, b, rate[0], rate[1], load, spec))
        self.expire(now_ns)

    def expire(self, now_ns: int) -> None:
        while self.entries and now_ns - self.entries[0][0] > self.window_ns:
            _, b, tokens, seconds, load, spec = self.entries.popleft()
            self.sums[b].add(-1, tokens, seconds, load, spec)

    def buckets(self) -> list[LoadBucket]:
        out = []
        for b, s in self.sums.items():
            if s.n <= 0 or s.seconds <= 0:
                continue
            out.append(LoadBucket(b, s.n, s.load_sum / s.n, s.tokens / s.seconds,
                                  relative_stderr(s.n, s.rate_sum, s.rate_sq),
                                  s.spec_tokens / s.rounds if s.rounds > 0 else None,
                                  s.rounds / s.tokens if s.tokens > 0 else 0.0))
        return out
